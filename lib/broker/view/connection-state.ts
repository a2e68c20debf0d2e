/**
 * What this container knows about each connection: one `Knowledge` value each, changed only by
 * `applyEvent`, from events stamped with this container's clocks. Promises in flight are not
 * knowledge: not here. Entries are handed out rebased on the monotonic clock (`rebased`).
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { Lease, ProbeVerdict, TokenRecord, TokenState } from '../../ports.js';
import { type ProtocolTiming, proofMs, type RefreshSettings } from '../timing/index.js';
import {
  type Asked,
  type MemoryEntry,
  type Servable,
  type ServingRequest,
  servable,
  suspectToken,
} from './serving.js';

/** One instant on both of this container's clocks. */
export interface Instant {
  readonly wall: number;
  readonly monotonic: number;
}

/** A probe's verdict on a token, reused until `until` (monotonic: sent + the interval). */
type Verdict = { readonly digest: string; readonly verdict: ProbeVerdict; readonly until: number };

/** What this container knows about one connection. Never changed in place: see `applyEvent`. */
export interface Knowledge {
  /** Its copy of the token with what the store last said of it, as of `asOf` (rebased from). */
  readonly kept?: { readonly entry: MemoryEntry; readonly asOf: Instant } | undefined;
  /** The tokens learned, oldest first, each with when first learned (monotonic). I4's ages. */
  readonly known: readonly { readonly digest: string; readonly since: number }[];
  /** The lease version (`leaseKey`) it last saw, since when on both clocks (I1: judged on ours). */
  readonly lease?: { readonly key: string; readonly since: Instant } | undefined;
  /** Probe verdicts still reused. */
  readonly verdicts: readonly Verdict[];
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
  /** A probe's verdict, settled at `at`; an `unknown` one drops the earlier verdict. */
  | ({ readonly type: 'probe-settled'; readonly at: number } & Verdict)
  /** An issuance under the lease (countdown excluded) or a store read took `ms`. */
  | { readonly type: 'measured'; readonly what: 'issuance' | 'read'; readonly ms: number };

/** Tokens whose first sight is kept per connection: the current one and a few before it. */
export const KNOWN_PER_CONNECTION = 4;

export const NOTHING_KNOWN: Knowledge = { known: [], verdicts: [] };

/** The knowledge after `event`: the one rule by which knowledge changes (pure). */
export const applyEvent = (knowledge: Knowledge, event: ConnectionEvent): Knowledge => {
  switch (event.type) {
    case 'token-learned':
      return learned(knowledge, event.digest, event.at);
    case 'token-kept': {
      const { entry, at } = event;
      const { checkedAt: wall, checkedAtMonotonic: monotonic } = entry;
      const kept = { entry, asOf: monotonic === undefined ? at : { wall, monotonic } };
      return { ...learned(knowledge, entry.record.tokenDigest, at.monotonic), kept };
    }
    case 'token-dropped': {
      const held = knowledge.kept?.entry.record.tokenDigest;
      if (held === undefined || (event.digest ?? held) !== held) return knowledge;
      return { ...knowledge, kept: undefined };
    }
    case 'token-reported': {
      const { kept } = knowledge;
      if (!kept || kept.entry.record.tokenDigest !== event.digest) return knowledge;
      return { ...knowledge, kept: { ...kept, entry: { ...kept.entry, reported: true } } };
    }
    case 'lease-seen': {
      const key = leaseKey(event.lease);
      if (knowledge.lease?.key === key) return knowledge;
      return { ...knowledge, lease: { key, since: event.at } };
    }
    case 'probe-settled': {
      const { digest, verdict, until, at } = event;
      const others = knowledge.verdicts.filter((v) => v.digest !== digest && v.until > at);
      // Only a verdict is reused: a probe that proved nothing leaves the next report free to ask.
      const verdicts =
        verdict.verdict === 'unknown' ? others : [...others, { digest, verdict, until }];
      return { ...knowledge, verdicts };
    }
    case 'measured':
      return { ...knowledge, [event.what === 'issuance' ? 'issuanceMs' : 'readMs']: event.ms };
  }
};

/** `digest` known from `at` unless known already; the oldest sighting goes past the limit. */
const learned = (knowledge: Knowledge, digest: string, at: number): Knowledge => {
  if (knowledge.known.some((token) => token.digest === digest)) return knowledge;
  const known = [...knowledge.known, { digest, since: at }].slice(-KNOWN_PER_CONNECTION);
  return { ...knowledge, known };
};

/** What tells two lease writes apart: version, holder and expiry (old releases kept no version). */
const leaseKey = (lease: Lease): string => `${lease.version}|${lease.holder}|${lease.expiresAt}`;

/**
 * The entry with all its times (the token's too) moved earlier by what the wall clock lost, so
 * a wall clock stepped back cannot stretch the proof of I2.
 */
const rebased = (entry: MemoryEntry, asOf: Instant, now: Instant): MemoryEntry => {
  const lag = now.monotonic - asOf.monotonic - (now.wall - asOf.wall);
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

/** When a read of the store was sent, on both clocks (what it proves counts from there). */
export interface ReadSent {
  readonly sentAt: number;
  readonly sentAtMonotonic: number;
}

/** What a read says of a connection's token, as this container judges it. */
export interface Seen {
  readonly valid: TokenRecord | undefined;
  /** Its replacement's request may be out (a countdown ended): neither served nor kept. I2. */
  readonly suspect: boolean;
  /** How long after the read was sent it proves `valid` safe to serve (ms). I2. */
  readonly proofMs: number;
  /** The lease on it has not changed for its duration, as watched here. I1. */
  readonly leaseStale: boolean;
  /** In how long (ms, monotonic) the lease would be stale here if unchanged (liveness only). */
  readonly staleInMs?: number | undefined;
}

/** Every connection's `Knowledge`: commands turn what happened into events; the rest read. */
export class ConnectionView {
  // A Map, not an object: connection names come from callers.
  readonly #known = new Map<string, Knowledge>();

  constructor(
    private readonly clock: Pick<Clock, 'now' | 'monotonic'>,
    private readonly settings: RefreshSettings,
  ) {}

  /** The only writer: `event` applied to `name`'s knowledge (nothing known before its first). */
  apply(name: string, event: ConnectionEvent): void {
    this.#known.set(name, applyEvent(this.#known.get(name) ?? NOTHING_KNOWN, event));
  }

  knowledge(name: string): Knowledge | undefined {
    return this.#known.get(name);
  }

  /**
   * Keeps what a read (sent at `read`, answered at `now`) says: a valid token with its proof,
   * and the lease on it. A token whose replacement's request may be out is suspect: not kept.
   */
  observe(connection: ConnectionConfig, state: TokenState, read: ReadSent, now: number): Seen {
    const { name, revokesOnReissue } = connection;
    const { token, lease } = state;
    const staleInMs = lease === undefined ? undefined : this.#staleInMs(name, lease, now);
    const leaseStale = staleInMs !== undefined && staleInMs <= 0;
    const valid = token && token.expiresAt > now ? token : undefined;
    // Where the upstream does not revoke on re-issue, a replacement harms nobody.
    const announced = revokesOnReissue ? lease : undefined;
    const suspect = !!valid && !!suspectToken(state, revokesOnReissue, now, this.timing);
    if (!valid || suspect) {
      this.apply(name, { type: 'token-dropped' });
      // Not kept, but learned: its age (I4) counts from this first sight.
      if (valid) this.learned(valid);
      return { valid, suspect, proofMs: 0, leaseStale, staleInMs };
    }
    const proof = proofMs(valid, announced, this.settings);
    const reported = state.reported ? { reported: true } : {};
    this.#keep(valid, read, read.sentAt + proof, { lease: announced, ...reported });
    return { valid, suspect, proofMs: proof, leaseStale, staleInMs };
  }

  /** Keeps a token confirmed with no lease on it (`untilAtMost`: one whose write failed). */
  confirmed(record: TokenRecord, at: ReadSent, untilAtMost = Number.POSITIVE_INFINITY): void {
    const until = Math.min(at.sentAt + proofMs(record, undefined, this.settings), untilAtMost);
    this.#keep(record, at, until, untilAtMost < Number.POSITIVE_INFINITY ? { unstored: true } : {});
  }

  get timing(): ProtocolTiming {
    return this.settings.timing;
  }

  drop(name: string): void {
    this.apply(name, { type: 'token-dropped' });
  }

  /** Drops the entry of `record`'s connection only if it still holds that token. */
  forget(record: Pick<TokenRecord, 'connection' | 'tokenDigest'>): void {
    this.apply(record.connection, { type: 'token-dropped', digest: record.tokenDigest });
  }

  /** Marks the entry of `name` as reported, if it holds the token of `digest`. */
  report(name: string, digest: string): void {
    this.apply(name, { type: 'token-reported', digest });
  }

  /** `record` read from the store: its age (I4) counts from now if unknown. */
  learned(record: TokenRecord): void {
    const at = this.clock.monotonic();
    this.apply(record.connection, { type: 'token-learned', digest: record.tokenDigest, at });
  }

  measured(name: string, what: 'issuance' | 'read', ms: number): void {
    this.apply(name, { type: 'measured', what, ms });
  }

  /** A2. Whether memory still proves `record` at `now`: a stall may have outlasted the proof. */
  stillProves(record: TokenRecord, now: number): boolean {
    const entry = this.entry(record.connection);
    return entry?.record.tokenDigest === record.tokenDigest && now < entry.until;
  }

  /** The kept entry of `name`, rebased on the monotonic clock. */
  entry(name: string): MemoryEntry | undefined {
    const kept = this.#known.get(name)?.kept;
    return kept && rebased(kept.entry, kept.asOf, this.#now());
  }

  /** When this container first saw `lease`'s version (wall), if it is the one it last saw. */
  leaseFirstSeen(name: string, lease: Lease): number | undefined {
    const seen = this.#known.get(name)?.lease;
    return seen?.key === leaseKey(lease) ? seen.since.wall : undefined;
  }

  /** I4: how long this container has known the token of `digest` (0 if not learned). */
  knownFor(name: string, digest: string): number {
    const token = this.#known.get(name)?.known.find((known) => known.digest === digest);
    return token === undefined ? 0 : this.clock.monotonic() - token.since;
  }

  /** The probe's verdict on the token of `digest`, if still reused now. */
  verdict(name: string, digest: string): ProbeVerdict | undefined {
    const kept = this.#known.get(name)?.verdicts.find((v) => v.digest === digest);
    return kept && kept.until > this.clock.monotonic() ? kept.verdict : undefined;
  }

  /** The last measured issuance duration of `name` (a default before the first). */
  issuanceMs(name: string): number {
    return this.#known.get(name)?.issuanceMs ?? this.timing.defaultIssuanceMs;
  }

  readMs(name: string): number | undefined {
    return this.#known.get(name)?.readMs;
  }

  /** I2. The serving rule on memory's entry for `name`; with `digest`, only if it holds it. */
  servable(name: string, request: ServingRequest, asked?: Asked, digest?: string): Servable {
    const entry = this.entry(name);
    const held = digest === undefined || entry?.record.tokenDigest === digest ? entry : undefined;
    return servable(held, request, this.clock.now(), this.settings, asked);
  }

  /** Keeps `record` as its connection's token (and learns it), proved by `read` until `until`. */
  #keep(record: TokenRecord, read: ReadSent, until: number, more: Partial<MemoryEntry>): void {
    const { sentAt: checkedAt, sentAtMonotonic: checkedAtMonotonic } = read;
    const entry = { record, checkedAt, checkedAtMonotonic, until, ...more };
    this.apply(record.connection, { type: 'token-kept', entry, at: this.#now() });
  }

  /**
   * I1. In how long `lease`, just read, is stale here (<= 0: stale), judged on this container's
   * monotonic clock: its version unchanged for its recorded duration, or its expiry past any
   * plausible skew. A version new here is recorded and not stale.
   */
  #staleInMs(name: string, lease: Lease, now: number): number {
    const pastSkew = lease.expiresAt + this.timing.skewToleranceMs - now;
    if (pastSkew < 0) return 0;
    // A millisecond past `pastSkew`, so a waiter reads again then (never 0).
    const byExpiry = pastSkew + 1;
    const seen = this.#known.get(name)?.lease;
    const monotonic = this.clock.monotonic();
    const seenFor = seen?.key === leaseKey(lease) ? monotonic - seen.since.monotonic : undefined;
    if (seenFor !== undefined) return Math.min(lease.durationMs - seenFor, byExpiry);
    this.apply(name, { type: 'lease-seen', lease, at: { wall: now, monotonic } });
    // A duration of 0 is stale at the second sight, not at the first.
    return Math.max(1, Math.min(lease.durationMs, byExpiry));
  }

  #now(): Instant {
    return { wall: this.clock.now(), monotonic: this.clock.monotonic() };
  }
}
