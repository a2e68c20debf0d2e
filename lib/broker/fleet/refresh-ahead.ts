/**
 * Refresh ahead of expiry in the background of a request, one try at a time per connection: the
 * announced countdown keeps the current token safe meanwhile (I2). Failures are logged and counted.
 */
import { type Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { toBrokerError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { TokenRecord } from '../../ports.js';
import type { IssuanceCause } from '../issuance/index.js';
import type { BrokerLogger } from '../types.js';
import type { TokenRequest } from '../view/index.js';
import type { LeasedIssuance } from './leased-issuance.js';

export class RefreshAhead {
  /** Refreshes running in the background, per connection. */
  readonly #running = new Map<string, Promise<void>>();

  constructor(
    private readonly deps: {
      readonly issuance: LeasedIssuance;
      readonly clock: Clock;
      readonly logger: BrokerLogger;
      readonly metrics: BrokerMetrics;
    },
  ) {}

  /** Starts one try to replace `current` unless one runs here, within the request's `workUntil`. */
  start(
    connection: ConnectionConfig,
    current: TokenRecord,
    cause: IssuanceCause,
    { caller, workUntil }: Pick<TokenRequest, 'caller' | 'workUntil'>,
  ): void {
    const { name } = connection;
    const { issuance, clock, logger, metrics } = this.deps;
    if (this.#running.has(name)) return;
    const { budget, least } = issuance.refreshMs(connection, current);
    const deadline = Deadline.in(clock, budget).min(workUntil);
    // Not started without time for its countdown and POST (Lambda may reset an overrun).
    if (least >= deadline.leftMs()) return;
    const run = issuance
      .refresh(connection, current, deadline, caller, cause)
      .then(
        () => undefined,
        (error: unknown) => {
          metrics.record(MetricName.RefreshFailures, name);
          const failure = toBrokerError(error);
          logger.warn('Refresh ahead of expiry failed', {
            connection: name,
            error: { name: failure.name, code: failure.code, message: failure.message },
          });
        },
      )
      .finally(() => this.#running.delete(name));
    this.#running.set(name, run);
  }

  /** Settles once every refresh running in the background has ended. */
  async idle(): Promise<void> {
    while (this.#running.size > 0) await Promise.all(this.#running.values());
  }
}
