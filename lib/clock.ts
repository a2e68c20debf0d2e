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
