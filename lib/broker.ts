/**
 * The broker core: serves a valid token for a connection from memory, else from the shared
 * store, else by running the upstream flow — once for the whole fleet, under a lease held in
 * the store. It knows nothing of AWS or of event shapes; adapters and handlers plug into its
 * ports.
 *
 * Lifecycle of one connection's token across a fleet:
 * - a miss reads the store; a valid token there is served and kept in memory;
 * - otherwise the container takes the lease (a conditional write) and runs the flow; others
 *   wait for the token to appear, polling with backoff within their own deadline;
 * - the warm-up refreshes tokens that enter the refresh window; on demand, XFetch decides when
 *   a request tries for the lease early; whoever fails to get it keeps serving the current token;
 * - memory is re-checked against the store every `memoryRecheckSeconds`, so an invalidation
 *   anywhere stops every container serving the dropped token within that interval.
 */
import { createHash, randomUUID } from 'node:crypto';
import type { BrokerConfig, ConnectionConfig } from './config.js';
import {
  BadRequestError,
  type BrokerError,
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  toBrokerError,
  UnknownConnectionError,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from './errors.js';
import { type BrokerMetrics, MetricName, noMetrics } from './metrics.js';
import type { SecretSource, TokenIssuer, TokenRecord, TokenState, TokenStore } from './ports.js';

/** Where a served token came from: drives logs and metrics. */
export type TokenSource = 'memory' | 'dynamodb' | 'upstream';

export interface ServedToken {
  readonly record: TokenRecord;
  readonly source: TokenSource;
}

/** The subset of a structured logger the core uses (Powertools Logger fits). */
export interface BrokerLogger {
  debug(message: string, ...attributes: Record<string, unknown>[]): void;
  info(message: string, ...attributes: Record<string, unknown>[]): void;
  warn(message: string, ...attributes: Record<string, unknown>[]): void;
  error(message: string, ...attributes: Record<string, unknown>[]): void;
}

export interface TokenBrokerDeps {
  readonly config: Pick<
    BrokerConfig,
    | 'connections'
    | 'defaultMinValiditySeconds'
    | 'refreshWindowSeconds'
    | 'memoryRecheckSeconds'
    | 'maxTokenLifetimeSeconds'
  >;
  readonly store: TokenStore;
  readonly secrets: SecretSource;
  readonly issuer: TokenIssuer;
  readonly logger: BrokerLogger;
  readonly metrics?: BrokerMetrics;
  readonly now?: () => number;
  /** Uniform in [0, 1): drives XFetch and backoff jitter. Injectable for tests. */
  readonly random?: () => number;
  readonly sleep?: (ms: number) => Promise<void>;
}

export interface GetTokenOptions {
  /** Seconds the returned token must still be valid; defaults to the configured default. */
  readonly minValiditySeconds?: number | undefined;
  /** Epoch ms by which an answer is due (derived from the Lambda's remaining time). */
  readonly deadline: number;
}

export type WarmUpOutcome =
  | { readonly status: 'fresh' | 'issued'; readonly expiresAt: string; readonly expiresIn: number }
  | {
      readonly status: 'failed';
      readonly error: { readonly code: string; readonly message: string };
    };

/** What an operator may see of a connection: never the token. */
export interface ConnectionStatus {
  readonly connection: string;
  readonly variant: string;
  readonly token: {
    readonly expiresAt: string;
    readonly expiresIn: number;
    readonly issuedAt: string;
    readonly tokenDigest: string;
  } | null;
  readonly lease: { readonly holder: string; readonly expiresInMs: number } | null;
}

export interface WarmUpReport {
  readonly connections: Readonly<Record<string, WarmUpOutcome>>;
  readonly issued: number;
  readonly failed: number;
}

/** One run of the upstream flow under a lease. */
interface LeasedFlow {
  readonly holder: string;
  /** Validity (ms) the caller needs from the new token. */
  readonly needMs: number;
  readonly deadline: number;
  /** A valid token is being replaced: drain first if the upstream may revoke it. */
  readonly replacingValidToken: boolean;
}

interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the shared store last confirmed this token (local epoch ms). */
  readonly checkedAt: number;
}

/** Clock skew between us and the upstream beyond which a warning is logged. */
const SKEW_WARNING_MS = 5 * 60_000;
/**
 * A lease lasts this long and its holder renews it every LEASE_HEARTBEAT_MS while it works
 * (the pattern of the DynamoDB Lock Client): a holder that dies — a crash, a killed container
 * — frees the connection within LEASE_MS, instead of blocking it for a whole Lambda timeout.
 */
