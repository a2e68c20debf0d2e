/**
 * One run of the upstream flow, its steps in the open: authorize, the fence, the token request.
 * The fence sits between the issuer's two calls, not inside its retries: it runs once, with the
 * code in hand, and nothing of the token request is sent before it has resolved.
 *
 * Why once is enough: the lease holder's fence confirms a lease that covers one token request's
 * budget plus a grace after it (`held-lease.ts`), and aborts the lease's `signal` when that
 * budget runs out. The issuer retries only attempts proved unsent, and starts none once the
 * signal is aborted; so every attempt that may reach the upstream leaves within the confirmed
 * budget, and the grace covers it landing late, as it covers a single request.
 */
import type { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { ClientCredentials, IssuedToken, TokenIssuer } from '../../ports.js';

/** How one run of the flow is bounded and fenced. */
export interface IssueOptions {
  /**
   * By when the flow must be over (the caller's deadline), on the monotonic clock: handed to
   * each step as it is, so a wall clock stepped during the flow, its retries included,
   * stretches no step (I3).
   */
  readonly deadline: Deadline;
  /** Aborts every upstream request in flight (the lease was lost, or its time ran out). */
  readonly signal?: AbortSignal | undefined;
  /**
   * The fence: called once per access-token request sequence (all the attempts of one token
   * request), after the authorization code is in hand and before any attempt is sent. The
   * lease holder confirms its lease there, so that no token request leaves without a lease
   * that covers it. It throws to stop, and nothing is sent then. It may resolve with the
   * instant after which no attempt may leave (what the lease covers): the token request is
   * bounded by it, and an attempt checks it just before it is sent, so a process paused past
   * it sends nothing (A2, docs/protocol.md).
   */
  // biome-ignore lint/suspicious/noConfusingVoidType: a fence that only waits resolves with nothing
  readonly fence?: (() => Promise<Deadline | void>) | undefined;
}

/** Runs the flow for a connection with whatever credentials are current. */
export type Issue = (connection: ConnectionConfig, options: IssueOptions) => Promise<IssuedToken>;

/** Authorize → fence → token request, with the given credentials. */
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
  // 3. The token request, which may revoke every token issued before it: none of its attempts
  // leaves after what the lease covers (each checks its deadline just before it is sent).
  return issuer.requestToken(connection, credentials, code, {
    deadline,
    signal,
    ...(sendBy ? { sendBy } : {}),
  });
};
