/**
 * The rules the cold start and `npm run validate` share (lib/config/settings-check.ts), on their
 * own: the parsers and the arithmetic the messages of config.test.ts and stage-check.test.ts
 * rest on.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMING, leaseNeedsMs } from '../../../lib/broker/timing/index.js';
import {
  KNOWN_VARIABLES,
  nearestVariable,
  schedulePeriod,
  timeoutNeededMs,
} from '../../../lib/config/settings-check.js';

describe('Function: schedulePeriod', () => {
  it.each([
    ['rate(1 minute)', 60],
    ['rate(5 minutes)', 300],
    ['rate(2 hours)', 7200],
    ['rate(1 day)', 86_400],
    ['cron(0/5 * * * ? *)', 'cron'],
    ['rate(0 minutes)', undefined],
    ['rate(5 fortnights)', undefined],
    ['every 5 minutes', undefined],
  ])('reads %s as %s', (expression, period) => {
    expect(schedulePeriod(expression)).toBe(period);
  });
});

describe('Function: nearestVariable', () => {
  it('names the variable a typo most likely means, and none for a name far from all', () => {
    expect(nearestVariable('BROKER_REFRESH_WINDOW')).toBe('BROKER_REFRESH_WINDOW_SECONDS');
    expect(nearestVariable('BROKER_MEMORY_RECHEK_SECONDS')).toBe('BROKER_MEMORY_RECHECK_SECONDS');
    expect(nearestVariable('broker_table_name')).toBe('BROKER_TABLE_NAME');
    expect(nearestVariable('BROKER_WHATEVER_ELSE')).toBeUndefined();
  });

  it('names every known variable as itself', () => {
    for (const name of KNOWN_VARIABLES) expect(nearestVariable(name)).toBe(name);
  });
});

describe('Function: timeoutNeededMs', () => {
  it('is never below what a lease needs under that re-check plus the answer margin', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 100 }), fc.integer({ min: 1, max: 86_400 }), (r, w) => {
        const recheck = Math.min(r * 1000, Math.max(250, (w * 1000) / 4));
        const countdown = Math.ceil((recheck + 100) / 250);
        expect(
          timeoutNeededMs({
            memoryRecheckSeconds: r,
            refreshWindowSeconds: w,
            timing: DEFAULT_TIMING,
          }),
        ).toBeGreaterThanOrEqual(
          leaseNeedsMs(countdown, DEFAULT_TIMING) + DEFAULT_TIMING.answerMarginMs,
        );
      }),
    );
  });

  it('lets the stack’s 10 s timeout hold re-checks up to 7 s, the default 5 s in 7.2 s', () => {
    const needs = (r: number) =>
      timeoutNeededMs({
        memoryRecheckSeconds: r,
        refreshWindowSeconds: 600,
        timing: DEFAULT_TIMING,
      });
    expect(needs(5)).toBe(7_200);
    expect(needs(7)).toBeLessThanOrEqual(10_000);
    expect(needs(8)).toBeGreaterThan(10_000);
  });
});
