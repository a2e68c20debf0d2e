/**
 * Work in flight per connection in this container. Concurrent misses share one load, each caller
 * within its own deadline (I3); a joiner the shared load did not satisfy, or whose leader was
 * refused, asks anew. One refresh ahead of expiry at a time runs in the background of a request:
 * the announced countdown keeps the current token safe meanwhile (I2); failures are logged and
 * counted.
 */
import { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { ReplacementRefusedError, toBrokerError, UpstreamUnavailableError } from '../../errors.js';
import { MetricName } from '../../metrics.js';
import type { TokenRecord } from '../../ports.js';
import type { HolderDeps } from '../holder/index.js';
import type { IssuanceCause } from '../issuance/index.js';
import { unsatisfiable } from '../observer/index.js';
import { SingleFlight } from '../single-flight.js';
import type { ServedToken } from '../types.js';
import { type TokenRequest, validityNeeded } from '../view/index.js';
import type { LeasedIssuance } from './leased-issuance.js';

const joinTimedOut = () =>
  new UpstreamUnavailableError('Timed out waiting for a token being issued concurrently', {
    retryAfterSeconds: 1,
  });

export class InFlight {
  readonly #loads: SingleFlight<string, ServedToken>;
  readonly #refreshes = new Map<string, Promise<unknown>>();

  constructor(
    private readonly deps: Pick<HolderDeps, 'clock' | 'settings' | 'logger' | 'metrics'> & {
      readonly issuance: LeasedIssuance;
    },
  ) {
    this.#loads = new SingleFlight(deps.clock);
  }

  /** A token for `request`, each caller within its own deadline. */
  async load(connection: ConnectionConfig, request: TokenRequest): Promise<ServedToken> {
    const obtain = () => this.deps.issuance.obtain(connection, request);
    const joined = this.#loads.has(connection.name);
    let shared: ServedToken;
    try {
      shared = await this.#loads.run(connection.name, obtain, request.deadline, joinTimedOut);
    } catch (error) {
      // A refusal answers the caller that asked, not the ones that joined it: they ask anew.
      if (joined && error instanceof ReplacementRefusedError) return obtain();
      throw error;
    }
    const needMs = validityNeeded(request, shared.record, this.deps.settings);
    if (!joined || shared.record.expiresAt - this.deps.clock.now() > needMs) return shared;
    // The shared load asked for less validity than this caller needs.
    if (shared.source === 'upstream') throw unsatisfiable(shared.record, needMs);
    return obtain();
  }

  /** Starts one try to replace `current`, by `workUntil`, unless a refresh or load runs here. */
  refreshAhead(
    connection: ConnectionConfig,
    current: TokenRecord,
    cause: IssuanceCause,
    { caller, workUntil }: Pick<TokenRequest, 'caller' | 'workUntil'>,
  ): void {
    const { name } = connection;
    const { issuance, clock, logger, metrics } = this.deps;
    if (this.#refreshes.has(name) || this.#loads.has(name)) return;
    const { budget, least } = issuance.refreshMs(connection, current);
    const deadline = Deadline.in(clock, budget).min(workUntil);
    // Not started without time for its countdown and POST (Lambda may reset an overrun).
    if (least >= deadline.leftMs()) return;
    const run = issuance
      .refresh(connection, current, deadline, caller, cause)
      .catch((error: unknown) => {
        metrics.record(MetricName.RefreshFailures, name);
        const failure = toBrokerError(error);
        logger.warn('Refresh ahead of expiry failed', {
          connection: name,
          error: { name: failure.name, code: failure.code, message: failure.message },
        });
      })
      .finally(() => this.#refreshes.delete(name));
    this.#refreshes.set(name, run);
  }

  /** Settles once every refresh running in the background has ended. */
  async idle(): Promise<void> {
    while (this.#refreshes.size > 0) await Promise.all(this.#refreshes.values());
  }
}
