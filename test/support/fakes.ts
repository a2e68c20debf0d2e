/** In-memory implementations of the ports, for unit tests of the core. */

import { ttlOf } from '../../lib/adapters/dynamodb-token-item.js';
import type { BrokerLogger } from '../../lib/broker/index.js';
import { DEFAULT_TIMING, proofMs, type RefreshSettings } from '../../lib/broker/timing/index.js';
import type { ConnectionView } from '../../lib/broker/view/connection-state.js';
import type { MemoryEntry } from '../../lib/broker/view/serving.js';
import { ownRequest, type TokenRequest } from '../../lib/broker/view/serving.js';
import type { Clock, Deadline } from '../../lib/clock.js';
import type { ConnectionConfig } from '../../lib/config.js';
import type { BrokerMetrics, MetricName } from '../../lib/metrics.js';
import type {
  AuthorizationCode,
  ClientCredentials,
  IssuedToken,
  Lease,
  LeaseAttempt,
  LeaseRef,
  LeaseRequest,
  LeaseTerms,
  SecretSource,
  StepOptions,
  StoreCall,
  TokenIssuer,
  TokenRecord,
  TokenState,
  TokenStore,
} from '../../lib/ports.js';
import { sealCode } from '../../lib/upstream/authorization-code.js';

/** Whether `lease` is exactly the write `ref` names (holder and version). */
const isExactly = (lease: Lease | undefined, ref: LeaseRef): boolean =>
  lease?.holder === ref.holder && lease.version === ref.version;

/** The lease fields one write sets. */
const leaseOf = (terms: LeaseTerms) => ({
  version: terms.version,
  expiresAt: terms.leaseExpiresAt,
  durationMs: terms.durationMs,
  countdown: terms.countdown,
  // Every write sets it, as the adapter does: none announced reads as none.
  stepMs: terms.stepMs !== undefined && terms.stepMs > 0 ? Math.round(terms.stepMs) : undefined,
});

/** The store port in memory, with the same conditions as the DynamoDB adapter. */
export class InMemoryTokenStore implements TokenStore {
  readonly items = new Map<
    string,
    {
      token?: TokenRecord;
      lease?: Lease;
      invalidatedAt?: number;
      reportedDigest?: string;
      /** DynamoDB's TTL attribute (epoch seconds), as the adapter writes it. */
      ttl?: number;
    }
  >();
  calls = { read: 0, acquire: 0, renew: 0, put: 0, release: 0, delete: 0, report: 0 };
  /** The deadline each kind of write was last called with (a conflict's retries run until it). */
  deadlines: Partial<
    Record<Exclude<keyof InMemoryTokenStore['calls'], 'read'>, Deadline | undefined>
  > = {};
  failing = false;

