/**
 * The broker core's facade (sides: docs/protocol.md, "Layout"): makes each call's one
 * `TokenRequest`; serves a valid token from memory, else the store, else one upstream flow for
 * the fleet under a lease (the last good one after a failure); starts refresh ahead; answers the
 * operator's status (never a token), warm-up and readiness.
 */
import { type Clock, Deadline, systemClock } from '../clock.js';
import type { BrokerConfig, ConnectionConfig } from '../config.js';
import {
  SecretUnavailableError,
  StoreUnavailableError,
  toBrokerError,
  UnknownConnectionError,
} from '../errors.js';
import { type BrokerMetrics, MetricName, noMetrics } from '../metrics.js';
import type { SecretSource, TokenIssuer, TokenProbe, TokenStore } from '../ports.js';
import { Reports } from './callers/index.js';
import { InFlight, LeasedIssuance } from './fleet/index.js';
import { type Caller, IssuanceCause, withCredentialRotation } from './issuance/index.js';
import { type CallerBoundSettings, tokenRequest } from './observer/index.js';
import { withDeadline } from './single-flight.js';
import { dueForRefresh, type ProtocolTiming, validateTiming } from './timing/index.js';
import type {
  BrokerLogger,
  ConnectionReadiness,
  ConnectionStatus,
  Failed,
  GetTokenOptions,
  InvalidateOutcome,
  ReadinessReport,
  ServedToken,
  TokenAnswer,
  WarmUpOutcome,
  WarmUpReport,
} from './types.js';
import { ConnectionView, ownRequest, type TokenRequest } from './view/index.js';

export * from './types.js';

/** A status read that the caller's deadline cut short. */
class StatusReadTimedOut extends Error {
  override readonly name = 'StatusReadTimedOut';
}

const failed = (error: unknown): Failed => {
  const failure = toBrokerError(error);
  return { status: 'failed', error: { code: failure.code, message: failure.message } };
};

