/**
 * Everything this container knows about one connection, as one value (`Knowledge`), and the
 * one function that changes it (`applyEvent`): its copy of the token with what the store last
 * said of it, since when it has known each token, the lease version it last saw, the probe's
 * verdicts, and the durations it measured. `ConnectionState` holds the current value: `apply`
 * is its only writer, and every query is a pure read of the value at an instant the caller
 * passes (no query records anything, not even a first sight).
 *
 * An entry's times (`checkedAt`, `until`: the proof of invariant I2; and the token's own
 * `issuedAt` and `expiresAt`) are wall-clock instants, compared by the serving rules with the
 * wall clock. So that a wall clock stepped back cannot stretch them, every entry is handed out
 * rebased: when more time has passed on the monotonic clock since it was kept than on the wall
 * clock, all its times move earlier by the difference, so that each one is as far from the wall
 * clock's "now" as the monotonic clock says. The expiry the upstream stated is thus compared
 * with the wall clock once, when it is read, and judged on the monotonic clock from then on. A
 * wall clock stepped forward already ends them early; a freeze the monotonic clock did not
 * count, the wall clock did.
 *
 * What is not here: promises in flight (a shared load, a running refresh, a probe under way,
 * the leases held). They are handles on work, not knowledge: a value cannot hold them, and each
 * lives and dies with the call that awaits it.
 */
import type { Lease, ProbeVerdict, TokenRecord } from '../../ports.js';

export interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the read that last confirmed this token was sent (local epoch ms). */
  readonly checkedAt: number;
  /**
   * The monotonic clock at that same instant: the entry is rebased from there, so that a wall
   * clock stepped while the read was in flight cannot stretch it. Without it, from when the
   * entry is kept.
   */
  readonly checkedAtMonotonic?: number | undefined;
  /** Until when that read proves the token safe to serve (`proofMs` from its send). */
  readonly until: number;
  /** The lease that read found on the token: its replacement is under way, cut-over announced. */
  readonly lease?: Lease | undefined;
  /** A caller reported the token as rejected too early to replace it: replaced once it may be. */
  readonly reported?: boolean | undefined;
  /**
   * Held in memory only (its write after the POST failed): the confirmed lease is taken over at
   * countdown 0 once it runs out, and the token replaced. No stale use is granted (ADR 0017).
   */
  readonly unstored?: boolean | undefined;
}

/** One instant on both of this container's clocks. */
export interface Instant {
  readonly wall: number;
  readonly monotonic: number;
}

/** An entry with both clocks' readings from which it is rebased. */
interface Kept {
  readonly entry: MemoryEntry;
  readonly wallAt: number;
  readonly monotonicAt: number;
}

/** A lease version as first seen here, on both clocks (I1: staleness is judged on ours). */
interface SeenLease {
  /** What tells two writes apart (`leaseKey`). */
  readonly key: string;
  readonly seenAt: number;
  readonly seenAtMonotonic: number;
}

/** A probe's verdict on one token, reused until `until` (monotonic: sent + the interval). */
interface KeptVerdict {
  readonly digest: string;
  readonly verdict: ProbeVerdict;
  readonly until: number;
}

/** What this container knows about one connection. Never changed in place: see `applyEvent`. */
export interface Knowledge {
  /** Its copy of the token with what the store last said of it. */
  readonly kept?: Kept | undefined;
  /**
   * The tokens it has learned, oldest first, each with when it first learned it (monotonic):
   * the current one and a few before it (`KNOWN_PER_CONNECTION`). I4's ages.
   */
  readonly known: readonly { readonly digest: string; readonly since: number }[];
  /** The lease version it last saw, since when. */
  readonly lease?: SeenLease | undefined;
  /** Verdicts of the probe still reused (`probe-verdicts.ts`). */
  readonly verdicts: readonly KeptVerdict[];
  /** Last measured issuance duration (XFetch's δ), countdown excluded, ms. */
  readonly issuanceMs?: number | undefined;
  /** Last measured store read round trip (monotonic), ms. */
  readonly readMs?: number | undefined;
}

