/**
 * The broker core's facade: serves a valid token for a connection from memory, else from the
 * shared store, else by running the upstream flow — once for the whole fleet, under a lease
 * held in the store. It knows nothing of AWS or of event shapes; adapters and handlers plug
 * into its ports. The sides (docs/protocol.md, "Layout"): `timing/` (constants, bounds,
 * estimates), `view/` (what a container knows; the request and the one serving rule),
 * `observer/` (the decision after each read, and its loop), `holder/` (the lease holder),
 * `issuance/` (one upstream flow), `callers/` (reports, status, warm-up, readiness), `fleet/`
 * (shared loads, leased issuance, refresh ahead).
 *
 * This file makes each call's one `TokenRequest` (checked once), serves the last good token
 * after a failure, and starts refresh ahead.
 */
import { type Clock, Deadline, systemClock } from '../clock.js';
import type { BrokerConfig, ConnectionConfig } from '../config.js';
import { toBrokerError, UnknownConnectionError } from '../errors.js';
import { type BrokerMetrics, MetricName, noMetrics } from '../metrics.js';
import type { SecretSource, TokenIssuer, TokenProbe, TokenStore } from '../ports.js';
import {
  checkReadiness,
  type ReadinessReport,
  Reports,
  readStatus,
  StatusReadTimedOut,
  warmUp,
} from './callers/index.js';
import { LeasedIssuance, RefreshAhead, SharedLoads } from './fleet/index.js';
import { type Caller, IssuanceCause, withCredentialRotation } from './issuance/index.js';
import { type CallerBoundSettings, tokenRequest } from './observer/index.js';
import { withDeadline } from './single-flight.js';
import { dueForRefresh, type ProtocolTiming, validateTiming } from './timing/index.js';
import type {
  BrokerLogger,
  ConnectionStatus,
  GetTokenOptions,
  InvalidateOutcome,
  ServedToken,
  TokenAnswer,
  WarmUpReport,
} from './types.js';
import { ConnectionView, ownRequest, type TokenRequest } from './view/index.js';

export type { ConnectionReadiness, ReadinessReport } from './callers/index.js';
export { isCredentialRejection } from './issuance/index.js';
export * from './types.js';

export interface TokenBrokerDeps {
  readonly config: Pick<
    BrokerConfig,
    | 'connections'
    | 'defaultMinValiditySeconds'
    | 'refreshWindowSeconds'
    | 'memoryRecheckSeconds'
    | 'maxTokenLifetimeSeconds'
    | 'upstreamTimeoutMs'
    | 'invalidateMinAgeSeconds'
  > &
    Partial<Pick<BrokerConfig, 'storeOutageGraceSeconds' | 'forcedMinAgeSeconds' | 'refreshAhead'>>;
  readonly store: TokenStore;
  readonly secrets: SecretSource;
  readonly issuer: TokenIssuer;
  /** Checks reports on connections with a `probe` (the Open API client); none: age rules only. */
  readonly probe?: TokenProbe | undefined;
  readonly logger: BrokerLogger;
  readonly metrics?: BrokerMetrics;
  /** Time, timers and random draws; the system clock unless a test injects one. */
  readonly clock?: Clock;
  /**
   * The protocol's timing (`timing/protocol-timing.ts`, `BrokerConfig.timing`): `DEFAULT_TIMING`
   * unless a test or `npm start` runs it scaled (`BROKER_TIMING_SCALE`). Validated here, once: a
   * timing that breaks a relation of the safety argument is refused.
   */
  readonly timing: ProtocolTiming;
}

export class TokenBroker {
  readonly #view: ConnectionView;
  readonly #reports: Reports;
  readonly #loads: SharedLoads;
  readonly #refreshAhead: RefreshAhead;
  readonly #issuance: LeasedIssuance;
  readonly #settings: CallerBoundSettings & { readonly upstreamTimeoutMs: number };
  readonly #clock: Clock;
  readonly #metrics: BrokerMetrics;

