/**
 * What this container knows about each connection: one `ConnectionState` each. Commands turn
 * what happened into events stamped with this container's clocks; the rest are queries.
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { Lease, ProbeVerdict, TokenRecord, TokenState } from '../../ports.js';
import { type ProtocolTiming, proofMs, type RefreshSettings } from '../timing/index.js';
import {
  type ConnectionEvent,
  ConnectionState,
  type Instant,
  type MemoryEntry,
} from './connection-state.js';
import {
  type Asked,
  type Servable,
  type ServingRequest,
  servable,
  suspectToken,
} from './serving.js';

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

export class ConnectionView {
  // A Map, not an object: connection names come from callers.
  readonly #states = new Map<string, ConnectionState>();

  constructor(
    private readonly clock: Pick<Clock, 'now' | 'monotonic'>,
    private readonly settings: RefreshSettings,
  ) {}

  /** The one way in: `event` applied to `name`'s state (made on its first event). */
  apply(name: string, event: ConnectionEvent): void {
    let state = this.#states.get(name);
    if (!state) {
      state = new ConnectionState();
      this.#states.set(name, state);
    }
    state.apply(event);
  }

  /** What this container knows of `name`, if it has heard of it (read only). */
  state(name: string): ConnectionState | undefined {
    return this.#states.get(name);
  }

  /**
   * Keeps what a read (sent at `read`, answered at `now`) says: a valid token with its proof,
   * and the lease on it. A token whose replacement's request may be out is suspect: not kept.
   */
  observe(connection: ConnectionConfig, state: TokenState, read: ReadSent, now: number): Seen {
    const { name } = connection;
    const { token, lease } = state;
    const staleInMs = lease === undefined ? undefined : this.#staleInMs(name, lease, now);
    const leaseStale = staleInMs !== undefined && staleInMs <= 0;
    const valid = token && token.expiresAt > now ? token : undefined;
    // Where the upstream does not revoke on re-issue, a replacement harms nobody.
    const announced = connection.revokesOnReissue ? lease : undefined;
    const suspect = !!valid && !!suspectToken(state, connection.revokesOnReissue, now, this.timing);
    if (!valid || suspect) {
      this.apply(name, { type: 'token-dropped' });
      // Not kept, but learned: its age (I4) counts from this first sight.
      if (valid) this.learned(valid);
      return { valid, suspect, proofMs: 0, leaseStale, staleInMs };
    }
    const proof = proofMs(valid, announced, this.settings);
    this.#keep({
      record: valid,
      checkedAt: read.sentAt,
      checkedAtMonotonic: read.sentAtMonotonic,
      until: read.sentAt + proof,
      lease: announced,
      ...(state.reported ? { reported: true } : {}),
    });
    return { valid, suspect, proofMs: proof, leaseStale, staleInMs };
  }

  /** Keeps a token confirmed with no lease on it (`untilAtMost`: one whose write failed). */
  confirmed(record: TokenRecord, at: ReadSent, untilAtMost = Number.POSITIVE_INFINITY): void {
    this.#keep({
      record,
      checkedAt: at.sentAt,
      checkedAtMonotonic: at.sentAtMonotonic,
      until: Math.min(at.sentAt + proofMs(record, undefined, this.settings), untilAtMost),
      ...(untilAtMost < Number.POSITIVE_INFINITY ? { unstored: true } : {}),
    });
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

  /** A duration measured for `name`: an issuance under the lease, or a read of the store. */
  measured(name: string, what: 'issuance' | 'read', ms: number): void {
    this.apply(name, { type: what === 'issuance' ? 'issuance-measured' : 'read-measured', ms });
  }

  /** A2. Whether memory still proves `record` at `now`: a stall may have outlasted the proof. */
  stillProves(record: TokenRecord, now: number): boolean {
    const entry = this.entry(record.connection);
    return entry?.record.tokenDigest === record.tokenDigest && now < entry.until;
  }

  /** The entry of `name`, times rebased on the monotonic clock (see `connection-state.ts`). */
  entry(name: string): MemoryEntry | undefined {
    return this.#states.get(name)?.entry(this.#now());
  }

  /** When this container first saw `lease`'s version (wall), if it is the one it last saw. */
  leaseFirstSeen(name: string, lease: Lease): number | undefined {
    return this.#states.get(name)?.leaseFirstSeen(lease);
  }

  /** How long this container has known the token of `digest` (ms, monotonic), 0 if never. I4. */
  knownFor(name: string, digest: string): number {
    return this.#states.get(name)?.knownFor(digest, this.clock.monotonic()) ?? 0;
  }

  /** The probe's verdict on the token of `digest`, if still reused (`probe-verdicts.ts`). */
  verdict(name: string, digest: string): ProbeVerdict | undefined {
    return this.#states.get(name)?.verdict(digest, this.clock.monotonic());
  }

  /** The last measured issuance duration of `name` (a default before the first). */
  issuanceMs(name: string): number {
    return this.#states.get(name)?.issuanceMs ?? this.timing.defaultIssuanceMs;
  }

  readMs(name: string): number | undefined {
    return this.#states.get(name)?.readMs;
  }

  /** I2. The serving rule on memory's entry for `name`; with `digest`, only if it holds it. */
  servable(name: string, request: ServingRequest, asked?: Asked, digest?: string): Servable {
    const entry = this.entry(name);
    const held = digest === undefined || entry?.record.tokenDigest === digest ? entry : undefined;
    return servable(held, request, this.clock.now(), this.settings, asked);
  }

  /** Keeps `entry` as its connection's token (and learns the token), as of now. */
  #keep(entry: MemoryEntry): void {
    this.apply(entry.record.connection, { type: 'token-kept', entry, at: this.#now() });
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
    const seenFor = this.#states.get(name)?.leaseSeenFor(lease, this.clock.monotonic());
    if (seenFor !== undefined) return Math.min(lease.durationMs - seenFor, byExpiry);
    this.apply(name, {
      type: 'lease-seen',
      lease,
      at: { wall: now, monotonic: this.clock.monotonic() },
    });
    // A duration of 0 is stale at the second sight, not at the first.
    return Math.max(1, Math.min(lease.durationMs, byExpiry));
  }

  #now(): Instant {
    return { wall: this.clock.now(), monotonic: this.clock.monotonic() };
  }
}
