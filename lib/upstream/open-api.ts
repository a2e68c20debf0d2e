/**
 * Open API token flow (spec: shared/spec/open-api-token-flow.md).
 *
 * Two variants share one flow: authorize (GET, returns a code) then access-token (POST, returns
 * the token), one method each, so that the caller fences between them, outside this client's
 * retries. Each variant is a request builder plus a parser (`variants.ts`, `requests.ts`); the
 * parsers take a plain `Response` so they can be tested without a network. Nothing here logs,
 * and no error message ever contains a credential: values the upstream echoes back are
 * redacted before use, and the authorization code leaves only sealed.
 */

import { type Clock, systemClock } from '../clock.js';
import type { ConnectionConfig } from '../config.js';
import { UpstreamBadResponseError } from '../errors.js';
import type {
  AuthorizationCode,
  ClientCredentials,
  IssuedToken,
  ProbeVerdict,
  StepOptions,
  TokenIssuer,
  TokenProbe,
} from '../ports.js';
import { type AttemptBounds, attempt } from './attempt.js';
import { openCode, sealCode } from './authorization-code.js';
import { probeToken } from './probe.js';
import { accessTokenRequest, authorizeRequest, signingOf } from './requests.js';
import { DEFAULT_RESILIENCE, UpstreamResilience } from './resilience.js';
import type { Sensitive, Step, TokenLimits } from './responses.js';
import { SIGNATURE_HEADER } from './signing.js';
import { isSignatureRejection, signatureRejection } from './strict-mode.js';
import { PROTOCOLS } from './variants.js';

export { probeRequest, probeVerdict } from './probe.js';
export { accessTokenRequest, authorizeRequest, signingOf } from './requests.js';
export {
  readJsonBody,
  type TokenLimits,
  tokenFromPayload,
  unwrapV3Envelope,
  V3_SUCCESS_CODE,
} from './responses.js';
export { isSignatureRejection } from './strict-mode.js';

export interface OpenApiClientOptions {
  /** Time limit of each upstream request (connecting included); the caller's deadline may shorten it. */
  readonly timeoutMs: number;
  /** Retries and circuit breaking; defaults to {@link DEFAULT_RESILIENCE}. */
  readonly resilience?: UpstreamResilience;
  readonly limits: TokenLimits;
  /** Injectable for tests; defaults to the platform fetch (honours NODE_EXTRA_CA_CERTS). */
  readonly fetch?: typeof fetch;
  /**
   * The wall clock, read only for epochs: a token request's send time (its `issuedAt`), the
   * signing timestamp and a Retry-After date. Deadlines come as {@link StepOptions.deadline},
   * on the monotonic clock. Defaults to the system clock.
   */
  readonly clock?: Pick<Clock, 'now'>;
}

/** {@link TokenIssuer} and {@link TokenProbe} over HTTPS with the platform `fetch`. */
export class OpenApiClient implements TokenIssuer, TokenProbe {
  readonly #fetch: typeof fetch;
  readonly #clock: Pick<Clock, 'now'>;
  readonly #resilience: UpstreamResilience;

  constructor(private readonly options: OpenApiClientOptions) {
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#clock = options.clock ?? systemClock;
    this.#resilience = options.resilience ?? new UpstreamResilience(DEFAULT_RESILIENCE);
  }

  async authorize(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    { deadline, signal }: StepOptions,
  ): Promise<AuthorizationCode> {
    const sensitive = [credentials.clientSecret];
    const body = await this.#send(
      connection,
      async () => authorizeRequest(connection, credentials.clientId),
      'authorize',
      { deadline, signal },
      sensitive,
    );
    return sealCode(PROTOCOLS[connection.variant].parseAuthorize(body, connection, sensitive));
  }

  async requestToken(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    sealed: AuthorizationCode,
    { deadline, signal, sendBy }: StepOptions,
  ): Promise<IssuedToken> {
    const protocol = PROTOCOLS[connection.variant];
    const code = openCode(sealed);
    // Expiry counts from the moment the token request leaves (after the caller's fence, which
    // may wait out the lease's countdown), never from the upstream clock. Only an attempt
    // proved unsent is retried, so the one that answers is the last one built.
    let requestedAt = this.#clock.now();
    // The code is single-use: a retry of this step may be refused, which is then reported.
    // Each attempt is built (and signed, with its own timestamp) afresh.
    const signing = signingOf(connection);
    // Grows with each attempt's signature: an upstream that echoes one in its error text must
    // not get it into a message.
    const tokenSensitive = [credentials.clientSecret, code];
    const signedRequest = async () => {
      requestedAt = this.#clock.now();
      const request = accessTokenRequest(connection, credentials, code, requestedAt);
      const signature = request.headers.get(SIGNATURE_HEADER);
      if (signature !== null) tokenSensitive.push(signature);
      return request;
    };
    try {
      const tokenBody = await this.#send(
        connection,
        signedRequest,
        'access-token',
        { deadline, signal, sendBy },
        tokenSensitive,
      );
      return {
        ...protocol.parseToken(tokenBody, this.options.limits, tokenSensitive),
        requestedAt,
      };
    } catch (error) {
      if (connection.variant === 'v3' && isSignatureRejection(error, signing !== undefined)) {
        throw signatureRejection(error, connection, signing);
      }
      // An answer we cannot read came from a request the upstream processed: it may have issued.
      if (error instanceof UpstreamBadResponseError && !error.outcomeUnknown) {
        throw new UpstreamBadResponseError(error.message, { cause: error, outcomeUnknown: true });
      }
      throw error;
    }
  }

  /**
   * Whether the Open API accepts `accessToken`, with the connection's probe: one attempt, out
   * of the retry and circuit-breaker policies of the token flow (a failed probe only leaves a
   * report to the age rules, and must not pause issuance).
   */
  probe(
    connection: ConnectionConfig,
    accessToken: string,
    options: StepOptions,
  ): Promise<ProbeVerdict> {
    const context = { fetch: this.#fetch, timeoutMs: this.options.timeoutMs };
    return probeToken(context, connection, accessToken, options);
  }

  /** One upstream request under the connection's retry and circuit-breaker policies. */
  #send(
    connection: ConnectionConfig,
    request: () => Promise<Request>,
    step: Step,
    bounds: AttemptBounds,
    sensitive: Sensitive,
  ) {
    const context = { fetch: this.#fetch, clock: this.#clock, timeoutMs: this.options.timeoutMs };
    return this.#resilience.execute(connection.name, bounds.deadline, async () =>
      attempt(context, await request(), step, bounds, sensitive),
    );
  }
}