  constructor(private readonly deps: TokenBrokerDeps) {
    const { config, store, logger, probe } = deps;
    const clock = deps.clock ?? systemClock;
    const metrics = deps.metrics ?? noMetrics;
    const settings = {
      refreshWindowMs: config.refreshWindowSeconds * 1000,
      memoryRecheckMs: config.memoryRecheckSeconds * 1000,
      upstreamTimeoutMs: config.upstreamTimeoutMs,
      storeOutageGraceMs: (config.storeOutageGraceSeconds ?? 0) * 1000,
      timing: validateTiming(deps.timing),
      invalidateFloorMs: config.invalidateMinAgeSeconds * 1000,
      ...(config.forcedMinAgeSeconds === undefined
        ? {}
        : { forcedMinAgeMs: config.forcedMinAgeSeconds * 1000 }),
    };
    const view = new ConnectionView(clock, settings);
    const common = { store, clock, view, settings, logger, metrics };
    const issuance = new LeasedIssuance({
      ...common,
      issue: withCredentialRotation({ ...deps, clock }),
    });
    this.#clock = clock;
    this.#metrics = metrics;
    this.#settings = settings;
    this.#view = view;
    this.#issuance = issuance;
    this.#reports = new Reports({ ...common, probe, upstreamTimeoutMs: config.upstreamTimeoutMs });
    this.#loads = new SharedLoads(issuance, clock, settings);
    this.#refreshAhead = new RefreshAhead({ issuance, clock, logger, metrics });
  }

  /** Names of every configured connection. */
  connectionNames(): IterableIterator<string> {
    return this.deps.config.connections.keys();
  }

  /** Whether `name` is a configured connection (metrics only carry configured names). */
  hasConnection(name: string): boolean {
    return this.deps.config.connections.has(name);
  }

  /** @throws {UnknownConnectionError} */
  connection(name: string): ConnectionConfig {
    const connection = this.deps.config.connections.get(name);
    if (!connection) throw new UnknownConnectionError(name);
    return connection;
  }

  /** The protocol's timing this broker runs at (validated): the handlers' answer margin. */
  get timing(): ProtocolTiming {
    return this.#settings.timing;
  }

