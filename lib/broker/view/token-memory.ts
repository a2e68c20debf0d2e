/**
 * This container's copy of each connection's token, with what the shared store last said of
 * it, and since when this container has known each token. Whether an entry may be served is
 * the refresh policy's call; this only keeps it.
 *
 * An entry's times (`checkedAt`, `until`: the proof of invariant I2; and the token's own
 * `issuedAt` and `expiresAt`) are wall-clock instants, compared by the policy with the wall
 * clock. So that a wall clock stepped back cannot stretch them, every entry is handed out
 * rebased: when more time has passed on the monotonic clock since it was kept than on the wall
 * clock, all its times move earlier by the difference, so that each one is as far from the wall
 * clock's "now" as the monotonic clock says. The expiry the upstream stated is thus compared
 * with the wall clock once, when it is read, and judged on the monotonic clock from then on. A
 * wall clock stepped forward already ends them early; a freeze the monotonic clock did not
 * count, the wall clock did.
 */
import { type Clock, systemClock } from '../../clock.js';
import type { Lease, TokenRecord } from '../../ports.js';

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
  /** Until when that read proves the token safe to serve (the policy's `servableUntil`). */
  readonly until: number;
  /** The lease that read found on the token: its replacement is under way, cut-over announced. */
  readonly lease?: Lease | undefined;
  /** A caller reported the token as rejected too early to replace it: replaced once it may be. */
  readonly reported?: boolean | undefined;
}

/** Tokens whose first sight is kept per connection: the current one and a few before it. */
const SEEN_PER_CONNECTION = 4;

export class TokenMemory {
  // Maps, not objects: connection names come from callers.
  readonly #entries = new Map<string, Kept>();
  /** Per connection, token digest → when this container first saw it (monotonic ms). */
  readonly #seen = new Map<string, Map<string, number>>();

  /** @param clock this container's wall and monotonic clocks */
  constructor(private readonly clock: Pick<Clock, 'now' | 'monotonic'> = systemClock) {}

  get(connection: string): MemoryEntry | undefined {
    const kept = this.#entries.get(connection);
    return kept && this.#rebased(kept);
  }

  set(entry: MemoryEntry): void {
    this.#entries.set(entry.record.connection, {
      entry,
      ...(entry.checkedAtMonotonic === undefined
        ? { wallAt: this.clock.now(), monotonicAt: this.clock.monotonic() }
        : { wallAt: entry.checkedAt, monotonicAt: entry.checkedAtMonotonic }),
    });
    this.knownFor(entry.record.connection, entry.record.tokenDigest);
  }

  delete(connection: string): void {
    this.#entries.delete(connection);
  }

  /** Drops the entry of `record`'s connection only if it still holds that token. */
  forget(record: TokenRecord): void {
    if (this.#entries.get(record.connection)?.entry.record.tokenDigest === record.tokenDigest) {
      this.#entries.delete(record.connection);
    }
  }

  /** Marks the entry of `connection` as reported, if it holds the token of `digest`. */
  report(connection: string, digest: string): void {
    const kept = this.#entries.get(connection);
    if (kept?.entry.record.tokenDigest === digest) {
      this.#entries.set(connection, { ...kept, entry: { ...kept.entry, reported: true } });
    }
  }

  /**
   * How long this container has known the token of `digest` (ms, on its monotonic clock),
   * counting from now if it never saw it: never longer than the token's true age, whatever any
   * wall clock says.
   */
  knownFor(connection: string, digest: string): number {
    const now = this.clock.monotonic();
    let tokens = this.#seen.get(connection);
    if (!tokens) {
      tokens = new Map();
      this.#seen.set(connection, tokens);
    }
    const seen = tokens.get(digest);
    if (seen !== undefined) return now - seen;
    tokens.set(digest, now);
    // Insertion order: the oldest sighting goes first.
    if (tokens.size > SEEN_PER_CONNECTION) tokens.delete(tokens.keys().next().value as string);
    return 0;
  }

  /** The last token this container held, if still valid at `now`, with when it was confirmed. */
  lastGood(connection: string, now: number): MemoryEntry | undefined {
    const entry = this.get(connection);
    return entry && entry.record.expiresAt > now ? entry : undefined;
  }

  /**
   * The entry with its times moved earlier by what the wall clock lost since it was kept: the
   * token's too (both of them, so its lifetime, and the window and re-check drawn from it,
   * stay as they were).
   */
  #rebased({ entry, wallAt, monotonicAt }: Kept): MemoryEntry {
    const lag = this.clock.monotonic() - monotonicAt - (this.clock.now() - wallAt);
    // Below a millisecond: the two clocks' own jitter, not a step.
    if (lag < 1) return entry;
    const { record } = entry;
    return {
      ...entry,
      record: { ...record, issuedAt: record.issuedAt - lag, expiresAt: record.expiresAt - lag },
      checkedAt: entry.checkedAt - lag,
      until: entry.until - lag,
    };
  }
}

/** An entry with both clocks' readings when it was kept. */
interface Kept {
  readonly entry: MemoryEntry;
  readonly wallAt: number;
  readonly monotonicAt: number;
}
