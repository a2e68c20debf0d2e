/**
 * The operator's commands: the status (metadata only, never a token), the warm-up, and readiness
 * (what a deploy gates on; `/health` stays liveness).
 */
import type { Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { SecretUnavailableError, StoreUnavailableError, toBrokerError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { SecretSource, TokenStore } from '../../ports.js';
import { withDeadline } from '../single-flight.js';
import type {
  BrokerLogger,
  ConnectionReadiness,
  ConnectionStatus,
  GetTokenOptions,
  ReadinessCheck,
  ReadinessReport,
  ServedToken,
  TokenAnswer,
  WarmUpOutcome,
  WarmUpReport,
} from '../types.js';
import { ownRequest, type TokenRequest } from '../view/index.js';

/** A status read that the caller's deadline cut short. */
class StatusReadTimedOut extends Error {
  constructor() {
    super('The token store did not answer before the deadline');
    this.name = 'StatusReadTimedOut';
  }
}

interface OperatorDeps {
  readonly connections: ReadonlyMap<string, ConnectionConfig>;
  readonly store: TokenStore;
  readonly secrets: SecretSource;
  readonly clock: Clock;
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  /** Loads a token as `request` asks (issuing under the lease when needed). */
  readonly load: (connection: ConnectionConfig, request: TokenRequest) => Promise<ServedToken>;
  /** A token as any caller gets it. */
  readonly getToken: (name: string, options: GetTokenOptions) => Promise<TokenAnswer>;
}

const failed = (error: unknown): ReadinessCheck & { status: 'failed' } => {
  const failure = toBrokerError(error);
  return { status: 'failed', error: { code: failure.code, message: failure.message } };
};

const secondsLeft = (expiresAt: number, now: number): number =>
  Math.floor((expiresAt - now) / 1000);

export class Operator {
  constructor(private readonly deps: OperatorDeps) {}

  /** Every connection's token metadata and live lease, each store read cut to `deadline` (I3). */
  status(deadline: Deadline): Promise<ConnectionStatus[]> {
    const { store, clock } = this.deps;
    return this.#each(async ({ name, variant }) => {
      let state: Awaited<ReturnType<TokenStore['read']>>;
      try {
        const late = () => new StatusReadTimedOut();
        state = await withDeadline(store.read(name), deadline.leftMs(), clock, late);
      } catch (error) {
        throw new StoreUnavailableError(
          error instanceof StatusReadTimedOut
            ? 'The token store did not answer before the deadline; retry shortly'
            : 'The token store failed to read the token; retry shortly',
          { cause: error },
        );
      }
      const at = clock.now();
      const { token, lease } = state;
      const valid = token && token.expiresAt > at ? token : undefined;
      return {
        connection: name,
        variant,
        token: valid
          ? {
              expiresAt: new Date(valid.expiresAt).toISOString(),
              expiresIn: secondsLeft(valid.expiresAt, at),
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
    });
  }

  /**
   * Issues only where a token is missing or inside its refresh window: the same (clamped) window
   * as every other path.
   */
  async warmUp(deadline: Deadline, caller: string): Promise<WarmUpReport> {
    const { clock, logger, metrics } = this.deps;
    // Counted per connection it checks: the alarm on its absence says the schedule stopped.
    for (const name of this.deps.connections.keys()) metrics.record(MetricName.WarmUpRuns, name);
    const outcomes = await this.#each(async (connection): Promise<[string, WarmUpOutcome]> => {
      const { name } = connection;
      try {
        const request = ownRequest('outside-window', deadline, caller);
        const { record, source } = await this.deps.load(connection, request);
        return [
          name,
          {
            status: source === 'upstream' ? 'issued' : 'fresh',
            expiresAt: new Date(record.expiresAt).toISOString(),
            expiresIn: secondsLeft(record.expiresAt, clock.now()),
          },
        ];
      } catch (error) {
        const failure = toBrokerError(error);
        metrics.record(MetricName.RefreshFailures, name);
        logger.error('Warm-up failed for connection', {
          connection: name,
          error: { name: failure.name, code: failure.code, message: failure.message },
        });
        return [name, failed(failure)];
      }
    });
    return {
      connections: Object.fromEntries(outcomes),
      issued: outcomes.filter(([, o]) => o.status === 'issued').length,
      failed: outcomes.filter(([, o]) => o.status === 'failed').length,
    };
  }

  /** Checks every connection in parallel; one failing does not stop the others. */
  async ready(deadline: Deadline, caller: string): Promise<ReadinessReport> {
    const checked = await this.#each(
      async (c) => [c.name, await this.#ready(c, deadline, caller)] as const,
    );
    for (const [name, { ready, secret, token }] of checked) {
      if (!ready)
        this.deps.logger.warn('Connection not ready', { connection: name, secret, token });
    }
    return {
      ready: checked.every(([, outcome]) => outcome.ready),
      connections: Object.fromEntries(checked),
    };
  }

  async #ready(
    { name, secretId }: ConnectionConfig,
    deadline: Deadline,
    caller: string,
  ): Promise<ConnectionReadiness> {
    const { secrets, clock } = this.deps;
    try {
      // A slow Secrets Manager fails the check, it does not hang it (I3).
      const late = () => new SecretUnavailableError(`The secret ${secretId} was not read in time`);
      await withDeadline(secrets.getCredentials(secretId), deadline.leftMs(), clock, late);
    } catch (error) {
      // A valid token may still be served, but none can be issued: not ready.
      return { ready: false, secret: failed(error), token: { status: 'skipped' } };
    }
    try {
      const options = { deadline, workUntil: deadline, caller };
      const { record, source } = await this.deps.getToken(name, options);
      const expiresIn = secondsLeft(record.expiresAt, clock.now());
      return { ready: true, secret: { status: 'ok' }, token: { status: 'ok', expiresIn, source } };
    } catch (error) {
      return { ready: false, secret: { status: 'ok' }, token: failed(error) };
    }
  }

  #each<T>(check: (connection: ConnectionConfig) => Promise<T>): Promise<T[]> {
    return Promise.all([...this.deps.connections.values()].map(check));
  }
}
