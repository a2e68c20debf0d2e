/**
 * This container's copy of each connection's token, with the time the shared store last
 * confirmed it. Whether an entry may be served is the refresh policy's call; this only keeps it.
 */
import type { TokenRecord } from '../ports.js';

export interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the shared store last confirmed this token (local epoch ms). */
  readonly checkedAt: number;
}

export class TokenMemory {
  // A Map, not an object: connection names come from callers.
  readonly #entries = new Map<string, MemoryEntry>();

  get(connection: string): MemoryEntry | undefined {
    return this.#entries.get(connection);
  }

  /** Keeps `record` as confirmed at `checkedAt`. */
  set(record: TokenRecord, checkedAt: number): void {
    this.#entries.set(record.connection, { record, checkedAt });
  }

  delete(connection: string): void {
    this.#entries.delete(connection);
  }

  /** The last token this container held, if still valid at `now`, with when it was confirmed. */
  lastGood(connection: string, now: number): MemoryEntry | undefined {
    const entry = this.#entries.get(connection);
    return entry && entry.record.expiresAt > now ? entry : undefined;
  }
}
