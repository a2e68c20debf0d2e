import { describe, expect, it } from 'vitest';
import { SingleFlight } from '../../../lib/broker/single-flight.js';
import { Deadline } from '../../../lib/clock.js';
import { ManualClock } from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const timedOut = () => new Error('timed out');

describe('Class: SingleFlight', () => {
  it('runs one load per key for concurrent callers, `has` telling a caller it joins', async () => {
    const clock = new ManualClock(T0);
    const flight = new SingleFlight<string, number>(clock);
    let loads = 0;
    let finish: ((value: number) => void) | undefined;
    const load = () => {
      loads += 1;
      return new Promise<number>((resolve) => {
        finish = resolve;
      });
    };
    expect(flight.has('a')).toBe(false);
    const first = flight.run('a', load, Deadline.in(clock, 1_000), timedOut);
    // The second caller joins: `has` tells it so before it runs.
    expect(flight.has('a')).toBe(true);
    const second = flight.run('a', load, Deadline.in(clock, 1_000), timedOut);
    finish?.(7);
    expect(await first).toBe(7);
    expect(await second).toBe(7);
    // Exact: one load per key is what a single flight is (in the broker, one issuance: I1).
    expect(loads).toBe(1);
    expect(flight.has('a')).toBe(false);
  });

  it('keeps keys apart, including prototype member names', async () => {
    const clock = new ManualClock(T0);
    const flight = new SingleFlight<string, string>(clock);
    const results = await Promise.all(
      ['constructor', '__proto__', 'a'].map((key) =>
        flight.run(key, async () => key, Deadline.in(clock, 1_000), timedOut),
      ),
    );
    expect(results).toEqual(['constructor', '__proto__', 'a']);
  });

  it('answers a joiner at its own deadline while the shared load goes on', async () => {
    const clock = new ManualClock(T0);
    const flight = new SingleFlight<string, number>(clock);
    let finish: ((value: number) => void) | undefined;
    const load = () =>
      new Promise<number>((resolve) => {
        finish = resolve;
      });
    const owner = flight.run('a', load, Deadline.in(clock, 10_000), timedOut);
    const joiner = flight
      .run('a', load, Deadline.in(clock, 300), timedOut)
      .catch((error: Error) => error);
    await clock.advance(300);
    expect(await joiner).toEqual(new Error('timed out'));
    finish?.(1);
    expect(await owner).toBe(1);
    expect(clock.pending()).toBe(0);
  });

  it('forgets a failed load, so the next caller starts afresh', async () => {
    const clock = new ManualClock(T0);
    const flight = new SingleFlight<string, number>(clock);
    await expect(
      flight.run(
        'a',
        async () => Promise.reject(new Error('boom')),
        Deadline.in(clock, 1_000),
        timedOut,
      ),
    ).rejects.toThrow('boom');
    expect(await flight.run('a', async () => 2, Deadline.in(clock, 1_000), timedOut)).toBe(2);
  });
});
