/**
 * One run of the upstream flow, its steps in the open: authorize, the fence, the token request;
 * run once more with a re-read secret when the upstream rejects the client's credentials. The
 * fence runs once, between the issuer's two calls: the issuer retries only attempts proved
 * unsent, none after the lease's signal aborts, so the confirmed lease covers every attempt.
 */
import { type Clock, type Deadline, systemClock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { SecretUnavailableError, UpstreamRejectedError } from '../../errors.js';
import type { ClientCredentials, IssuedToken, SecretSource, TokenIssuer } from '../../ports.js';
import { SIGNATURE_REFUSAL, TIMESTAMP_REFUSAL } from '../../upstream/rejections.js';
import { withDeadline } from '../single-flight.js';
import type { BrokerLogger } from '../types.js';

/** How one run of the flow is bounded and fenced. */
export interface IssueOptions {
  /** The caller's deadline, monotonic, handed to each step as it is (I3). */
  readonly deadline: Deadline;
  /** Aborts every upstream request in flight (the lease was lost, or its time ran out). */
  readonly signal?: AbortSignal | undefined;
  /**
   * The fence: called once per token request, after the code is in hand and before any attempt
   * is sent; throws to stop. It may resolve with the instant after which no attempt may leave,
   * which each attempt checks just before it is sent (A2).
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a fence that only waits resolves with nothing
  readonly fence?: (() => Promise<Deadline | void>) | undefined;
}

/** Runs the flow for a connection with whatever credentials are current. */
export type Issue = (connection: ConnectionConfig, options: IssueOptions) => Promise<IssuedToken>;

export const issueWith = async (
  issuer: TokenIssuer,
  connection: ConnectionConfig,
  credentials: ClientCredentials,
  { deadline, signal, fence }: IssueOptions,
): Promise<IssuedToken> => {
  // 1. The code: harmless (it issues and revokes nothing), asked for while the lease counts down.
  const code = await issuer.authorize(connection, credentials, { deadline, signal });
  // 2. The fence: throws to stop, before anything that may revoke a token is sent.
  const sendBy = await fence?.();
  // 3. The token request, which may revoke every earlier token; no attempt after `sendBy`.
  return issuer.requestToken(connection, credentials, code, {
    deadline,
    signal,
    ...(sendBy ? { sendBy } : {}),
  });
};

/** The upstream refused the client's credentials (401/403, or a code or message that says so). */
export const isCredentialRejection = (error: unknown): boolean => {
  if (!(error instanceof UpstreamRejectedError)) return false;
  if (error.upstreamStatus === 401 || error.upstreamStatus === 403) return true;
  const said = `${error.upstreamCode ?? ''} ${error.upstreamMessage ?? ''}`;
  return (
    /(invalid|unknown|bad)[ _-]?(client|credential|secret)|unauthori[sz]ed|authentication failed/i.test(
      said,
    ) ||
    // A refused signature may be a rotated secret; a refused timestamp is a clock, never a secret.
    (SIGNATURE_REFUSAL.test(said) && !TIMESTAMP_REFUSAL.test(said))
  );
};

export const withCredentialRotation =
  (deps: {
    readonly secrets: SecretSource;
    readonly issuer: TokenIssuer;
    readonly logger: BrokerLogger;
    readonly clock?: Clock | undefined;
  }): Issue =>
  async (connection, options) => {
    const { secrets, issuer, logger, clock = systemClock } = deps;
    // The caller's deadline (I3): a slow Secrets Manager must not keep the caller past it.
    const { deadline } = options;
    const { name, secretId } = connection;
    const message = `The secret of connection '${name}' was not read in time; retry shortly`;
    const read = secrets.getCredentials(secretId);
    const late = () => new SecretUnavailableError(message);
    const credentials = await withDeadline(read, deadline.leftMs(), clock, late);
    try {
      return await issueWith(issuer, connection, credentials, options);
    } catch (error) {
      if (!isCredentialRejection(error)) throw error;
      // Within the caller's deadline: past it, the rejection is the answer.
      const reread = secrets.getCredentials(secretId, { forceFetch: true });
      const fresh = await withDeadline(reread, deadline.leftMs(), clock, () => error as Error);
      if (
        fresh.clientId === credentials.clientId &&
        fresh.clientSecret === credentials.clientSecret
      ) {
        throw error;
      }
      logger.warn('Credentials rejected; the secret changed, retrying once with the new one', {
        connection: name,
      });
      // Authorize → fence → token request afresh: the first code was the old client's.
      return await issueWith(issuer, connection, fresh, options);
    }
  };
