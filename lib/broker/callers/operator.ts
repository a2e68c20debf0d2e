/** The operator's view (`status`: metadata only, never a token) and the warm-up. */
import type { ConnectionConfig } from '../../config.js';
import { StoreUnavailableError, toBrokerError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { TokenStore } from '../../ports.js';
import type {
  BrokerLogger,
  ConnectionStatus,
  ServedToken,
  WarmUpOutcome,
  WarmUpReport,
} from '../types.js';

/** A status read that the caller's deadline cut short. */
export class StatusReadTimedOut extends Error {
  constructor() {
    super('The token store did not answer before the deadline');
    this.name = 'StatusReadTimedOut';
  }
}

/** Every connection's token metadata and live lease, read from the shared store. */
export const readStatus = (
  connections: Iterable<ConnectionConfig>,
  store: TokenStore,
  {
    now,
    bounded,
  }: {
    readonly now: () => number;
    /** Cuts a read to the caller's deadline. */
    readonly bounded: <T>(read: Promise<T>) => Promise<T>;
  },
): Promise<ConnectionStatus[]> =>
  Promise.all(
    [...connections].map(async ({ name, variant }) => {
      let state: Awaited<ReturnType<TokenStore['read']>>;
      try {
        state = await bounded(store.read(name));
      } catch (error) {
        throw new StoreUnavailableError(
          error instanceof StatusReadTimedOut
            ? 'The token store did not answer before the deadline; retry shortly'
            : 'The token store failed to read the token; retry shortly',
          { cause: error },
        );
      }
      const at = now();
      const { token, lease } = state;
      const valid = token && token.expiresAt > at ? token : undefined;
      return {
        connection: name,
        variant,
        token: valid
          ? {
              expiresAt: new Date(valid.expiresAt).toISOString(),
              expiresIn: Math.floor((valid.expiresAt - at) / 1000),
              issuedAt: new Date(valid.issuedAt).toISOString(),
              tokenDigest: valid.tokenDigest,
            }
          : null,
        lease:
          lease && lease.expiresAt >= at
            ? {
                holder: lease.holder,
                expiresInMs: lease.expiresAt - at,
                countdown: lease.countdown,
              }
            : null,
      };
    }),
  );

interface WarmUpDeps {
  /** Loads a token outside its refresh window (issuing under the lease when needed). */
  readonly load: (connection: ConnectionConfig) => Promise<ServedToken>;
  readonly now: () => number;
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
}

/** Issues only where a token is missing or inside the refresh window. */
export const warmUp = async (
  connections: Iterable<ConnectionConfig>,
  deps: WarmUpDeps,
): Promise<WarmUpReport> => {
  const outcomes = await Promise.all(
    [...connections].map(async (connection): Promise<[string, WarmUpOutcome]> => {
      try {
        const { record, source } = await deps.load(connection);
        return [
          connection.name,
          {
            status: source === 'upstream' ? 'issued' : 'fresh',
            expiresAt: new Date(record.expiresAt).toISOString(),
            expiresIn: Math.floor((record.expiresAt - deps.now()) / 1000),
          },
        ];
      } catch (error) {
        const failure = toBrokerError(error);
        deps.metrics.record(MetricName.RefreshFailures, connection.name);
        deps.logger.error('Warm-up failed for connection', {
          connection: connection.name,
          error: { name: failure.name, code: failure.code, message: failure.message },
        });
        return [
          connection.name,
          { status: 'failed', error: { code: failure.code, message: failure.message } },
        ];
      }
    }),
  );
  return {
    connections: Object.fromEntries(outcomes),
    issued: outcomes.filter(([, o]) => o.status === 'issued').length,
    failed: outcomes.filter(([, o]) => o.status === 'failed').length,
  };
};
