/**
 * The broker core's facade: serves a valid token from memory, else the shared store, else one
 * upstream flow for the whole fleet under a lease. Sides: docs/protocol.md, "Layout". Builds each
 * call's `TokenRequest`, serves the last good token after a failure, starts refresh ahead.
 */
import { type Clock, Deadline, systemClock } from '../clock.js';
import type { BrokerConfig, ConnectionConfig } from '../config.js';
import { toBrokerError, UnknownConnectionError } from '../errors.js';
import { type BrokerMetrics, MetricName, noMetrics } from '../metrics.js';
import type { SecretSource, TokenIssuer, TokenProbe, TokenStore } from '../ports.js';
import { Operator, Reports } from './callers/index.js';
import { LeasedIssuance, RefreshAhead, SharedLoads } from './fleet/index.js';
import { type Caller, IssuanceCause, withCredentialRotation } from './issuance/index.js';
import { type CallerBoundSettings, tokenRequest } from './observer/index.js';
import { dueForRefresh, type ProtocolTiming, validateTiming } from './timing/index.js';
import type {
  BrokerLogger,
  ConnectionStatus,
  GetTokenOptions,
  InvalidateOutcome,
  ReadinessReport,
  ServedToken,
  TokenAnswer,
  WarmUpReport,
} from './types.js';
import { ConnectionView, type TokenRequest } from './view/index.js';

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
  /** The protocol's timing (`DEFAULT_TIMING` unless scaled); a timing breaking a relation is refused. */
  readonly timing: ProtocolTiming;
}

export class TokenBroker {
  readonly #view: ConnectionView;
  readonly #reports: Reports;
  readonly #operator: Operator;
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
    const loads = new SharedLoads(issuance, clock, settings);
    this.#loads = loads;
    this.#operator = new Operator({
      ...deps,
      connections: config.connections,
      clock,
      metrics,
      load: (connection, request) => loads.load(connection, request),
      getToken: (name, options) => this.getToken(name, options),
    });
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

  /** A deadline `ms` from now, on this broker's monotonic clock. */
  deadlineIn(ms: number): Deadline {
    return Deadline.in(this.#clock, ms);
  }

  /**
   * Refuses every issuance with `reason` (`FUNCTION_TIMEOUT_TOO_SHORT`), or lifts the refusal
   * (undefined); what store and memory prove is still served.
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
      // A2: the awaits may have hidden a stall past the proof. Decided again, once.
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
   * A caller's report that the upstream rejected `accessToken` (see `reports.ts`).
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

  /** Settles once the background refreshes have ended (tests; a runtime about to shut down). */
  idle(): Promise<void> {
    return this.#refreshAhead.idle();
  }

  /** Shutdown (SIGTERM): every lease held here is given up and released; work awaited to `deadline`. */
  async shutdown(deadline: Deadline): Promise<void> {
    this.#issuance.abandonLeases('The execution environment is shutting down');
    await Promise.race([this.idle(), this.#clock.sleep(deadline.wholeMsLeft())]);
  }

  /** Every connection's token metadata and lease from the store, each read cut to `deadline` (I3). */
  status(deadline: Deadline): Promise<ConnectionStatus[]> {
    return this.#operator.status(deadline);
  }

  /**
   * Readiness of every connection: its secret readable and a valid token held or obtainable now
   * (a refresh it starts ends by `deadline`). A deploy gates on it.
   */
  ready(deadline: Deadline, caller = 'readiness check'): Promise<ReadinessReport> {
    return this.#operator.ready(deadline, caller);
  }

  /** Makes sure every connection holds a token valid beyond the refresh window; issues where not. */
  warmUp(deadline: Deadline, caller: Caller = 'schedule'): Promise<WarmUpReport> {
    return this.#operator.warmUp(deadline, caller);
  }

  /** Serve the last good token after a failure, where the failure says nothing against it (I2). */
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
