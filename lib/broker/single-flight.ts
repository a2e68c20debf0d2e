/** Concurrent callers for one key share one pending load, each bounded by its own deadline (I3). */
import type { Clock, Deadline } from '../clock.js';

export class SingleFlight<K, V> {
  // A Map, not an object: keys come from callers and must not reach prototype members.
  readonly #pending = new Map<K, Promise<V>>();

  constructor(private readonly clock: Pick<Clock, 'after'>) {}

  has(key: K): boolean {
    return this.#pending.has(key);
  }

  /** Runs `load`, or joins the one running for `key` (`has`) until `deadline` (`timedOut()`). */
  async run(
    key: K,
    load: () => Promise<V>,
    deadline: Pick<Deadline, 'leftMs'>,
    timedOut: () => Error,
  ): Promise<V> {
    const existing = this.#pending.get(key);
    if (existing) return withDeadline(existing, deadline.leftMs(), this.clock, timedOut);
    const started = load().finally(() => this.#pending.delete(key));
    this.#pending.set(key, started);
    return started;
  }
}

/** Waits for `promise` at most `waitMs`, then rejects with `timedOut()`. */
export const withDeadline = <T>(
  promise: Promise<T>,
  waitMs: number,
  clock: Pick<Clock, 'after'>,
  timedOut: () => Error,
): Promise<T> => {
  let cancel: (() => void) | undefined;
  const timeout = new Promise<never>((_, reject) => {
    cancel = clock.after(Math.max(0, waitMs), () => reject(timedOut()));
  });
  return Promise.race([promise, timeout]).finally(() => cancel?.());
};
