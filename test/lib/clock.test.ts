import { describe, expect, it } from 'vitest';
import { Deadline, systemClock } from '../../lib/clock.js';
import { ManualClock } from '../support/fakes.js';

describe('Object: systemClock', () => {
  it('tells the time, draws in [0, 1), sleeps, and runs and cancels timers', async () => {
    const before = Date.now();
    expect(systemClock.now()).toBeGreaterThanOrEqual(before);
    const draw = systemClock.random();
    expect(draw).toBeGreaterThanOrEqual(0);
    expect(draw).toBeLessThan(1);
    await systemClock.sleep(5);
    expect(systemClock.now()).toBeGreaterThanOrEqual(before + 4);
    let ticks = 0;
    let fired = 0;
    const stop = systemClock.every(2, () => {
      ticks += 1;
    });
    const cancel = systemClock.after(1, () => {
      fired += 1;
    });
    const cancelled = systemClock.after(1, () => {
      fired += 10;
    });
    cancelled();
    await systemClock.sleep(20);
    stop();
    cancel();
    const seen = ticks;
    await systemClock.sleep(10);
    expect(seen).toBeGreaterThan(0);
    expect(ticks).toBe(seen);
    expect(fired).toBe(1);
  });
});

describe('Class: Deadline', () => {
  it('judges time left on the monotonic clock: a wall clock stepped back stretches nothing (I3)', async () => {
    const clock = new ManualClock(1_795_262_400_000);
    const deadline = Deadline.fromEpoch(clock, clock.now() + 1_000);
    clock.step(-4_000);
    expect(deadline.leftMs()).toBe(1_000);
    await clock.advance(400);
    expect(deadline.leftMs()).toBe(600);
    expect(deadline.passed()).toBe(false);
    await clock.advance(600);
    expect(deadline.passed()).toBe(true);
  });

  it('gives its wall-clock instant in whole ms, as timer APIs need', () => {
    const clock = { now: () => 1_000.25, monotonic: () => 7.3 };
    const epoch = Deadline.in(clock, 3_850.9).epoch();
    expect(Number.isInteger(epoch)).toBe(true);
    expect(epoch).toBe(4_851);
    expect(() => AbortSignal.timeout(epoch - 1_000)).not.toThrow();
  });
});
