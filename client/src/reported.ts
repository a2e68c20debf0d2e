/**
 * The tokens a client reported as rejected, remembered per connection by digest (never the token
 * itself), until the token itself expires: never handed out again meanwhile. Kept on the monotonic
 * clock, so that a wall clock stepped forward forgets none (RT5-C1b), and bounded per connection,
 * so that reports about one connection never push out another's (RT5-C1).
 */

/** A token the client reported. */
export interface Reported {
  /** When to forget it (monotonic, ms): when it expires. Infinity until an answer says. */
  forgetAt: number;
  /** Until when (monotonic, ms) the broker said it keeps serving it (`deferredSeconds`). */
  deferredUntil: number;
  /** Reports of it still out: a failed one forgets it only when no other is out or landed. */
  pending: number;
  /** A report of it reached the broker. */
  landed: boolean;
}

/** How many reported tokens a client remembers per connection; the oldest is forgotten first. */
export const MAX_REPORTED_PER_CONNECTION = 64;

export class ReportedTokens {
  readonly #byConnection = new Map<string, Map<string, Reported>>();

  constructor(private readonly monotonic: () => number) {}

  /** The entry of `digest`, unless it has expired (then forgotten). */
  get(connection: string, digest: string): Reported | undefined {
    const entries = this.#byConnection.get(connection);
    const entry = entries?.get(digest);
    if (!entry) return undefined;
    if (this.monotonic() < entry.forgetAt) return entry;
    entries?.delete(digest);
    return undefined;
  }

  /**
   * Learns that the token expires in `leftMs` (a wall-clock difference, taken the first time
   * it is known: from then on counted on the monotonic clock, so a later step of the wall clock
   * moves nothing). A token the broker served cannot have expired: a `leftMs` of 0 or less says
   * this wall clock is ahead, and teaches nothing.
   */
  expiresIn(entry: Reported, leftMs: number): void {
    if (entry.forgetAt !== Number.POSITIVE_INFINITY || !(leftMs > 0)) return;
    entry.forgetAt = this.monotonic() + leftMs;
  }

  /** Remembers `entry` for `digest` as the connection's newest, dropping expired and surplus ones. */
  set(connection: string, digest: string, entry: Reported): void {
    const at = this.monotonic();
    const entries = this.#byConnection.get(connection) ?? new Map<string, Reported>();
    for (const [key, kept] of entries) if (at >= kept.forgetAt) entries.delete(key);
    entries.delete(digest);
    entries.set(digest, entry);
    if (entries.size > MAX_REPORTED_PER_CONNECTION) {
      entries.delete(entries.keys().next().value as string);
    }
    this.#byConnection.set(connection, entries);
  }

  /** Forgets `digest`, if it is still `entry` (when given). */
  delete(connection: string, digest: string, entry?: Reported): void {
    const entries = this.#byConnection.get(connection);
    if (entry === undefined || entries?.get(digest) === entry) entries?.delete(digest);
  }
}
