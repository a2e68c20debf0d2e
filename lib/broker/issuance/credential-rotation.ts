/**
 * Credential rotation around the flow: when the upstream rejects the client's credentials, the
 * secret is read again bypassing caches and, if it changed, the whole flow runs once more.
 */
import { type Clock, systemClock } from '../../clock.js';
import { SecretUnavailableError, UpstreamRejectedError } from '../../errors.js';
import type { SecretSource, TokenIssuer } from '../../ports.js';
import { SIGNATURE_REFUSAL, TIMESTAMP_REFUSAL } from '../../upstream/rejections.js';
import { withDeadline } from '../single-flight.js';
import type { BrokerLogger } from '../types.js';
import { type Issue, issueWith } from './issue-flow.js';

export type { Issue, IssueOptions } from './issue-flow.js';

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
    const { secrets, issuer, logger } = deps;
    const clock = deps.clock ?? systemClock;
    // The caller's deadline (I3): a slow Secrets Manager must not keep the caller past it.
    const { deadline } = options;
    const credentials = await withDeadline(
      secrets.getCredentials(connection.secretId),
      deadline.leftMs(),
      clock,
      () =>
        new SecretUnavailableError(
          `The secret of connection '${connection.name}' was not read in time; retry shortly`,
        ),
    );
    try {
      return await issueWith(issuer, connection, credentials, options);
    } catch (error) {
      if (!isCredentialRejection(error)) throw error;
      // Within the caller's deadline: past it, the rejection is the answer.
      const fresh = await withDeadline(
        secrets.getCredentials(connection.secretId, { forceFetch: true }),
        deadline.leftMs(),
        clock,
        () => error as Error,
      );
      if (
        fresh.clientId === credentials.clientId &&
        fresh.clientSecret === credentials.clientSecret
      ) {
        throw error;
      }
      logger.warn('Credentials rejected; the secret changed, retrying once with the new one', {
        connection: connection.name,
      });
      // Authorize → fence → token request afresh: the first code was the old client's.
      return await issueWith(issuer, connection, fresh, options);
    }
  };