const LEASE_MS = 3_000;
const LEASE_HEARTBEAT_MS = 1_000;
/** XFetch β: 1 is the value the paper shows optimal for a single recompute. */
const XFETCH_BETA = 1;
/** Issuance duration assumed before one was measured (two loopback-to-internet round trips). */
const DEFAULT_ISSUANCE_MS = 300;
/**
 * Inside the refresh window, memory is re-checked at least this often: a refresh elsewhere
 * (which may revoke the token in memory, if the upstream revokes on re-issue) is picked up
 * within this interval instead of `memoryRecheckSeconds`.
 */
const WINDOW_RECHECK_MS = 250;
/**
 * A refresher that replaces a still-valid token waits this long after taking the lease before
 * it calls the upstream. Every container serving that token from memory re-reads the store
 * within WINDOW_RECHECK_MS, sees the lease, and stops serving the token before the upstream can
 * revoke it (as many APIs do on re-issue; this one's behaviour is unknown, so assume it).
 */
const DRAIN_MS = WINDOW_RECHECK_MS + 100;
/** Polling a lease held elsewhere: first wait and cap (full jitter in between). */
const POLL_BASE_MS = 25;
const POLL_CAP_MS = 500;

/** SHA-256 of an access token, base64url: what invalidate compares and logs may show. */
export const tokenDigest = (accessToken: string): string =>
  createHash('sha256').update(accessToken).digest('base64url');

/**
 * The upstream refused the client's credentials (rather than the request): HTTP 401/403, or a
 * code or message that says so. The spec does not list failure codes, hence the patterns. A
 * refused signature counts: in strict mode the v3 signature is the only use of the secret.
 */
export const isCredentialRejection = (error: unknown): boolean => {
  if (!(error instanceof UpstreamRejectedError)) return false;
  const status = Number(error.details.upstreamStatus);
  if (status === 401 || status === 403) return true;
  const said = `${error.upstreamCode ?? ''} ${error.upstreamMessage ?? ''}`;
  return /(invalid|unknown|bad)[ _-]?(client|credential|secret)|unauthori[sz]ed|authentication failed|signature/i.test(
    said,
  );
};

const isUpstreamFailure = (error: unknown): boolean =>
  error instanceof UpstreamUnavailableError ||
  error instanceof UpstreamRejectedError ||
  error instanceof UpstreamBadResponseError ||
  error instanceof StoreUnavailableError;

export class TokenBroker {
  // Maps, not objects: connection names come from callers and must not reach prototype members.
  readonly #memory = new Map<string, MemoryEntry>();
  readonly #inflight = new Map<string, Promise<ServedToken>>();
  readonly #refreshing = new Set<string>();
  /** Last measured issuance duration per connection: XFetch's δ. */
  readonly #issuanceMs = new Map<string, number>();
  readonly #containerId = randomUUID();
  #attempts = 0;
  readonly #now: () => number;
  readonly #random: () => number;
  readonly #sleep: (ms: number) => Promise<void>;
  readonly #metrics: BrokerMetrics;

