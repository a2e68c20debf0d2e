/**
 * Time and chance as a port: the one source of "now", of waiting and of random draws for the
 * whole of `lib/` (the core, the upstream client and the adapters), so that tests drive leases,
 * heartbeats, drains and deadlines on a fake clock and fault tests can skew it. Nothing in
 * `lib/` but this file reads `Date.now`, `new Date()` or `performance.now`
 * (`test/architecture/one-clock.test.ts` checks it).
 *
 * Two clocks, two uses:
 * - the wall clock (`now`) only for epochs that others see: a token's expiry as the upstream
 *   states it, the signing timestamp, an HTTP date, and the times that are stored (issuedAt,
 *   expiresAt, invalidatedAt, a lease's expiresAt, the item's ttl);
 * - the monotonic clock (`monotonic`) for every duration and deadline measured on this
 *   container: a caller's {@link Deadline}, a cache's age, how long a lease version has stood.
 */
export interface Clock {
  /** Epoch milliseconds: for token expiry, signing and stored stamps only, never a duration. */
  now(): number;
  /**
   * Milliseconds on a clock that never steps (`performance.now()`): for durations measured on
   * one container, such as how long it has known a token. Its origin means nothing.
   */
  monotonic(): number;
  /** Resolves after `ms` milliseconds. */
  sleep(ms: number): Promise<void>;
  /** Uniform in [0, 1): drives XFetch and backoff jitter. */
  random(): number;
  /** Calls `tick` every `ms` milliseconds until the returned function is called. */
  every(ms: number, tick: () => void): () => void;
  /** Calls `fire` once after `ms` milliseconds unless the returned function is called first. */
  after(ms: number, fire: () => void): () => void;
}

/**
 * The real clock. The globals are looked up on every call, not captured at load, so that a
 * test's fake timers (which replace them) apply to this clock too.
 */
export const systemClock: Clock = Object.freeze({
  now: () => Date.now(),
  monotonic: () => performance.now(),
  sleep: (ms: number) => new Promise<void>((resolve) => setTimeout(resolve, ms)),
  random: () => Math.random(),
  every: (ms: number, tick: () => void) => {
    const timer = setInterval(tick, ms);
    return () => clearInterval(timer);
  },
  after: (ms: number, fire: () => void) => {
    const timer = setTimeout(fire, ms);
    return () => clearTimeout(timer);
  },
});

/**
 * A caller's deadline on this container's monotonic clock (I3): made where a request comes in,
 * from the time it has left ({@link Deadline.in}; a handler asks the facade,
 * `TokenBroker.deadlineIn`, so that it is on the broker's own clock), and from then on judged by
 * durations only, so that a wall clock stepped while the caller waits neither cuts its time
 * short nor stretches it. It never reads the wall clock, and is never turned into an epoch
 * (`test/architecture/one-clock.test.ts`): every port and signature that takes a deadline
 * takes this.
 */
export class Deadline {
  private constructor(
    private readonly clock: Pick<Clock, 'monotonic'>,
    /** The instant on the monotonic clock. */
    readonly at: number,
  ) {}

  /** A deadline `ms` from now on `clock`'s monotonic clock. */
  static in(clock: Pick<Clock, 'monotonic'>, ms: number): Deadline {
    return new Deadline(clock, clock.monotonic() + ms);
  }

  /** Milliseconds left (negative once passed). */
  leftMs(): number {
    return this.at - this.clock.monotonic();
  }

  passed(): boolean {
    return this.leftMs() <= 0;
  }

  /** This deadline less `ms`. */
  minus(ms: number): Deadline {
    return new Deadline(this.clock, this.at - ms);
  }

  /** The earlier of this deadline and `other` (this one when `other` is undefined). */
  min(other: Deadline | undefined): Deadline {
    return other !== undefined && other.at < this.at ? other : this;
  }

  /**
   * Whole milliseconds left, rounded down and never negative (for timer APIs such as
   * `AbortSignal.timeout`, which take integers only).
   */
  wholeMsLeft(): number {
    return Math.max(0, Math.floor(this.leftMs()));
  }
}
