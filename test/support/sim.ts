/**
 * One timeline for a fleet: each container sees it through its own Clock, `sleep` is a timer
 * (it never moves time itself, unlike ManualClock.sleep, so concurrent sleepers cannot move
 * time backwards), and a frozen container's timers do not fire until it is thawed (a Lambda
 * environment between invocations, or SIGSTOP). Time moves only by `advance`. Each container's
 * wall clock may be offset from the timeline, and stepped (NTP), while its monotonic clock
 * follows the timeline.
 */
import type { Clock } from '../../lib/clock.js';

interface SimTimer {
  at: number;
  every?: number | undefined;
  fire: () => void;
  owner: string;
}

export class Sim {
  #now: number;
  #timers: SimTimer[] = [];
  readonly #offsets = new Map<string, number>();
  readonly frozen = new Set<string>();
  draw = 0.5;
  constructor(start: number) {
    this.#now = start;
  }
  now() {
    return this.#now;
  }
  /** The clock `owner` sees: its wall clock `skewMs` off the timeline (and any step since). */
  clock(owner: string, skewMs = 0): Clock {
    this.#offsets.set(owner, skewMs);
    return {
      now: () => this.#now + (this.#offsets.get(owner) ?? 0),
      monotonic: () => this.#now,
      sleep: (ms: number) => new Promise<void>((resolve) => void this.#add(owner, ms, resolve)),
      random: () => this.draw,
      every: (ms: number, tick: () => void) => this.#add(owner, ms, tick, ms),
      after: (ms: number, fire: () => void) => this.#add(owner, ms, fire),
    };
  }
  /** Steps `owner`'s wall clock by `ms` (either way); its monotonic clock and timers go on. */
  step(owner: string, ms: number) {
    this.#offsets.set(owner, (this.#offsets.get(owner) ?? 0) + ms);
  }
  #add(owner: string, ms: number, fire: () => void, every?: number) {
    const timer: SimTimer = { at: this.#now + Math.max(0, ms), every, fire, owner };
    this.#timers.push(timer);
    return () => {
      this.#timers = this.#timers.filter((t) => t !== timer);
    };
  }
  async advance(ms: number) {
    const until = this.#now + ms;
    for (;;) {
      const next = this.#timers
        .filter((t) => t.at <= until && !this.frozen.has(t.owner))
        .sort((a, b) => a.at - b.at)[0];
      if (!next) break;
      this.#now = Math.max(this.#now, next.at);
      if (next.every) next.at = this.#now + next.every;
      else this.#timers = this.#timers.filter((t) => t !== next);
      next.fire();
      await settle();
    }
    this.#now = until;
    await settle();
  }
  /** Advances in small steps until `promise` settles (or `maxMs` passed); its outcome. */
  async run<T>(promise: Promise<T>, maxMs = 60_000, step = 5) {
    let outcome: { value?: T; error?: unknown; done: boolean } = { done: false };
    promise.then(
      (value) => {
        outcome = { value, done: true };
      },
      (error: unknown) => {
        outcome = { error, done: true };
      },
    );
    const end = this.#now + maxMs;
    await settle();
    while (!outcome.done && this.#now < end) await this.advance(step);
    return { ...outcome, at: this.#now };
  }
}

export const settle = () => new Promise<void>((resolve) => setImmediate(resolve));
