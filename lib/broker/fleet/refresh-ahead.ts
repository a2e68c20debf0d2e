/**
 * Refresh ahead of expiry, in the background of a request: one try at a time per connection in
 * a container, for the lease to replace a token that is still valid. The caller that starts it
 * is not kept waiting: the countdown the lease announces keeps the current token safe to serve
 * until well after its answer (I2). A failure is logged and counted; the current token is still
 * served, unless the failed request may have revoked it (an unknown outcome): then the issuance
 * has dropped it everywhere.
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

  /** Whether a refresh of `name` is running here. */
  has(name: string): boolean {
    return this.#running.has(name);
  }

  /**
   * Starts one try to replace `current` for `request` unless one is running here already. Its
   * budget is cut to the request's `workUntil` (the invocation's end, in Lambda), and none is
   * started that could not take its lease and post before it (a later request's will).
   */
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
    // Lambda resets an environment whose invocation overran its timeout, mid-refresh maybe:
    // a refresh that cannot have its countdown and POST in time is not started at all.
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
