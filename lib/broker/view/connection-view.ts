/**
 * What this container knows about each connection, in one place: its copy of the token with
 * what the store last said of it (`token-memory.ts`), the lease versions it has watched
 * (`lease-watch.ts`), and since when it has known each token. Every rule for serving a token
 * without a fresh read lives here too: from memory, while the store is down, and as the last
 * good one. The rules' arithmetic is `timing/`'s.
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import {
  isOutcomeUnknown,
  StoreUnavailableError,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../errors.js';
import type { Lease, TokenRecord, TokenState } from '../../ports.js';
import {
  type ProtocolTiming,
  proofMs,
  type RefreshSettings,
  recheckMs,
  replacementMayBeOut,
  rereadNearCutOver,
  reusableUntil,
  servableUnconfirmed,
  staleIfErrorMs,
  timingOf,
} from '../timing/index.js';
import { LeaseWatch } from './lease-watch.js';
import { type MemoryEntry, TokenMemory } from './token-memory.js';

export type { MemoryEntry } from './token-memory.js';

/** When a read of the store was sent, on both clocks (what it proves counts from there). */
export interface ReadSent {
  readonly sentAt: number;
  readonly sentAtMonotonic: number;
}

/** What a read says of a connection's token, as this container judges it. */
export interface Seen {
  /** The stored token, if still valid on this clock. */
  readonly valid: TokenRecord | undefined;
  /** Its replacement's request may be out (a countdown ended): neither served nor kept. I2. */
  readonly suspect: boolean;
  /** How long after the read was sent it proves `valid` safe to serve (ms). I2. */
  readonly proofMs: number;
  /** The lease on it has not changed for its duration, as watched here. I1. */
  readonly leaseStale: boolean;
}

export class ConnectionView {
  readonly #memory: TokenMemory;
  readonly #watch: LeaseWatch;

  constructor(
    clock: Pick<Clock, 'now' | 'monotonic'>,
    private readonly settings: RefreshSettings,
  ) {
    this.#memory = new TokenMemory(clock);
    this.#watch = new LeaseWatch(() => clock.monotonic());
  }

