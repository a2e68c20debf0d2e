/**
 * One run of the upstream flow, its steps in the open: authorize, the fence, the token request.
 * The fence runs once, between the issuer's two calls: the issuer retries only attempts proved
 * unsent, none after the lease's signal aborts, so the confirmed lease covers every attempt.
 */
import type { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { ClientCredentials, IssuedToken, TokenIssuer } from '../../ports.js';

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
  // 3. The token request, which may revoke every earlier token; no attempt after `sendBy`.
  return issuer.requestToken(connection, credentials, code, {
    deadline,
    signal,
    ...(sendBy ? { sendBy } : {}),
  });
};