/** Everything that changes what a container knows about a connection. */
export type ConnectionEvent =
  /**
   * A token learned without keeping it (read from the store, but suspect or only looked at for
   * a report): known from `at` (monotonic) unless known already.
   */
  | { readonly type: 'token-learned'; readonly digest: string; readonly at: number }
  /**
   * A read or a write at `at` confirmed `entry` (read from the store with what it proved,
   * issued here, got back on releasing): kept in place of whatever was, its token learned.
   */
  | { readonly type: 'token-kept'; readonly entry: MemoryEntry; readonly at: Instant }
  /** Nothing is kept any more; with `digest`, only if the kept token is that one. */
  | { readonly type: 'token-dropped'; readonly digest?: string | undefined }
  /** A caller's report on the kept token, kept until it may replace it (only that token). */
  | { readonly type: 'token-reported'; readonly digest: string }
  /** A read found `lease`, answered at `at`: recorded if this version is new here. */
  | { readonly type: 'lease-seen'; readonly lease: Lease; readonly at: Instant }
  /**
   * A probe of the token of `digest`, sent so that its verdict is reused until `until`, said
   * `verdict` at `at` (monotonic): kept, unless it proved nothing (then whatever was said of
   * that token before goes too). Verdicts no longer reused at `at` go.
   */
  | {
      readonly type: 'probe-settled';
      readonly digest: string;
      readonly verdict: ProbeVerdict;
      readonly until: number;
      readonly at: number;
    }
  /** An issuance under the lease took `ms`, countdown excluded. */
  | { readonly type: 'issuance-measured'; readonly ms: number }
  /** A read of the store took `ms`, sent to answered. */
  | { readonly type: 'read-measured'; readonly ms: number };

/** Tokens whose first sight is kept per connection: the current one and a few before it. */
export const KNOWN_PER_CONNECTION = 4;

/** What a container knows of a connection it has heard nothing of. */
export const NOTHING_KNOWN: Knowledge = { known: [], verdicts: [] };

/** The knowledge after `event`: the one rule by which knowledge changes (pure). */
export const applyEvent = (knowledge: Knowledge, event: ConnectionEvent): Knowledge => {
  switch (event.type) {
    case 'token-learned':
      return learned(knowledge, event.digest, event.at);
    case 'token-kept': {
      const { entry, at } = event;
      const kept: Kept =
        entry.checkedAtMonotonic === undefined
          ? { entry, wallAt: at.wall, monotonicAt: at.monotonic }
          : { entry, wallAt: entry.checkedAt, monotonicAt: entry.checkedAtMonotonic };
      return { ...learned(knowledge, entry.record.tokenDigest, at.monotonic), kept };
    }
    case 'token-dropped':
      if (!knowledge.kept) return knowledge;
      if (event.digest !== undefined && event.digest !== digestOf(knowledge)) return knowledge;
      return { ...knowledge, kept: undefined };
    case 'token-reported': {
      const { kept } = knowledge;
      if (!kept || digestOf(knowledge) !== event.digest) return knowledge;
      return { ...knowledge, kept: { ...kept, entry: { ...kept.entry, reported: true } } };
    }
    case 'lease-seen': {
      const key = leaseKey(event.lease);
      if (knowledge.lease?.key === key) return knowledge;
      const { wall, monotonic } = event.at;
      return { ...knowledge, lease: { key, seenAt: wall, seenAtMonotonic: monotonic } };
    }
    case 'probe-settled': {
      const { digest, verdict, until, at } = event;
      const others = knowledge.verdicts.filter((v) => v.digest !== digest && v.until > at);
      // Only a verdict is reused: a probe that proved nothing leaves the next report free to ask.
      const verdicts =
        verdict.verdict === 'unknown' ? others : [...others, { digest, verdict, until }];
      return { ...knowledge, verdicts };
    }
    case 'issuance-measured':
      return { ...knowledge, issuanceMs: event.ms };
    case 'read-measured':
      return { ...knowledge, readMs: event.ms };
  }
};