  #check() {
    if (this.failing) throw new Error('store down');
  }
  token(connection: string) {
    return this.items.get(connection)?.token;
  }
  setToken(record: TokenRecord) {
    this.items.set(record.connection, {
      ...this.items.get(record.connection),
      token: record,
      ttl: ttlOf(record),
    });
  }
  /**
   * DynamoDB's TTL: deletes every item whose `ttl` is before `nowSeconds` (epoch seconds), as
   * TTL may at any time after it. Returns the connections it deleted.
   */
  sweepExpired(nowSeconds: number): string[] {
    const swept = [...this.items]
      .filter(([, item]) => item.ttl !== undefined && item.ttl < nowSeconds)
      .map(([name]) => name);
    for (const name of swept) this.items.delete(name);
    return swept;
  }
  async read(connection: string): Promise<TokenState> {
    this.calls.read += 1;
    this.#check();
    return this.#state(this.items.get(connection));
  }
  /** What a read would show now, uncounted: the image a read copy holds (the model's copies). */
  stateOf(connection: string): TokenState {
    return this.#state(this.items.get(connection));
  }
  #state(item: ReturnType<typeof this.items.get>): TokenState {
    return {
      token: item?.token,
      lease: item?.lease,
      ...(item?.invalidatedAt !== undefined && !item.token
        ? { invalidatedAt: item.invalidatedAt }
        : {}),
      ...(item?.token && item.reportedDigest === item.token.tokenDigest ? { reported: true } : {}),
    };
  }
  async acquireLease(
    connection: string,
    request: LeaseRequest,
    call?: StoreCall,
  ): Promise<LeaseAttempt> {
    this.calls.acquire += 1;
    this.deadlines.acquire = call?.deadline;
    this.#check();
    const item = this.items.get(connection) ?? {};
    const { takeOver } = request;
    // A takeover lands only on exactly the version it names, never on a lease that has gone.
    const leaseFree =
      takeOver === undefined
        ? !item.lease
        : isExactly(item.lease, takeOver) && item.lease?.expiresAt === takeOver.expiresAt;
    // Only the token the taker read, or none if it read none.
    const tokenReplaceable = item.token?.tokenDigest === request.replacesDigest;
    // What won, as a read would show it (DynamoDB returns the whole item).
    if (!leaseFree || !tokenReplaceable) return { acquired: false, state: this.#state(item) };
    // A lease write removes the ttl, as the adapter does: TTL never deletes a held lease.
    const { ttl: _removed, ...rest } = item;
    this.items.set(connection, {
      ...rest,
      lease: {
        holder: request.holder,
        ...leaseOf(request),
        ...(request.forced ? { forced: true } : {}),
      },
    });
    return { acquired: true };
  }
  async putToken(record: TokenRecord, lease: LeaseRef, call?: StoreCall): Promise<boolean> {
    this.calls.put += 1;
    this.deadlines.put = call?.deadline;
    this.#check();
    const item = this.items.get(record.connection) ?? {};
    if (!isExactly(item.lease, lease)) return false;
    this.items.set(record.connection, { token: record, ttl: ttlOf(record) });
    return true;
  }
  async renewLease(
    connection: string,
    lease: LeaseRef,
    next: LeaseTerms,
    call?: StoreCall,
  ): Promise<boolean> {
    this.calls.renew += 1;
    this.deadlines.renew = call?.deadline;
    this.#check();
    const item = this.items.get(connection);
    // Exactly the version last written, or the one this write sets (a retry that landed).
    const retried = item?.lease?.holder === lease.holder && item.lease.version === next.version;
    if (!item?.lease || !(isExactly(item.lease, lease) || retried)) {
      return false;
    }
    const { ttl: _removed, ...rest } = item;
    this.items.set(connection, { ...rest, lease: { ...item.lease, ...leaseOf(next) } });
    return true;
  }
  async releaseLease(connection: string, lease: LeaseRef, call?: StoreCall): Promise<boolean> {
    this.calls.release += 1;
    this.deadlines.release = call?.deadline;
    this.#check();
    const item = this.items.get(connection);
    const unanswered =
      lease.unanswered !== undefined &&
      isExactly(item?.lease, { ...lease, version: lease.unanswered });
    if (!item || !(isExactly(item.lease, lease) || unanswered)) return false;
    // Only the lease goes, as DynamoDB removes only its attributes.
    const { lease: _released, ...rest } = item;
    this.items.set(connection, rest);
    return true;
  }
  async deleteIfMatches(
    connection: string,
    tokenDigest: string,
    { reportedAt = Date.now(), deadline }: { reportedAt?: number | undefined } & StoreCall = {},
  ): Promise<boolean> {
    this.calls.delete += 1;
    this.deadlines.delete = deadline;
    this.#check();
    const item = this.items.get(connection);
    if (item?.token?.tokenDigest !== tokenDigest) return false;
    // The token's `ttl` goes with it: a kept report is never deleted by TTL.
    this.items.set(connection, {
      ...(item.lease ? { lease: item.lease } : {}),
      invalidatedAt: reportedAt,
    });
    return true;
  }
  async markReported(connection: string, tokenDigest: string, call?: StoreCall): Promise<boolean> {
    this.calls.report += 1;
    this.deadlines.report = call?.deadline;
    this.#check();
    const item = this.items.get(connection);
    if (item?.token?.tokenDigest !== tokenDigest) return false;
    this.items.set(connection, { ...item, reportedDigest: tokenDigest });
    return true;
  }
}

export class FakeSecretSource implements SecretSource {
  calls = 0;
  forcedFetches = 0;
  /** What the store holds now; a forced fetch returns it, a normal one the cached value. */
  stored: ClientCredentials;
  constructor(
    public credentials: ClientCredentials = { clientId: 'client-1', clientSecret: 'secret-1' },
  ) {
    this.stored = credentials;
  }
  async getCredentials(_secretId: string, options: { forceFetch?: boolean } = {}) {
    this.calls += 1;
    if (!options.forceFetch) return this.credentials;
    this.forcedFetches += 1;
    this.credentials = this.stored;
    return this.credentials;
  }
}

/**
 * Issues `token-1`, `token-2`, … with the given lifetime; can be made slow or failing. As the
 * real client: `authorize` hands out a code (slowly, or failing, when told), `requestToken` is
 * the access-token POST the caller fenced before.
 */
export class FakeIssuer implements TokenIssuer {
  issued = 0;
  expiresIn = 3600;
  delayMs = 0;
  failWith: Error | undefined;
  constructor(private readonly now: () => number = () => Date.now()) {}

  /** Authorization codes handed out. */
  authorized = 0;
  /** Access-token requests that were sent (after the fence let them through). */
  posts = 0;
  async authorize(
    _connection: ConnectionConfig,
    _credentials: ClientCredentials,
    _options?: StepOptions,
  ): Promise<AuthorizationCode> {
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    if (this.failWith) throw this.failWith;
    this.authorized += 1;
    return sealCode(`code-${this.authorized}`);
  }
  async requestToken(
    _connection: ConnectionConfig,
    _credentials: ClientCredentials,
    _code: AuthorizationCode,
    options?: StepOptions,
  ): Promise<IssuedToken> {
    options?.signal?.throwIfAborted();
    this.posts += 1;
    const requestedAt = this.now();
    this.issued += 1;
    return {
      accessToken: `token-${this.issued}`,
      expiresIn: this.expiresIn,
      upstreamTimestamp: Math.floor(requestedAt / 1000),
      requestedAt,
    };
  }
}

