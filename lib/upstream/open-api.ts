/**
 * Open API token flow (spec: shared/spec/open-api-token-flow.md).
 *
 * Two variants share one flow: authorize (GET, returns a code) then access-token (POST, returns
 * the token). Each variant is a request builder plus a parser; the parsers take a plain
 * `Response` so they can be tested without a network. Nothing here logs, and no error message
 * ever contains a credential: values the upstream echoes back are redacted before use.
 */

import type { ConnectionConfig, Variant } from '../config.js';
import {
  printable,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../errors.js';
import type { ClientCredentials, IssuedToken, IssueOptions, TokenIssuer } from '../ports.js';
import { isStrictModeRefusal } from './rejections.js';
import { DEFAULT_RESILIENCE, UpstreamResilience } from './resilience.js';
import {
  authorizationCode,
  isObject,
  type Json,
  readJsonBody,
  type Sensitive,
  type Step,
  type TokenLimits,
  tokenFromPayload,
  unwrapV3Envelope,
} from './responses.js';

export {
  readJsonBody,
  type TokenLimits,
  tokenFromPayload,
  unwrapV3Envelope,
  V3_SUCCESS_CODE,
} from './responses.js';

import {
  DEFAULT_SIGNING,
  describeSigning,
  SIGNATURE_HEADER,
  type SigningConfig,
  signingHeaders,
} from './signing.js';

const USER_AGENT = 'open-api-token-broker/0.1';

/** One variant of the protocol: how to build each request and read each response. */
interface VariantProtocol {
  readonly prefix: string;
  parseAuthorize(body: unknown, connection: ConnectionConfig, sensitive: Sensitive): string;
  tokenBody(credentials: ClientCredentials, code: string): Json;
  parseToken(
    body: unknown,
    limits: TokenLimits,
    sensitive: Sensitive,
  ): Omit<IssuedToken, 'requestedAt'>;
}

const v3: VariantProtocol = {
  prefix: '/open-api/v3',
  parseAuthorize: (body, connection, sensitive) =>
    authorizationCode(unwrapV3Envelope(body, 'authorize', sensitive), connection.codeField, 'data'),
  // The current variant never receives the client secret.
  tokenBody: ({ clientId }, code) => ({ clientId, code }),
  parseToken: (body, limits, sensitive) =>
    tokenFromPayload(unwrapV3Envelope(body, 'access-token', sensitive), limits),
};

const legacy: VariantProtocol = {
  prefix: '/open-api',
  parseAuthorize: (body) => {
    if (!isObject(body)) {
      throw new UpstreamBadResponseError('Open API authorize response is not a JSON object');
    }
    return authorizationCode(body, 'code', 'body');
  },
  tokenBody: ({ clientId, clientSecret }, code) => ({ clientId, clientSecret, code }),
  parseToken: (body, limits) => {
    if (!isObject(body)) {
      throw new UpstreamBadResponseError('Open API access-token response is not a JSON object');
    }
    return tokenFromPayload(body, limits);
  },
};

const PROTOCOLS: Readonly<Record<Variant, VariantProtocol>> = { v3, legacy };

/** Builds the authorize request (GET with `clientId` in the query). */
export const authorizeRequest = (connection: ConnectionConfig, clientId: string): Request => {
  const url = new URL(
    `${connection.baseUrl}${PROTOCOLS[connection.variant].prefix}/oauth/authorize`,
  );
  url.searchParams.set('clientId', clientId);
  return new Request(url, {
    method: 'GET',
    headers: { accept: 'application/json', 'user-agent': USER_AGENT },
  });
};

/**
 * The connection's signing scheme, or `undefined` when its requests are not signed. Only v3
 * access-token requests are signed (Strict Access Token Mode); the legacy variant sends the secret.
 */
export const signingOf = (connection: ConnectionConfig): SigningConfig | undefined =>
  connection.variant !== 'v3' || connection.signing === false
    ? undefined
    : (connection.signing ?? DEFAULT_SIGNING);

/**
 * Builds the access-token request (POST with a JSON body that depends on the variant). A v3
 * request is signed with `X-Timestamp` and `X-Signature` at `nowMs` unless signing is off.
 */
export const accessTokenRequest = (
  connection: ConnectionConfig,
  credentials: ClientCredentials,
  code: string,
  nowMs: number = Date.now(),
): Request => {
  const protocol = PROTOCOLS[connection.variant];
  const body = protocol.tokenBody(credentials, code);
  // Serialised once: `{body}` signs exactly the bytes that are sent.
  const bodyText = JSON.stringify(body);
  const signing = signingOf(connection);
  return new Request(`${connection.baseUrl}${protocol.prefix}/oauth/access-token`, {
    method: 'POST',
    headers: {
      accept: 'application/json',
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      ...(signing && signingHeaders(credentials.clientSecret, signing, { body, bodyText }, nowMs)),
    },
    body: bodyText,
  });
};

// What a provider says when it refuses a signature or its timestamp (the codes are not public).

/**
 * A rejection of an access-token request that points at strict mode: an upstream code or
 * message about the signature or the timestamp, or, when the request was signed, HTTP 401/403.
 */
export const isSignatureRejection = (
  error: unknown,
  signed: boolean,
): error is UpstreamRejectedError => {
  if (!(error instanceof UpstreamRejectedError)) return false;
  const status = error.upstreamStatus;
  if (signed && (status === 401 || status === 403)) return true;
  return isStrictModeRefusal(`${error.upstreamCode ?? ''} ${error.upstreamMessage ?? ''}`);
};

/**
 * Restates a strict-mode rejection for the operator: what the connection signs with (settings,
 * never a value) and what to check. Code, message and status of the upstream are kept.
 */
const signatureRejection = (
  error: UpstreamRejectedError,
  connection: ConnectionConfig,
  signing: SigningConfig | undefined,
): UpstreamRejectedError => {
  const said = [
    error.upstreamCode !== undefined && `code ${error.upstreamCode}`,
    error.upstreamMessage,
  ]
    .filter(Boolean)
    .join(': ');
  const status = error.upstreamStatus;
  const upstream = [status !== undefined && `HTTP ${status}`, said].filter(Boolean).join(', ');
  const advice = signing
    ? `Connection '${connection.name}' signs with ${describeSigning(signing)} (connection field "signing"): ` +
      'confirm the string-to-sign and encoding with the provider, check that the client secret is current, ' +
      'and that this clock is within 5 minutes of theirs'
    : `Connection '${connection.name}' has signing turned off ("signing": false): the provider runs this client in ` +
      'strict mode, so remove that setting (the default signs) or set the scheme the provider confirms';
  return new UpstreamRejectedError(
    `Open API rejected the ${signing ? 'signed ' : ''}access-token request (Strict Access Token Mode)${upstream ? `: ${upstream}` : ''}. ${advice}`,
    {
      upstreamStatus: error.upstreamStatus,
      upstreamCode: error.upstreamCode,
      upstreamMessage: error.upstreamMessage,
      details: error.details,
      cause: error,
    },
  );
};

export interface OpenApiClientOptions {
  /** Time limit of each upstream request (connecting included); the caller's deadline may shorten it. */
  readonly timeoutMs: number;
  /** Retries and circuit breaking; defaults to {@link DEFAULT_RESILIENCE}. */
  readonly resilience?: UpstreamResilience;
  readonly limits: TokenLimits;
  /** Injectable for tests; defaults to the platform fetch (honours NODE_EXTRA_CA_CERTS). */
  readonly fetch?: typeof fetch;
  readonly now?: () => number;
}

/** {@link TokenIssuer} over HTTPS with the platform `fetch`. */
export class OpenApiClient implements TokenIssuer {
  readonly #fetch: typeof fetch;
  readonly #now: () => number;
  readonly #resilience: UpstreamResilience;

  constructor(private readonly options: OpenApiClientOptions) {
    this.#fetch = options.fetch ?? globalThis.fetch;
    this.#now = options.now ?? (() => Date.now());
    this.#resilience = options.resilience ?? new UpstreamResilience(DEFAULT_RESILIENCE, this.#now);
  }

  async issue(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    { deadline, signal, beforeAccessToken }: IssueOptions,
  ): Promise<IssuedToken> {
    const protocol = PROTOCOLS[connection.variant];
    const sensitive = [credentials.clientSecret];

    const authorizeBody = await this.#send(
      connection,
      async () => authorizeRequest(connection, credentials.clientId),
      'authorize',
      { deadline, signal },
      sensitive,
    );
    const code = protocol.parseAuthorize(authorizeBody, connection, sensitive);
    const withCode = [...sensitive, code];

    // Expiry counts from the moment the token request leaves (after the fence, which may wait
    // out the lease's countdown), never from the upstream clock. Only an attempt proved unsent
    // is retried, so the one that answers is the last one built.
    let requestedAt = this.#now();
    // The code is single-use: a retry of this step may be refused, which is then reported.
    // Each attempt is built (and signed, with its own timestamp) afresh.
    const signing = signingOf(connection);
    // Grows with each attempt's signature: an upstream that echoes one in its error text must
    // not get it into a message.
    const tokenSensitive = [...withCode];
    const signedRequest = async () => {
      // The lease holder's fence: a POST leaves only under a lease that covers it.
      await beforeAccessToken?.();
      requestedAt = this.#now();
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
        { deadline, signal },
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

  /** One upstream request under the connection's retry and circuit-breaker policies. */
  #send(
    connection: ConnectionConfig,
    request: () => Promise<Request>,
    step: Step,
    bounds: { readonly deadline: number; readonly signal: AbortSignal | undefined },
    sensitive: Sensitive,
  ) {
    return this.#resilience.execute(connection.name, bounds.deadline, async () =>
      this.#attempt(await request(), step, bounds, sensitive),
    );
  }

  async #attempt(
    request: Request,
    step: Step,
    {
      deadline,
      signal: outer,
    }: { readonly deadline: number; readonly signal: AbortSignal | undefined },
    sensitive: Sensitive,
  ) {
    const budget = Math.min(this.options.timeoutMs, deadline - this.#now());
    if (budget <= 0) {
      throw new UpstreamUnavailableError(`No time left to call the Open API ${step} endpoint`, {
        retryAfterSeconds: 1,
      });
    }
    // Stopped by the caller (the lease) before anything was sent: its reason is the answer.
    if (outer?.aborted) throw outer.reason;
    const timeout = AbortSignal.timeout(budget);
    const signal = outer ? AbortSignal.any([timeout, outer]) : timeout;
    try {
      const response = await this.#fetch(request, { signal });
      return await readJsonBody(response, step, sensitive);
    } catch (error) {
      if (error instanceof UpstreamRejectedError || error instanceof UpstreamBadResponseError) {
        throw error;
      }
      if (error instanceof UpstreamUnavailableError) throw error;
      // A token request that may have reached the upstream, and whose answer we will never
      // read, may still issue a token there (and revoke the earlier ones).
      const outcomeUnknown = step === 'access-token' && !provablyNotSent(error);
      if (outer?.aborted && !outcomeUnknown) throw outer.reason;
      if (signal.aborted) {
        throw new UpstreamUnavailableError(
          outer?.aborted
            ? `Open API ${step} request was abandoned: the lease ended`
            : `Open API ${step} request timed out after ${budget} ms`,
          { retryAfterSeconds: 1, outcomeUnknown, cause: error },
        );
      }
      throw new UpstreamUnavailableError(
        `Open API ${step} request failed: ${networkReason(error)}`,
        { retryAfterSeconds: 1, outcomeUnknown, cause: error },
      );
    }
  }
}

/** Failures that happen before a request can reach the server: it was certainly not processed. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH']);

const provablyNotSent = (error: unknown): boolean => {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  return typeof cause?.code === 'string' && NOT_SENT.has(cause.code);
};

/** A short, credential-free reason for a network failure (`ECONNREFUSED`, `CERT_HAS_EXPIRED`, …). */
const networkReason = (error: unknown): string => {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  if (cause && typeof cause.code === 'string') return printable(cause.code, 40);
  return error instanceof Error ? printable(error.name, 40) : 'unknown error';
};
