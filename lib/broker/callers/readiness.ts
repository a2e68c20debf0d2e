/**
 * Readiness per connection: its secret readable and a valid token held or obtainable now. What a
 * deploy gates on; `/health` stays liveness.
 */
import type { Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { SecretUnavailableError, toBrokerError } from '../../errors.js';
import type { SecretSource } from '../../ports.js';
import { withDeadline } from '../single-flight.js';
import type { BrokerLogger, TokenAnswer } from '../types.js';

/** One check's outcome; a failure carries the broker's code and message (never a credential). */
type CheckOutcome =
  | { readonly status: 'ok' }
  | {
      readonly status: 'failed';
      readonly error: { readonly code: string; readonly message: string };
    }
  /** Not run: an earlier check of the connection failed. */
  | { readonly status: 'skipped' };

export interface ConnectionReadiness {
  readonly ready: boolean;
  readonly secret: CheckOutcome;
  readonly token: CheckOutcome & { readonly expiresIn?: number; readonly source?: string };
}

export interface ReadinessReport {
  /** Every connection ready. */
  readonly ready: boolean;
  readonly connections: Readonly<Record<string, ConnectionReadiness>>;
}

interface ReadinessDeps {
  readonly secrets: SecretSource;
  /** The check's deadline: a slow Secrets Manager fails the check, it does not hang it (I3). */
  readonly deadline: Deadline;
  readonly clock: Pick<Clock, 'after'>;
  /** A token for the connection, as any caller gets it. */
  readonly getToken: (connection: ConnectionConfig) => Promise<TokenAnswer>;
  readonly now: () => number;
  readonly logger: BrokerLogger;
}

const failed = (error: unknown): CheckOutcome => {
  const failure = toBrokerError(error);
  return { status: 'failed', error: { code: failure.code, message: failure.message } };
};

const checkConnection = async (
  connection: ConnectionConfig,
  deps: ReadinessDeps,
): Promise<ConnectionReadiness> => {
  try {
    await withDeadline(
      deps.secrets.getCredentials(connection.secretId),
      deps.deadline.leftMs(),
      deps.clock,
      () => new SecretUnavailableError(`The secret ${connection.secretId} was not read in time`),
    );
  } catch (error) {
    // A valid token may still be served, but none can be issued: not ready.
    return { ready: false, secret: failed(error), token: { status: 'skipped' } };
  }
  try {
    const { record, source } = await deps.getToken(connection);
    const expiresIn = Math.floor((record.expiresAt - deps.now()) / 1000);
    return { ready: true, secret: { status: 'ok' }, token: { status: 'ok', expiresIn, source } };
  } catch (error) {
    return { ready: false, secret: { status: 'ok' }, token: failed(error) };
  }
};

/** Checks every connection in parallel; one failing does not stop the others. */
export const checkReadiness = async (
  connections: Iterable<ConnectionConfig>,
  deps: ReadinessDeps,
): Promise<ReadinessReport> => {
  const checked = await Promise.all(
    [...connections].map(async (c) => [c.name, await checkConnection(c, deps)] as const),
  );
  for (const [name, outcome] of checked) {
    if (!outcome.ready) {
      deps.logger.warn('Connection not ready', {
        connection: name,
        secret: outcome.secret,
        token: outcome.token,
      });
    }
  }
  return {
    ready: checked.every(([, outcome]) => outcome.ready),
    connections: Object.fromEntries(checked),
  };
};
