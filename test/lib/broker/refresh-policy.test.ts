import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  DRAIN_MARGIN_MS,
  drainMs,
  dueForRefresh,
  inWindow,
  type RefreshSettings,
  recheckIntervalMs,
  SKEW_TOLERANCE_MS,
  servableFromMemory,
  WINDOW_RECHECK_MS,
  windowMs,
} from '../../../lib/broker/refresh-policy.js';
import type { TokenRecord } from '../../../lib/ports.js';

const T0 = 1_795_262_400_000;

/** A token issued at T0 living `lifetimeMs`, and settings in whole seconds as config gives them. */
const arbitraries = {
  lifetimeMs: fc.integer({ min: 2_000, max: 30 * 86_400_000 }),
  settings: fc.record({
    refreshWindowMs: fc.integer({ min: 1, max: 86_400 }).map((s) => s * 1000),
    memoryRecheckMs: fc.integer({ min: 1, max: 3_600 }).map((s) => s * 1000),
  }),
  draw: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
  issuanceMs: fc.integer({ min: 1, max: 60_000 }),
};

const token = (lifetimeMs: number): TokenRecord => ({
  connection: 'sandbox',
  accessToken: 'a',
  tokenDigest: 'd',
  issuedAt: T0,
  expiresAt: T0 + lifetimeMs,
});

describe('Module: refresh policy', () => {
  it('never lets the window exceed the configured one or half the token’s lifetime', () => {
    fc.assert(
      fc.property(arbitraries.lifetimeMs, arbitraries.settings, (lifetime, settings) => {
        const window = windowMs(token(lifetime), settings);
        expect(window).toBeLessThanOrEqual(settings.refreshWindowMs);
        expect(window).toBeLessThanOrEqual(lifetime / 2);
        expect(window).toBe(Math.min(settings.refreshWindowMs, lifetime / 2));
      }),
    );
  });

  it('is due for refresh never before the window starts, whatever the draw', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        arbitraries.settings,
        arbitraries.draw,
        arbitraries.issuanceMs,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (lifetime, settings, draw, issuanceMs, at) => {
          const record = token(lifetime);
          const window = windowMs(record, settings);
          const beforeWindow = T0 + Math.floor(at * (lifetime - window - 1));
          expect(dueForRefresh(record, beforeWindow, settings, draw, issuanceMs)).toBe(false);
        },
      ),
    );
  });

  it('is always due from the middle of the window on, whatever the draw', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        arbitraries.settings,
        arbitraries.draw,
        arbitraries.issuanceMs,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (lifetime, settings, draw, issuanceMs, at) => {
          const record = token(lifetime);
          const half = windowMs(record, settings) / 2;
          const now = Math.ceil(record.expiresAt - half + at * half);
          expect(dueForRefresh(record, now, settings, draw, issuanceMs)).toBe(true);
        },
      ),
    );
  });

  it('tries earlier the closer the middle of the window: a larger draw is never less due', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        arbitraries.settings,
        arbitraries.draw,
        arbitraries.draw,
        arbitraries.issuanceMs,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (lifetime, settings, a, b, issuanceMs, at) => {
          const record = token(lifetime);
          const now = T0 + Math.floor(at * lifetime);
          const [low, high] = a <= b ? [a, b] : [b, a];
          if (dueForRefresh(record, now, settings, low, issuanceMs)) {
            expect(dueForRefresh(record, now, settings, high, issuanceMs)).toBe(true);
          }
        },
      ),
    );
  });

  it('re-checks memory at the configured interval until 10 s before the window, and at most every 250 ms from then on', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        arbitraries.settings,
        fc.double({ min: 0, max: 1, noNaN: true }),
        (lifetime, settings, at) => {
          const record = token(lifetime);
          const now = T0 + Math.floor(at * lifetime);
          const interval = recheckIntervalMs(record, now, settings);
          if (inWindow(record, now + SKEW_TOLERANCE_MS, settings)) {
            expect(interval).toBe(Math.min(WINDOW_RECHECK_MS, settings.memoryRecheckMs));
          } else {
            expect(interval).toBe(settings.memoryRecheckMs);
          }
        },
      ),
    );
  });

  it('drains for longer than the re-check interval any container applies to the token, whatever their clocks', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        arbitraries.settings,
        fc.double({ min: 0, max: 1, noNaN: true }),
        fc.integer({ min: -SKEW_TOLERANCE_MS, max: SKEW_TOLERANCE_MS }),
        (lifetime, settings, at, skew) => {
          const record = token(lifetime);
          const now = T0 + Math.floor(at * lifetime);
          // A reader whose clock reads `now + skew` re-checks at this interval.
          const reader = recheckIntervalMs(record, now + skew, settings);
          expect(drainMs(record, now, settings)).toBeGreaterThanOrEqual(reader + DRAIN_MARGIN_MS);
        },
      ),
    );
  });

  it('serves memory only while valid for the need and confirmed within the re-check interval', () => {
    const settings: RefreshSettings = { refreshWindowMs: 600_000, memoryRecheckMs: 5_000 };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 3_600_000 }),
        fc.integer({ min: 0, max: 20_000 }),
        fc.integer({ min: 0, max: 3_600_000 }),
        (elapsed, sinceCheck, needMs) => {
          const record = token(3_600_000);
          const now = T0 + elapsed;
          const servable = servableFromMemory(
            { record, checkedAt: now - sinceCheck },
            now,
            needMs,
            settings,
          );
          const expected =
            record.expiresAt - now > needMs &&
            sinceCheck < recheckIntervalMs(record, now, settings);
          expect(servable).toBe(expected);
        },
      ),
    );
  });
});
