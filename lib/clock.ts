/**
 * Time and chance as a port: the one source of "now", of waiting and of random draws for the
 * whole core, so that tests drive leases, heartbeats, drains and deadlines on a fake clock and
 * fault tests can skew it. Nothing in `lib/broker/` reads `Date.now`, `Math.random` or the
 * global timers directly.
 */
export interface Clock {
  /** Epoch milliseconds: for token expiry and stored stamps only. */
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
 * A caller's deadline on this container's monotonic clock (I3): read from the wall clock once,
 * where a request comes in, and from then on judged by durations only, so that a wall clock
 * stepped while the caller waits neither cuts its time short nor stretches it.
 */
export class Deadline {
  private constructor(
    private readonly clock: Pick<Clock, 'now' | 'monotonic'>,
    /** The instant on the monotonic clock. */
    readonly at: number,
  ) {}

  /** The deadline `epochMs` (a wall-clock instant, read now), on the monotonic clock. */
  static fromEpoch(clock: Pick<Clock, 'now' | 'monotonic'>, epochMs: number): Deadline {
    return new Deadline(clock, clock.monotonic() + (epochMs - clock.now()));
  }

  /** A deadline `ms` from now. */
  static in(clock: Pick<Clock, 'now' | 'monotonic'>, ms: number): Deadline {
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

  /** The deadline as a wall-clock instant now (for ports that take epoch ms, and stored stamps). */
  epoch(): number {
    return this.clock.now() + this.leftMs();
  }
}
