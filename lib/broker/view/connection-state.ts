/**
 * What this container knows about one connection (`Knowledge`) and the one function that changes
 * it (`applyEvent`). Entries are handed out rebased on the monotonic clock, so a wall clock
 * stepped back cannot stretch the proof of I2. Promises in flight are not knowledge: not here.
 */
import type { Lease, ProbeVerdict, TokenRecord } from '../../ports.js';

export interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the read that last confirmed this token was sent (local epoch ms). */
  readonly checkedAt: number;
  /** The monotonic clock at that instant, from which the entry is rebased. */
  readonly checkedAtMonotonic?: number | undefined;
  /** Until when that read proves the token safe to serve (`proofMs` from its send). */
  readonly until: number;
  /** The lease that read found on the token: its replacement is under way, cut-over announced. */
  readonly lease?: Lease | undefined;
  /** A caller reported the token as rejected too early to replace it: replaced once it may be. */
  readonly reported?: boolean | undefined;
  /** Held in memory only (its write failed): replaced once the lease runs out; no stale use. */
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
  /** The tokens learned, oldest first, each with when first learned (monotonic). I4's ages. */
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
  /** A token learned without keeping it: known from `at` (monotonic) unless known already. */
  | { readonly type: 'token-learned'; readonly digest: string; readonly at: number }
  /** A read or write at `at` confirmed `entry`: kept in place of whatever was, token learned. */
  | { readonly type: 'token-kept'; readonly entry: MemoryEntry; readonly at: Instant }
  /** Nothing is kept any more; with `digest`, only if the kept token is that one. */
  | { readonly type: 'token-dropped'; readonly digest?: string | undefined }
  /** A caller's report on the kept token, kept until it may replace it (only that token). */
  | { readonly type: 'token-reported'; readonly digest: string }
  /** A read found `lease`, answered at `at`: recorded if this version is new here. */
  | { readonly type: 'lease-seen'; readonly lease: Lease; readonly at: Instant }
  /** A probe's verdict, reused until `until`; an `unknown` one drops the earlier verdict. */
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

/** What tells two lease writes apart: version, holder and expiry (old releases kept no version). */
export const leaseKey = (lease: Lease): string =>
  `${lease.version}|${lease.holder}|${lease.expiresAt}`;

/** One connection's knowledge: `apply` is its only writer; the rest are pure reads. */
export class ConnectionState {
  #knowledge: Knowledge;

  constructor(knowledge: Knowledge = NOTHING_KNOWN) {
    this.#knowledge = knowledge;
  }

  apply(event: ConnectionEvent): void {
    this.#knowledge = applyEvent(this.#knowledge, event);
  }

  get knowledge(): Knowledge {
    return this.#knowledge;
  }

  /** The kept entry as of `now`, its times rebased on the monotonic clock (see above). */
  entry(now: Instant): MemoryEntry | undefined {
    const { kept } = this.#knowledge;
    return kept && rebased(kept, now);
  }

  /** How long this container has known the token of `digest` (monotonic ms; 0 if not learned). */
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

  get issuanceMs(): number | undefined {
    return this.#knowledge.issuanceMs;
  }

  get readMs(): number | undefined {
    return this.#knowledge.readMs;
  }
}

/** The entry with all its times (the token's too) moved earlier by what the wall clock lost. */
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