  constructor(private readonly deps: TokenBrokerDeps) {
    this.#now = deps.now ?? (() => Date.now());
    this.#random = deps.random ?? Math.random;
    this.#sleep = deps.sleep ?? ((ms) => new Promise((resolve) => setTimeout(resolve, ms)));
    this.#metrics = deps.metrics ?? noMetrics;
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

  /** Returns a token valid for at least `minValiditySeconds`, issuing one only when needed. */
  async getToken(name: string, options: GetTokenOptions): Promise<ServedToken> {
    const connection = this.connection(name);
    const { config } = this.deps;
    const explicit = options.minValiditySeconds !== undefined;
    const minValidity = options.minValiditySeconds ?? config.defaultMinValiditySeconds;
    if (!Number.isInteger(minValidity) || minValidity < 0) {
      throw new BadRequestError('minValidity must be a whole number of seconds, 0 or more');
    }
    if (minValidity >= config.maxTokenLifetimeSeconds) {
      throw new BadRequestError(
        `minValidity must be below the maximum token lifetime (${config.maxTokenLifetimeSeconds}s)`,
      );
    }
    const needMs = minValidity * 1000;
    let served: ServedToken;
    try {
      served =
        this.#fromMemory(name, needMs) ??
        (await this.#singleFlight(connection, needMs, options.deadline));
    } catch (error) {
      // Serve the last good token: a caller that asked for nothing special gets a token that
      // is still valid rather than an error, while the failure is logged and counted.
      const last = this.#memory.get(name)?.record;
      const suspect =
        error instanceof UpstreamUnavailableError && error.details.refreshInProgress === true;
      if (
        explicit ||
        suspect ||
        !isUpstreamFailure(error) ||
        !last ||
        last.expiresAt <= this.#now()
      ) {
        throw error;
      }
      this.deps.logger.warn('Could not get a newer token; serving the last good one', {
        connection: name,
        error: { code: toBrokerError(error).code, message: toBrokerError(error).message },
      });
      this.#metrics.record(MetricName.LastGoodTokenServed, name);
      // Served as a fallback after a failure: no second upstream attempt in this request.
      this.#metrics.record(MetricName.TokensServed, name, 1, 'memory');
      return { record: last, source: 'memory' };
    }
    if (served.source !== 'upstream' && this.#dueForRefresh(served.record)) {
      served = (await this.#refreshAhead(connection, served.record, options.deadline)) ?? served;
    }
    this.#metrics.record(MetricName.TokensServed, name, 1, served.source);
    return served;
  }

  /**
   * Drops the cached token of `name` only if it is `accessToken` (compare-and-delete), so that a
   * late report about an older token cannot drop a fresh one. Returns whether it was dropped.
   */
  async invalidate(name: string, accessToken: string): Promise<boolean> {
    this.connection(name);
    const digest = tokenDigest(accessToken);
    if (this.#memory.get(name)?.record.tokenDigest === digest) this.#memory.delete(name);
    let deleted: boolean;
    try {
      deleted = await this.deps.store.deleteIfMatches(name, digest);
    } catch (error) {
      throw new StoreUnavailableError('The token store could not be updated; retry shortly', {
        cause: error,
      });
    }
    this.deps.logger.info('Invalidate request handled', {
      connection: name,
      tokenDigest: digest,
      invalidated: deleted,
    });
    return deleted;
  }

  /** Every connection's token metadata and lease, read from the shared store. */
  async status(): Promise<ConnectionStatus[]> {
    return Promise.all(
      [...this.deps.config.connections.values()].map(async ({ name, variant }) => {
        const { token, lease } = await this.#store('read the token', () =>
          this.deps.store.read(name),
        );
        const now = this.#now();
        const valid = token && token.expiresAt > now ? token : undefined;
        return {
          connection: name,
          variant,
          token: valid
            ? {
                expiresAt: new Date(valid.expiresAt).toISOString(),
                expiresIn: Math.floor((valid.expiresAt - now) / 1000),
                issuedAt: new Date(valid.issuedAt).toISOString(),
                tokenDigest: valid.tokenDigest,
              }
            : null,
          lease:
            lease && lease.expiresAt >= now
              ? { holder: lease.holder, expiresInMs: lease.expiresAt - now }
              : null,
        };
      }),
    );
  }

  /**
   * Makes sure every connection holds a token valid beyond the refresh window; issues only where
   * one is missing or inside the window. A failing connection does not stop the others.
   */
  async warmUp(deadline: number): Promise<WarmUpReport> {
    const windowMs = this.deps.config.refreshWindowSeconds * 1000;
    const outcomes = await Promise.all(
      [...this.deps.config.connections.values()].map(
        async (connection): Promise<[string, WarmUpOutcome]> => {
          try {
            const { record, source } = await this.#singleFlight(
              connection,
              windowMs,
              deadline,
              true,
            );
            return [
              connection.name,
              {
                status: source === 'upstream' ? 'issued' : 'fresh',
                expiresAt: new Date(record.expiresAt).toISOString(),
                expiresIn: Math.floor((record.expiresAt - this.#now()) / 1000),
              },
            ];
          } catch (error) {
            const failure = this.#warmUpFailure(error);
            this.#metrics.record(MetricName.RefreshFailures, connection.name);
            this.deps.logger.error('Warm-up failed for connection', {
              connection: connection.name,
              error: { name: failure.name, code: failure.code, message: failure.message },
            });
            return [
              connection.name,
              { status: 'failed', error: { code: failure.code, message: failure.message } },
            ];
          }
        },
      ),
    );
    return {
      connections: Object.fromEntries(outcomes),
      issued: outcomes.filter(([, o]) => o.status === 'issued').length,
      failed: outcomes.filter(([, o]) => o.status === 'failed').length,
    };
  }

  #warmUpFailure(error: unknown): BrokerError {
    if (error instanceof MinValidityUnsatisfiableError) {
      return new MinValidityUnsatisfiableError(
        `Tokens of this connection do not outlive BROKER_REFRESH_WINDOW_SECONDS (${this.deps.config.refreshWindowSeconds}s); lower the window below the token lifetime`,
      );
    }
    return toBrokerError(error);
  }

  /** The memory entry, if valid for `needMs` and confirmed by the store recently enough. */
  #fromMemory(name: string, needMs: number): ServedToken | undefined {
    const cached = this.#memory.get(name);
    const now = this.#now();
    // Why re-check after memoryRecheckSeconds: another container may have invalidated or
    // replaced the shared token; a memory cache that never looks would keep serving it.
    if (!cached || cached.record.expiresAt - now <= needMs) return undefined;
    const recheckMs =
      cached.record.expiresAt - now <= this.#windowMs(cached.record)
        ? Math.min(WINDOW_RECHECK_MS, this.deps.config.memoryRecheckSeconds * 1000)
        : this.deps.config.memoryRecheckSeconds * 1000;
    return now - cached.checkedAt < recheckMs
      ? { record: cached.record, source: 'memory' }
      : undefined;
  }

  /** The refresh window of a token: configured, but never more than half its lifetime. */
  #windowMs(record: TokenRecord): number {
    // A window as long as the lifetime would refresh on every request, forever.
    return Math.min(
      this.deps.config.refreshWindowSeconds * 1000,
      (record.expiresAt - record.issuedAt) / 2,
    );
  }

  /**
   * XFetch (Vattani et al., VLDB 2015), aimed at the middle of the refresh window with its
   * earliness capped at half a window: the closer the middle, the likelier a request tries for
   * the lease, so the fleet does not try in step, and every try falls inside the window, where
   * all containers re-check their memory fast (a refresh may revoke what they hold). XFetch's
   * exponential tail is capped because a busy fleet draws it hundreds of times a second. It
   * decides when to *try*; the lease decides who mints.
   */
  #dueForRefresh(record: TokenRecord): boolean {
    const half = this.#windowMs(record) / 2;
    const delta = this.#issuanceMs.get(record.connection) ?? DEFAULT_ISSUANCE_MS;
    const earliness = Math.min(half, -delta * XFETCH_BETA * Math.log(1 - this.#random()));
    return this.#now() + earliness >= record.expiresAt - half;
  }

  /**
   * Tries once for the lease to replace a token that is still valid. Never waits for another
   * holder and never fails the caller: on any problem the current token keeps being served.
   */
  async #refreshAhead(
    connection: ConnectionConfig,
    current: TokenRecord,
    deadline: number,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    if (this.#refreshing.has(name) || this.#inflight.has(name)) return undefined;
    this.#refreshing.add(name);
    const now = this.#now();
    const holder = this.#nextHolder();
    try {
      const attempt = await this.deps.store.acquireLease(name, {
        holder,
        leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
        now,
        // Replace the token we saw, never a newer one another container wrote meanwhile.
        replaceIfExpiresBefore: current.expiresAt + 1,
      });
      if (!attempt.acquired) return undefined;
      this.deps.logger.info('Refreshing the token ahead of expiry', { connection: name });
      return await this.#issueUnderLease(connection, {
        holder,
        needMs: 0,
        deadline,
        replacingValidToken: true,
      });
    } catch (error) {
      const failure = toBrokerError(error);
      this.#metrics.record(MetricName.RefreshFailures, name);
      this.deps.logger.warn('Refresh ahead of expiry failed; the current token is still served', {
        connection: name,
        error: { name: failure.name, code: failure.code, message: failure.message },
      });
      return undefined;
    } finally {
      this.#refreshing.delete(name);
    }
  }