const secondsLeft = (expiresAt: number, now: number): number =>
  Math.floor((expiresAt - now) / 1000);

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
  readonly #inFlight: InFlight;
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
    this.#clock = clock;
    this.#metrics = metrics;
    this.#settings = settings;
    this.#view = new ConnectionView(clock, settings);
    const common = { store, clock, view: this.#view, settings, logger, metrics };
    const issuance = new LeasedIssuance({
      ...common,
      issue: withCredentialRotation({ ...deps, clock }),
    });
    this.#issuance = issuance;
    this.#reports = new Reports({ ...common, probe });
    this.#inFlight = new InFlight({ ...common, issuance });
  }

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

  /** Refuses every issuance (`FUNCTION_TIMEOUT_TOO_SHORT`), or lifts it; memory still serves. */
  refuseIssuance(reason: string | undefined): void {
    this.#issuance.refusal = reason;
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
      return record ? { record, source: 'memory' } : this.#inFlight.load(connection, request);
    };
    let served: ServedToken;
    try {
      served = await decide();
      // A2: the awaits may have hidden a stall past the proof. Decided again, once.
      if (!this.#view.stillProves(served.record, this.#clock.now())) {
        const stalled = 'A stall outlasted the proof of the token about to be served; asking again';
        this.deps.logger.warn(stalled, { connection: name });
        served = await decide();
      }
    } catch (error) {
      return this.#lastGood(name, request, error);
    }
    if (served.source !== 'upstream') {
      const { record } = served;
      const now = this.#clock.now();
      const issuanceMs = this.#view.issuanceMs(name);
      const cause = this.#reports.due(record)
        ? IssuanceCause.Invalidate
        : dueForRefresh(record, now, this.#settings, this.#clock.random(), issuanceMs)
          ? IssuanceCause.RefreshAhead
          : undefined;
      if (cause && this.deps.config.refreshAhead !== 'off') {
        this.#inFlight.refreshAhead(connection, record, cause, request);
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
    return this.#inFlight.idle();
  }

  /** Shutdown (SIGTERM): every lease held here is given up and released; work awaited to `deadline`. */
  async shutdown(deadline: Deadline): Promise<void> {
    this.#issuance.abandonLeases('The execution environment is shutting down');
    await Promise.race([this.idle(), this.#clock.sleep(deadline.wholeMsLeft())]);
  }

  /** Every connection's token metadata and live lease, each store read cut to `deadline` (I3). */
  status(deadline: Deadline): Promise<ConnectionStatus[]> {
    return this.#each(async ({ name, variant }) => {
      const late = () =>
        new StatusReadTimedOut('The token store did not answer before the deadline');
      const read = withDeadline(this.deps.store.read(name), deadline.leftMs(), this.#clock, late);
      const { token, lease } = await read.catch((error: unknown) => {
        throw new StoreUnavailableError(
          error instanceof StatusReadTimedOut
            ? 'The token store did not answer before the deadline; retry shortly'
            : 'The token store failed to read the token; retry shortly',
          { cause: error },
        );
      });
      const at = this.#clock.now();
      const valid = token && token.expiresAt > at ? token : undefined;
      const live = lease && lease.expiresAt >= at ? lease : undefined;
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
        lease: live
          ? { holder: live.holder, expiresInMs: live.expiresAt - at, countdown: live.countdown }
          : null,
      };
    });
  }

  /**
   * Readiness of every connection, checked in parallel: its secret readable and a valid token
   * held or obtainable now (a refresh it starts ends by `deadline`). A deploy gates on it.
   */
  async ready(deadline: Deadline, caller = 'readiness check'): Promise<ReadinessReport> {
    const checked = await this.#each(
      async (c) => [c.name, await this.#ready(c, deadline, caller)] as const,
    );
    const { logger } = this.deps;
    for (const [name, { ready, secret, token }] of checked) {
      if (!ready) logger.warn('Connection not ready', { connection: name, secret, token });
    }
    const ready = checked.every(([, outcome]) => outcome.ready);
    return { ready, connections: Object.fromEntries(checked) };
  }

  /**
   * Makes sure every connection holds a token valid beyond its refresh window, issuing where not:
   * the same (clamped) window as every other path.
   */
  async warmUp(deadline: Deadline, caller: Caller = 'schedule'): Promise<WarmUpReport> {
    // Counted per connection it checks: the alarm on its absence says the schedule stopped.
    for (const name of this.connectionNames()) this.#metrics.record(MetricName.WarmUpRuns, name);
    const outcomes = await this.#each(async (connection): Promise<[string, WarmUpOutcome]> => {
      const { name } = connection;
      try {
        const request = ownRequest('outside-window', deadline, caller);
        const { record, source } = await this.#inFlight.load(connection, request);
        const expiresAt = new Date(record.expiresAt).toISOString();
        const expiresIn = secondsLeft(record.expiresAt, this.#clock.now());
        return [name, { status: source === 'upstream' ? 'issued' : 'fresh', expiresAt, expiresIn }];
      } catch (error) {
        const failure = toBrokerError(error);
        this.#metrics.record(MetricName.RefreshFailures, name);
        this.deps.logger.error('Warm-up failed for connection', {
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

  async #ready(
    { name, secretId }: ConnectionConfig,
    deadline: Deadline,
    caller: string,
  ): Promise<ConnectionReadiness> {
    try {
      // A slow Secrets Manager fails the check, it does not hang it (I3).
      const read = this.deps.secrets.getCredentials(secretId);
      const late = () => new SecretUnavailableError(`The secret ${secretId} was not read in time`);
      await withDeadline(read, deadline.leftMs(), this.#clock, late);
    } catch (error) {
      // A valid token may still be served, but none can be issued: not ready.
      return { ready: false, secret: failed(error), token: { status: 'skipped' } };
    }
    try {
      const options = { deadline, workUntil: deadline, caller };
      const { record, source } = await this.getToken(name, options);
      const expiresIn = secondsLeft(record.expiresAt, this.#clock.now());
      return { ready: true, secret: { status: 'ok' }, token: { status: 'ok', expiresIn, source } };
    } catch (error) {
      return { ready: false, secret: { status: 'ok' }, token: failed(error) };
    }
  }

  #each<T>(check: (connection: ConnectionConfig) => Promise<T>): Promise<T[]> {
    return Promise.all([...this.deps.config.connections.values()].map(check));
  }

  /** Serve the last good token after a failure, where the failure says nothing against it (I2). */
  #lastGood(name: string, request: TokenRequest, error: unknown): TokenAnswer {
    const { record, reusableUntil, staleIfErrorMs } = this.#view.servable(name, request, {
      failed: error,
    });
    if (!record) throw error;
    this.deps.logger.warn('Could not get a newer token; serving the last good one', {
      connection: name,
      error: failed(error).error,
    });
    this.#metrics.record(MetricName.LastGoodTokenServed, name);
    // Served as a fallback after a failure: no second upstream attempt in this request.
    this.#metrics.record(MetricName.TokensServed, name, 1, 'memory');
    return { record, source: 'memory', reusableUntil, staleIfErrorMs };
  }
}
