import { describe, expect, it, vi } from 'vitest';
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
    const deadline = Deadline.in(clock, 1_000);
    clock.step(-4_000);
    expect(deadline.leftMs()).toBe(1_000);
    await clock.advance(400);
    expect(deadline.leftMs()).toBe(600);
    expect(deadline.passed()).toBe(false);
    await clock.advance(600);
    expect(deadline.passed()).toBe(true);
  });

  it('gives the time left in whole ms, as timer APIs need, and never below zero', () => {
    let at = 7.3;
    const clock = { monotonic: () => at };
    const deadline = Deadline.in(clock, 3_850.9);
    const left = deadline.wholeMsLeft();
    expect(Number.isInteger(left)).toBe(true);
    expect(left).toBe(3_850);
    expect(() => AbortSignal.timeout(left)).not.toThrow();
    at += 5_000;
    expect(deadline.wholeMsLeft()).toBe(0);
  });

  it('never reads the wall clock: made and judged on the monotonic clock alone', () => {
    const clock = new ManualClock(1_795_262_400_000);
    const now = vi.spyOn(clock, 'now');
    const deadline = Deadline.in(clock, 2_000).minus(500).min(Deadline.in(clock, 3_000));
    expect(deadline.leftMs()).toBe(1_500);
    expect(deadline.passed()).toBe(false);
    expect(deadline.wholeMsLeft()).toBe(1_500);
    expect(now).not.toHaveBeenCalled();
  });

  it('takes the earlier of two deadlines, or itself when there is no other', () => {
    const clock = new ManualClock(1_795_262_400_000);
    const soon = Deadline.in(clock, 1_000);
    const late = Deadline.in(clock, 5_000);
    expect(late.min(soon)).toBe(soon);
    expect(soon.min(late)).toBe(soon);
    expect(soon.min(undefined)).toBe(soon);
  });
});