/** `digest` known from `at` unless known already; the oldest sighting goes past the limit. */
const learned = (knowledge: Knowledge, digest: string, at: number): Knowledge => {
  if (knowledge.known.some((token) => token.digest === digest)) return knowledge;
  const known = [...knowledge.known, { digest, since: at }].slice(-KNOWN_PER_CONNECTION);
  return { ...knowledge, known };
};

const digestOf = (knowledge: Knowledge): string | undefined =>
  knowledge.kept?.entry.record.tokenDigest;

/**
 * What tells two writes of a lease apart: the version, and the holder and expiry too, which a
 * release that recorded no version changed on every write (its leases all read as one version).
 */
export const leaseKey = (lease: Lease): string =>
  `${lease.version}|${lease.holder}|${lease.expiresAt}`;

/** One connection's knowledge: `apply` is its only writer; the rest are pure reads. */
export class ConnectionState {
  #knowledge: Knowledge;

  constructor(knowledge: Knowledge = NOTHING_KNOWN) {
    this.#knowledge = knowledge;
  }

  /** The one writer: what this container knows after `event`. */
  apply(event: ConnectionEvent): void {
    this.#knowledge = applyEvent(this.#knowledge, event);
  }

  /** All of it, as it stands. */
  get knowledge(): Knowledge {
    return this.#knowledge;
  }

  /** The kept entry as of `now`, its times rebased on the monotonic clock (see above). */
  entry(now: Instant): MemoryEntry | undefined {
    const { kept } = this.#knowledge;
    return kept && rebased(kept, now);
  }

  /**
   * How long this container has known the token of `digest` at `monotonicNow` (ms): never
   * longer than the token's true age, whatever any wall clock says; 0 for a token not learned.
   */
  knownFor(digest: string, monotonicNow: number): number {
    const token = this.#knowledge.known.find((known) => known.digest === digest);
    return token === undefined ? 0 : monotonicNow - token.since;
  }

  /** When this container first saw `lease`'s version (wall), if it is the one it last saw. */
  leaseFirstSeen(lease: Lease): number | undefined {
    const seen = this.#knowledge.lease;
    return seen?.key === leaseKey(lease) ? seen.seenAt : undefined;
  }

  /** For how long (monotonic ms) it has seen `lease`'s version unchanged, if it last saw it. */
  leaseSeenFor(lease: Lease, monotonicNow: number): number | undefined {
    const seen = this.#knowledge.lease;
    return seen?.key === leaseKey(lease) ? monotonicNow - seen.seenAtMonotonic : undefined;
  }

  /** The probe's verdict on the token of `digest`, if still reused at `monotonicNow`. */
  verdict(digest: string, monotonicNow: number): ProbeVerdict | undefined {
    const kept = this.#knowledge.verdicts.find((v) => v.digest === digest);
    return kept && kept.until > monotonicNow ? kept.verdict : undefined;
  }

  /** The last measured issuance duration, if any. */
  get issuanceMs(): number | undefined {
    return this.#knowledge.issuanceMs;
  }

  /** The last measured store read round trip, if any. */
  get readMs(): number | undefined {
    return this.#knowledge.readMs;
  }
}

/**
 * The entry with its times moved earlier by what the wall clock lost since it was kept: the
 * token's too (both of them, so its lifetime, and the window and re-check drawn from it,
 * stay as they were).
 */
export const rebased = ({ entry, wallAt, monotonicAt }: Kept, now: Instant): MemoryEntry => {
  const lag = now.monotonic - monotonicAt - (now.wall - wallAt);
  // Below a millisecond: the two clocks' own jitter, not a step.
  if (lag < 1) return entry;
  const { record } = entry;
  return {
    ...entry,
    record: { ...record, issuedAt: record.issuedAt - lag, expiresAt: record.expiresAt - lag },
    checkedAt: entry.checkedAt - lag,
    until: entry.until - lag,
  };
};
