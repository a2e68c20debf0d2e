import { describe, expect, it } from 'vitest';
import { systemClock } from '../../lib/clock.js';

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