  /** Concurrent misses for one connection in this container share one load. */
  async #singleFlight(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
    bypassMemory = false,
  ): Promise<ServedToken> {
    const existing = this.#inflight.get(connection.name);
    if (!existing) {
      const load = this.#obtain(connection, needMs, deadline, bypassMemory).finally(() =>
        this.#inflight.delete(connection.name),
      );
      this.#inflight.set(connection.name, load);
      return load;
    }
    const shared = await withDeadline(existing, deadline - this.#now());
    if (shared.record.expiresAt - this.#now() > needMs) return shared;
    // The shared load asked for less validity than this caller needs.
    if (shared.source === 'upstream') throw this.#unsatisfiable(shared.record, needMs);
    return this.#obtain(connection, needMs, deadline, bypassMemory);
  }

  /** Reads the store until it holds a token valid for `needMs`, issuing it under the lease. */
  async #obtain(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
    bypassMemory: boolean,
  ): Promise<ServedToken> {
    const { name } = connection;
    let known: TokenState | undefined;
    let waits = 0;
    for (;;) {
      const state = known ?? (await this.#read(name, needMs, bypassMemory));
      known = undefined;
      if ('source' in state) return state; // the store is down; memory had a usable token
      const now = this.#now();
      const { token, lease } = state;
      // DynamoDB deletes expired items late (up to days): expiry is always checked here.
      if (token && token.expiresAt > now) this.#memory.set(name, { record: token, checkedAt: now });
      else this.#memory.delete(name);
      const leaseLive = lease !== undefined && lease.expiresAt >= now;
      // A live lease on a token inside its window is a refresh in progress: the token may be
      // revoked upstream at any moment, so wait for its successor instead of serving it.
      const refreshing =
        connection.revokesOnReissue &&
        leaseLive &&
        token !== undefined &&
        token.expiresAt - now <= this.#windowMs(token);
      if (token && token.expiresAt - now > needMs && !refreshing)
        return { record: token, source: 'dynamodb' };

      if (!leaseLive) {
        if (deadline <= now) throw new UpstreamUnavailableError('No time left to issue a token', 1);
        const holder = this.#nextHolder();
        const attempt = await this.#store('take the lease', () =>
          this.deps.store.acquireLease(name, {
            holder,
            leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
            now,
            replaceIfExpiresBefore: now + needMs + 1,
          }),
        );
        if (attempt.acquired) {
          const issued = await this.#issueUnderLease(connection, {
            holder,
            needMs,
            deadline,
            replacingValidToken: token !== undefined && token.expiresAt > now,
          });
          if (issued) return issued;
          continue; // our lease was taken over while we ran: wait for the new holder's token
        }
        known = attempt.state;
        continue;
      }

      // Another container holds a live lease: wait for its token, within our own deadline.
      if (waits === 0) {
        this.#metrics.record(MetricName.LeaseWaits, name);
        this.deps.logger.info('Waiting for another container to issue the token', {
          connection: name,
          leaseExpiresInMs: lease.expiresAt - now,
        });
      }
      if (deadline - now <= 0) {
        throw new UpstreamUnavailableError(
          'Timed out waiting for another container to issue the token',
          1,
          // While a refresh of a revoking upstream is in progress, the current token may
          // already be revoked: it must not be served as the last good one.
          { details: { refreshInProgress: refreshing } },
        );
      }
      // Full jitter below a doubling ceiling, at least 1 ms, never past the deadline.
      const ceiling = Math.min(POLL_CAP_MS, POLL_BASE_MS * 2 ** waits);
      const wait = Math.min(Math.max(1, this.#random() * ceiling), deadline - now);
      waits += 1;
      await this.#sleep(wait);
    }
  }

  /** Reads the store; when it is down, falls back to a usable token in memory. */
  async #read(
    name: string,
    needMs: number,
    bypassMemory: boolean,
  ): Promise<TokenState | ServedToken> {
    try {
      return await this.deps.store.read(name);
    } catch (error) {
      const cached = this.#memory.get(name);
      if (!bypassMemory && cached && cached.record.expiresAt - this.#now() > needMs) {
        this.deps.logger.warn('Token store unreadable; serving the token held in memory', {
          connection: name,
        });
        return { record: cached.record, source: 'memory' };
      }
      throw new StoreUnavailableError('The token store could not be read; retry shortly', {
        cause: error,
      });
    }
  }

  async #store<T>(what: string, operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw new StoreUnavailableError(`The token store failed to ${what}; retry shortly`, {
        cause: error,
      });
    }
  }

  /**
   * Runs the flow while holding the lease and writes the token, which releases the lease.
   * Returns undefined when the lease was lost meanwhile (the new holder's token wins).
   */
  async #issueUnderLease(
    connection: ConnectionConfig,
    flow: LeasedFlow,
  ): Promise<ServedToken | undefined> {
    const heartbeat = setInterval(() => {
      const leaseExpiresAt = Math.min(flow.deadline, this.#now() + LEASE_MS);
      this.deps.store
        .renewLease(connection.name, flow.holder, leaseExpiresAt)
        .catch(() => undefined);
    }, LEASE_HEARTBEAT_MS);
    try {
      return await this.#runUnderLease(connection, flow);
    } finally {
      clearInterval(heartbeat);
    }
  }

  async #runUnderLease(
    connection: ConnectionConfig,
    { holder, needMs, deadline, replacingValidToken }: LeasedFlow,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    let record: TokenRecord;
    try {
      if (replacingValidToken && connection.revokesOnReissue) await this.#sleep(DRAIN_MS);
      const started = this.#now();
      const issued = await this.#issueWithCurrentCredentials(connection, deadline);
      const took = this.#now() - started;
      this.#issuanceMs.set(name, took);
      this.#metrics.record(MetricName.UpstreamIssuances, name);
      this.#metrics.record(MetricName.UpstreamLatency, name, took);
      record = {
        connection: name,
        accessToken: issued.accessToken,
        tokenDigest: tokenDigest(issued.accessToken),
        issuedAt: issued.requestedAt,
        expiresAt: issued.requestedAt + issued.expiresIn * 1000,
      };
      this.#checkSkew(name, issued.upstreamTimestamp, issued.requestedAt);
      this.deps.logger.info('Token issued by the Open API', {
        connection: name,
        variant: connection.variant,
        tokenDigest: record.tokenDigest,
        expiresIn: issued.expiresIn,
        issuanceMs: took,
      });
    } catch (error) {
      // The flow failed: free the lease now rather than make others wait for it to expire.
      await this.deps.store.releaseLease(name, holder).catch(() => undefined);
      throw error;
    }
    let written: boolean;
    try {
      written = await this.deps.store.putToken(record, holder);
    } catch (error) {
      // The token is valid: serve it from memory rather than fail the caller. Other containers
      // will wait out the lease, which costs at worst one more issuance.
      this.deps.logger.error('Token store write failed; token kept in memory only', {
        connection: name,
        error: { name: (error as Error)?.name },
      });
      written = true;
    }
    if (!written) {
      this.deps.logger.warn('Lease was taken over while issuing; using the new holder’s token', {
        connection: name,
        tokenDigest: record.tokenDigest,
      });
      return undefined;
    }
    this.#memory.set(name, { record, checkedAt: this.#now() });
    if (record.expiresAt - this.#now() <= needMs) throw this.#unsatisfiable(record, needMs);
    return { record, source: 'upstream' };
  }

  /**
   * Runs the flow; if the upstream rejects the credentials, reads the secret again bypassing
   * every cache and, if it changed (a rotation), tries once more with the new one.
   */
  async #issueWithCurrentCredentials(connection: ConnectionConfig, deadline: number) {
    const credentials = await this.deps.secrets.getCredentials(connection.secretId);
    try {
      return await this.deps.issuer.issue(connection, credentials, { deadline });
    } catch (error) {
      if (!isCredentialRejection(error)) throw error;
      const fresh = await this.deps.secrets.getCredentials(connection.secretId, {
        forceFetch: true,
      });
      if (
        fresh.clientId === credentials.clientId &&
        fresh.clientSecret === credentials.clientSecret
      )
        throw error;
      this.deps.logger.warn(
        'Credentials rejected; the secret changed, retrying once with the new one',
        {
          connection: connection.name,
        },
      );
      return await this.deps.issuer.issue(connection, fresh, { deadline });
    }
  }

  #checkSkew(name: string, upstreamTimestamp: number | undefined, requestedAt: number) {
    if (upstreamTimestamp === undefined) return;
    const skewMs = upstreamTimestamp * 1000 - requestedAt;
    if (Math.abs(skewMs) > SKEW_WARNING_MS) {
      this.deps.logger.warn('Upstream clock differs from ours; expiry counts from our clock', {
        connection: name,
        skewSeconds: Math.round(skewMs / 1000),
      });
    }
  }

  #nextHolder(): string {
    this.#attempts += 1;
    return `${this.#containerId}:${this.#attempts}`;
  }

  #unsatisfiable(record: TokenRecord, needMs: number): MinValidityUnsatisfiableError {
    const lifetime = Math.floor((record.expiresAt - record.issuedAt) / 1000);
    return new MinValidityUnsatisfiableError(
      `The Open API issues tokens valid for ${lifetime}s, which cannot satisfy a validity of ${Math.ceil(needMs / 1000)}s`,
    );
  }
}

/** Waits for `promise` at most `wait` ms: the caller must be answered before its deadline. */
const withDeadline = <T>(promise: Promise<T>, wait: number): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new UpstreamUnavailableError(
            'Timed out waiting for a token being issued concurrently',
            1,
          ),
        ),
      Math.max(0, wait),
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
};