export interface CapturedLog {
  readonly level: string;
  readonly message: string;
  readonly attributes: Record<string, unknown>[];
}

export const captureLogger = (): BrokerLogger & { lines: CapturedLog[] } => {
  const lines: CapturedLog[] = [];
  const at =
    (level: string) =>
    (message: string, ...attributes: Record<string, unknown>[]) =>
      lines.push({ level, message, attributes });
  return { lines, debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error') };
};

export const connection = (overrides: Partial<ConnectionConfig> = {}): ConnectionConfig => ({
  name: 'sandbox',
  variant: 'v3',
  baseUrl: 'https://open-api.example.com',
  secretId: 'open-api/sandbox',
  callers: undefined,
  codeField: 'code',
  revokesOnReissue: true,
  ...overrides,
});

/** Sums every metric by name (and `name:source` for served tokens). */
export class CountingMetrics implements BrokerMetrics {
  readonly totals = new Map<string, number>();
  record(name: MetricName, _connection: string, value = 1, source?: string) {
    const key = source ? `${name}:${source}` : name;
    this.totals.set(key, (this.totals.get(key) ?? 0) + value);
  }
  get(key: string) {
    return this.totals.get(key) ?? 0;
  }
}

/**
 * A clock that moves only when told: `sleep` and `advance` move it and fire the timers that
 * fall due on the way, in order. No real time passes, and no global is faked.
 */
export class ManualClock implements Clock {
  #now: number;
  /** The monotonic clock: moves with `advance` and `advanceNow`, not with `step`. */
  #monotonic = 0;
  #timers: { at: number; every?: number; fire: () => void; id: number }[] = [];
  #ids = 0;
  draw = 0;
  constructor(start: number) {
    this.#now = start;
  }
  now() {
    return this.#now;
  }
  monotonic() {
    return this.#monotonic;
  }
  /** Steps the wall clock alone (NTP, an operator): durations on the monotonic clock go on. */
  step(ms: number) {
    this.#now += ms;
    for (const timer of this.#timers) timer.at += ms;
  }
  random() {
    return this.draw;
  }
  async sleep(ms: number) {
    await this.advance(ms);
  }
  every(ms: number, tick: () => void) {
    return this.#add({ at: this.#now + ms, every: ms, fire: tick });
  }
  after(ms: number, fire: () => void) {
    return this.#add({ at: this.#now + ms, fire });
  }
  /** Moves time forward by `ms`, firing due timers and letting their promises settle. */
  async advance(ms: number) {
    const until = this.#now + ms;
    for (;;) {
      const next = this.#timers.filter((t) => t.at <= until).sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      this.#monotonic += next.at - this.#now;
      this.#now = next.at;
      if (next.every) next.at += next.every;
      else this.#timers = this.#timers.filter((t) => t !== next);
      next.fire();
      await settle();
    }
    this.#monotonic += until - this.#now;
    this.#now = until;
    await settle();
  }
  /** Moves the clock without firing timers: a process that was paused (SIGSTOP) sees this. */
  advanceNow(ms: number) {
    this.#now += ms;
    this.#monotonic += ms;
  }
  /** Timers still armed: a module that forgets to stop one leaks work into later calls. */
  pending() {
    return this.#timers.length;
  }
  #add(timer: { at: number; every?: number; fire: () => void }) {
    this.#ids += 1;
    const entry = { ...timer, id: this.#ids };
    this.#timers.push(entry);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== entry);
    };
  }
}

/** Lets every already-resolved promise chain run. */
const settle = () => new Promise<void>((resolve) => setImmediate(resolve));

/** A memory entry as a read sent at `checkedAt` that found no lease leaves it. */
export const confirmedAt = (
  record: TokenRecord,
  checkedAt: number,
  settings: RefreshSettings = {
    refreshWindowMs: 600_000,
    memoryRecheckMs: 5_000,
    timing: DEFAULT_TIMING,
  },
): MemoryEntry => ({
  record,
  checkedAt,
  until: checkedAt + proofMs(record, undefined, settings),
});

/** Primes `view` as a read sent at `checkedAt` (on `clock`) that found `record` with no lease. */
export const primed = (
  view: ConnectionView,
  clock: Pick<Clock, 'now' | 'monotonic'>,
  record: TokenRecord,
  checkedAt: number,
): void =>
  view.confirmed(record, {
    sentAt: checkedAt,
    sentAtMonotonic: clock.monotonic() - (clock.now() - checkedAt),
  });

/** A `TokenRequest` for `minValidityMs` by `deadline`: an unnamed caller, which may force. */
export const asks = (
  minValidityMs: TokenRequest['minValidityMs'],
  deadline: Deadline,
  more: Partial<TokenRequest> = {},
): TokenRequest => ({ ...ownRequest(minValidityMs, deadline, 'unnamed caller'), ...more });
