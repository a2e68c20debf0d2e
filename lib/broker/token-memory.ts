/**
 * This container's copy of each connection's token, with what the shared store last said of
 * it. Whether an entry may be served is the refresh policy's call; this only keeps it.
 */
import type { Lease, TokenRecord } from '../ports.js';

export interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the read that last confirmed this token was sent (local epoch ms). */
  readonly checkedAt: number;
  /** Until when that read proves the token safe to serve (the policy's `servableUntil`). */
  readonly until: number;
  /** The lease that read found on the token: its replacement is under way, cut-over announced. */
  readonly lease?: Lease | undefined;
}

export class TokenMemory {
  // A Map, not an object: connection names come from callers.
  readonly #entries = new Map<string, MemoryEntry>();

  get(connection: string): MemoryEntry | undefined {
    return this.#entries.get(connection);
  }

  set(entry: MemoryEntry): void {
    this.#entries.set(entry.record.connection, entry);
  }

  delete(connection: string): void {
    this.#entries.delete(connection);
  }

  /** Drops the entry of `record`'s connection only if it still holds that token. */
  forget(record: TokenRecord): void {
    if (this.#entries.get(record.connection)?.record.tokenDigest === record.tokenDigest) {
      this.#entries.delete(record.connection);
    }
  }

  /** The last token this container held, if still valid at `now`, with when it was confirmed. */
  lastGood(connection: string, now: number): MemoryEntry | undefined {
    const entry = this.#entries.get(connection);
    return entry && entry.record.expiresAt > now ? entry : undefined;
  }
}