  /**
   * A deadline `ms` from now, on this broker's monotonic clock: how a handler makes one from the
   * time its invocation has left, with no wall clock read. On the broker's own clock, so that a
   * broker given a clock (a test's) judges it on that one.
   */
  deadlineIn(ms: number): Deadline {
    return Deadline.in(this.#clock, ms);
  }

  /**
   * Refuses every issuance with `reason` (`FUNCTION_TIMEOUT_TOO_SHORT`), or lifts the refusal
   * (undefined): a function timeout too short for a refresh leaves callers served from what the
   * store and memory prove, and refuses only what would need a new token (issue 37).
   */
  refuseIssuance(reason: string | undefined): void {
    this.#issuance.refuseIssuance(reason);
  }

  /**
   * Returns a token valid for at least `minValiditySeconds`, issuing one only when needed, with
   * how long the caller may reuse it, and use it stale (see `servable`).
   */
  async getToken(name: string, options: GetTokenOptions): Promise<TokenAnswer> {
    const connection = this.connection(name);
    const request = tokenRequest(options, this.deps.config);
    const decide = async (): Promise<ServedToken> => {
      const { record } = this.#view.servable(name, request);
      return record ? { record, source: 'memory' } : this.#loads.load(connection, request);
    };
    let served: ServedToken;
    try {
      served = await decide();
      // A2: the awaits since the decision may have hidden a stall past its proof. Decided
      // again, once: that decision's answer follows at once.
      if (!this.#view.stillProves(served.record, this.#clock.now())) {
        this.deps.logger.warn(
          'A stall outlasted the proof of the token about to be served; asking again',
          { connection: name },
        );
        served = await decide();
      }
    } catch (error) {
      return this.#lastGood(name, request, error);
    }
    if (served.source !== 'upstream') {
      // One refresh at a time in a container, and none while a load runs here.
      const { record } = served;
      const now = this.#clock.now();
      const issuanceMs = this.#view.issuanceMs(name);
      const cause = this.#reports.due(record)
        ? IssuanceCause.Invalidate
        : dueForRefresh(record, now, this.#settings, this.#clock.random(), issuanceMs)
          ? IssuanceCause.RefreshAhead
          : undefined;
      const background = this.deps.config.refreshAhead !== 'off';
      if (cause && background && !this.#loads.has(name)) {
        this.#refreshAhead.start(connection, record, cause, request);
      }
    }
    this.#metrics.record(MetricName.TokensServed, name, 1, served.source);
    const held = this.#view.servable(name, request, undefined, served.record.tokenDigest);
    return { ...served, reusableUntil: held.reusableUntil, staleIfErrorMs: held.staleIfErrorMs };
  }

  /**
   * A caller's report that the upstream rejected `accessToken`: checked with the connection's
   * probe if it has one, else that token is dropped if it is old enough to be replaced on a
   * caller's word, or kept with the report and replaced once it is (see `reports.ts`).
   * @param deadline by when the answer is due (the store calls are cut to it)
   */
  invalidate(
    name: string,
    accessToken: string,
    caller?: string,
    deadline?: Deadline,
  ): Promise<InvalidateOutcome> {
    return this.#reports.invalidate(this.connection(name), accessToken, caller, deadline);
  }

  /**
   * Settles once the refreshes running in the background have ended (tests; a runtime about to
   * shut down). A Lambda container frozen between invocations resumes them when it thaws, or
   * they run out of lease time and another container takes over.
   */
  idle(): Promise<void> {
    return this.#refreshAhead.idle();
  }

  /**
   * The execution environment is shutting down (Lambda's SIGTERM): every lease held here is
   * given up before its POST and released, and the work under way is awaited until `deadline`,
   * so that no other container waits out a lease this one can no longer advance.
   */
  async shutdown(deadline: Deadline): Promise<void> {
    this.#issuance.abandonLeases('The execution environment is shutting down');
    await Promise.race([this.idle(), this.#clock.sleep(deadline.wholeMsLeft())]);
  }

  /**
   * Every connection's token metadata and lease, read from the shared store, each read cut to
   * `deadline` (I3: a store that hangs makes it StoreUnavailableError, never a timeout).
   */
  status(deadline: Deadline): Promise<ConnectionStatus[]> {
    return readStatus(this.deps.config.connections.values(), this.deps.store, {
      now: () => this.#clock.now(),
      bounded: (read) =>
        withDeadline(read, deadline.leftMs(), this.#clock, () => new StatusReadTimedOut()),
    });
  }

  /**
   * Readiness of every connection: its secret readable and well-formed, and a valid token held
   * or obtainable now (the normal path, issuing only where none is valid; a refresh it starts
   * ends by `deadline`). A deploy gates on it.
   */
  ready(deadline: Deadline, caller = 'readiness check'): Promise<ReadinessReport> {
    return checkReadiness(this.deps.config.connections.values(), {
      secrets: this.deps.secrets,
      deadline,
      clock: this.#clock,
      getToken: ({ name }) => this.getToken(name, { deadline, workUntil: deadline, caller }),
      now: () => this.#clock.now(),
      logger: this.deps.logger,
    });
  }

  /**
   * Makes sure every connection holds a token valid beyond the refresh window; issues only where
   * one is missing or inside the window. A failing connection does not stop the others.
   */
  warmUp(deadline: Deadline, caller: Caller = 'schedule'): Promise<WarmUpReport> {
    // Counted per connection it checks: the alarm on its absence says the schedule stopped.
    for (const name of this.connectionNames()) this.#metrics.record(MetricName.WarmUpRuns, name);
    return warmUp(this.deps.config.connections.values(), {
      // The same window as every other path: a token outside its (clamped) window is fresh.
      load: (connection) =>
        this.#loads.load(connection, ownRequest('outside-window', deadline, caller)),
      now: () => this.#clock.now(),
      logger: this.deps.logger,
      metrics: this.#metrics,
    });
  }

  /**
   * Serve the last good token: a caller that asked for nothing special gets a token that is
   * still valid rather than an error, while the failure is logged and counted (I2: only where
   * the failure says nothing against that token; see `servable`).
   */
  #lastGood(name: string, request: TokenRequest, error: unknown): TokenAnswer {
    const { record, reusableUntil, staleIfErrorMs } = this.#view.servable(name, request, {
      failed: error,
    });
    if (!record) throw error;
    const failure = toBrokerError(error);
    this.deps.logger.warn('Could not get a newer token; serving the last good one', {
      connection: name,
      error: { code: failure.code, message: failure.message },
    });
    this.#metrics.record(MetricName.LastGoodTokenServed, name);
    // Served as a fallback after a failure: no second upstream attempt in this request.
    this.#metrics.record(MetricName.TokensServed, name, 1, 'memory');
    return { record, source: 'memory', reusableUntil, staleIfErrorMs };
  }
}