  /**
   * Keeps what a read (sent at `read`, answered at `now`) says: a valid token with the time the
   * read proves it safe, and the lease on it (first seen now, on our clock). A token whose
   * replacement's request may be out (its lease counted down, live or lapsed) is suspect:
   * neither served nor kept.
   */
  observe(connection: ConnectionConfig, state: TokenState, read: ReadSent, now: number): Seen {
    const { token, lease } = state;
    const leaseStale =
      lease !== undefined &&
      this.#watch.stale(connection.name, lease, now, this.timing.skewToleranceMs);
    const valid = token && token.expiresAt > now ? token : undefined;
    // Where the upstream does not revoke on re-issue, a replacement harms nobody.
    const announced = connection.revokesOnReissue ? lease : undefined;
    const suspect = valid !== undefined && replacementMayBeOut(announced, this.timing);
    if (!valid || suspect) {
      this.#memory.delete(connection.name);
      return { valid, suspect, proofMs: 0, leaseStale };
    }
    const proof = proofMs(valid, announced, this.settings);
    this.#memory.set({
      record: valid,
      checkedAt: read.sentAt,
      checkedAtMonotonic: read.sentAtMonotonic,
      until: read.sentAt + proof,
      lease: announced,
      ...(state.reported ? { reported: true } : {}),
    });
    return { valid, suspect, proofMs: proof, leaseStale };
  }

  /**
   * Keeps a token that a read or a write at `at` confirmed with no lease on it: one this
   * container just wrote (or could not write: `untilAtMost` then), or got back on releasing.
   */
  confirmed(record: TokenRecord, at: ReadSent, untilAtMost = Number.POSITIVE_INFINITY): void {
    this.#memory.set({
      record,
      checkedAt: at.sentAt,
      checkedAtMonotonic: at.sentAtMonotonic,
      until: Math.min(at.sentAt + proofMs(record, undefined, this.settings), untilAtMost),
    });
  }

  /** The protocol's timing this container runs at (the settings', else the default). */
  get timing(): ProtocolTiming {
    return timingOf(this.settings);
  }

  /** The entry of `name`, times rebased on the monotonic clock (see TokenMemory). */
  entry(name: string): MemoryEntry | undefined {
    return this.#memory.get(name);
  }

  /** When this container first saw `lease`'s version (wall), if it is the one it last saw. */
  leaseFirstSeen(name: string, lease: Lease): number | undefined {
    return this.#watch.firstSeen(name, lease);
  }

  /** Drops whatever is kept for `name`. */
  drop(name: string): void {
    this.#memory.delete(name);
  }

  /** Drops the entry of `record`'s connection only if it still holds that token. */
  forget(record: TokenRecord): void {
    this.#memory.forget(record);
  }

  /** Marks the entry of `name` as reported, if it holds the token of `digest`. */
  report(name: string, digest: string): void {
    this.#memory.report(name, digest);
  }

  /** How long this container has known the token of `digest` (ms, monotonic). I4. */
  knownFor(name: string, digest: string): number {
    return this.#memory.knownFor(name, digest);
  }

  /**
   * I2. The token in memory, if it may be served for a caller who needs `needMs` more validity
   * without reading the store: valid long enough, read less than a re-check ago, and still
   * inside the time that read proved it safe (a countdown read long before its end is read
   * again near it). Why re-check at all: another container may have replaced the token.
   */
  fromMemory(name: string, now: number, needMs: number): TokenRecord | undefined {
    const entry = this.#memory.get(name);
    return entry && servableFromMemory(entry, now, needMs, this.settings)
      ? entry.record
      : undefined;
  }

  /**
   * I2. The token in memory, if it may be served for `needMs` while the store cannot be read:
   * only inside what the last read proved (or an operator's explicit outage grace).
   */
  whileStoreDown(name: string, now: number, needMs: number): TokenRecord | undefined {
    const entry = this.#memory.get(name);
    return entry &&
      entry.record.expiresAt - now > needMs &&
      servableUnconfirmed(entry, now, this.settings)
      ? entry.record
      : undefined;
  }

  /**
   * The last good token, which may stand in for a newer one after `error`, for a caller who
   * asked for nothing special: a failure that says nothing against it (not a replacement under
   * way elsewhere, nor a request whose outcome is unknown, either of which may have revoked
   * it), and only while unconfirmed for less than a replacement elsewhere needs. I2.
   */
  lastGood(name: string, now: number, error: unknown): TokenRecord | undefined {
    const suspect =
      (error instanceof UpstreamUnavailableError && error.refreshInProgress === true) ||
      isOutcomeUnknown(error);
    if (suspect || !isUpstreamFailure(error)) return undefined;
    const entry = this.#memory.lastGood(name, now);
    return entry && servableUnconfirmed(entry, now, this.settings) ? entry.record : undefined;
  }

  /**
   * I2 in callers' caches. How long the caller may reuse `record` (`reusableUntil`): what memory
   * holds of it now, whichever path served it; and for how long after that it may use it if it
   * cannot reach the broker (`staleIfErrorMs`, see `timing`): none for a token served
   * `unconfirmed` (the last good one after a failure). A token memory no longer holds (replaced,
   * dropped) is not to be reused at all, nor used stale.
   */
  reuse(
    record: TokenRecord,
    needMs: number,
    now: number,
    unconfirmed = false,
  ): { readonly reusableUntil: number; readonly staleIfErrorMs: number } {
    const entry = this.#memory.get(record.connection);
    if (entry?.record.tokenDigest !== record.tokenDigest) {
      return { reusableUntil: now, staleIfErrorMs: 0 };
    }
    const until = reusableUntil(entry, needMs, this.settings);
    return {
      reusableUntil: until,
      staleIfErrorMs: unconfirmed ? 0 : staleIfErrorMs(entry, until, now, this.timing),
    };
  }
}

/** I2. The rule of `ConnectionView.fromMemory`, on one entry (pure). */
export const servableFromMemory = (
  entry: MemoryEntry,
  now: number,
  needMs: number,
  settings: RefreshSettings,
): boolean =>
  entry.record.expiresAt - now > needMs &&
  now < entry.until &&
  now - entry.checkedAt < recheckMs(entry.record, settings) &&
  !rereadNearCutOver(entry, now, timingOf(settings));

/** Failures after which the last good token may stand in for a newer one. */
const isUpstreamFailure = (error: unknown): boolean =>
  error instanceof UpstreamUnavailableError ||
  error instanceof UpstreamRejectedError ||
  error instanceof UpstreamBadResponseError ||
  error instanceof StoreUnavailableError;
