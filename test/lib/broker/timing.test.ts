import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  announcedMs,
  countdownFor,
  countingLeaseMs,
  staleMarginMs,
} from '../../../lib/broker/timing/bounds.js';
import {
  cutOverEstimate,
  cutOverRereadMs,
  DEFAULT_TIMING,
  dueForRefresh,
  leaseNeedsMs,
  leaseTerm,
  pollWaitMs,
  proofMs,
  type RefreshSettings,
  readReserveMs,
  recheckMs,
  refreshBudgetMs,
  replacementMayBeOut,
  staleIfErrorMs,
  TTL_MARGIN_SECONDS,
  windowMs,
} from '../../../lib/broker/timing/index.js';
import type { MemoryEntry } from '../../../lib/broker/view/serving.js';
import { servable } from '../../../lib/broker/view/serving.js';

/** The serving rule asked first (memory before the store): does it serve `entry`? */
const servableFromMemory = (
  entry: MemoryEntry,
  now: number,
  minValidityMs: number,
  settings: RefreshSettings,
) => servable(entry, { minValidityMs, explicit: false }, now, settings).why === 'proved';

import type { TokenRecord } from '../../../lib/ports.js';

const T0 = 1_795_262_400_000;
const { countdownStepMs, proofMarginMs } = DEFAULT_TIMING;
const timing = DEFAULT_TIMING;

/** A token issued at T0 living `lifetimeMs`, and settings in whole seconds as config gives them. */
const arbitraries = {
  lifetimeMs: fc.integer({ min: 2_000, max: 30 * 86_400_000 }),
  settings: fc.record({
    refreshWindowMs: fc.integer({ min: 1, max: 86_400 }).map((s) => s * 1000),
    memoryRecheckMs: fc.integer({ min: 1, max: 3_600 }).map((s) => s * 1000),
    timing: fc.constant(DEFAULT_TIMING),
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

describe('Module: timing (bounds and estimates)', () => {
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

  it('re-checks memory at the configured interval, never more than a quarter of the window apart', () => {
    fc.assert(
      fc.property(arbitraries.lifetimeMs, arbitraries.settings, (lifetime, settings) => {
        const record = token(lifetime);
        const interval = recheckMs(record, settings);
        expect(interval).toBeLessThanOrEqual(settings.memoryRecheckMs);
        expect(interval).toBeLessThanOrEqual(
          Math.max(countdownStepMs, windowMs(record, settings) / 4),
        );
        expect(interval).toBeGreaterThanOrEqual(
          Math.min(countdownStepMs, settings.memoryRecheckMs),
        );
      }),
    );
  });

  /**
   * The cut-over's safety claim, simulated: a holder takes the lease on a token that readers
   * hold, then writes its countdown down to 0 (each write sent at least a step after the
   * previous one was answered, with arbitrary network delays), then sends the POST. Readers
   * read at arbitrary instants and see the last write applied before their read took effect.
   * Every reader must stop serving the token (by what its read proves: `proofMs` from its send)
   * a margin before the POST.
   */
  it('keeps every reader from serving a token past the instant its replacement’s request can leave', () => {
    // Delays are often 0: the worst case for the claim is a network that answers at once.
    const delay = fc.oneof(fc.constant(0), fc.integer({ min: 0, max: 400 }));
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        fc.record({
          refreshWindowMs: fc.integer({ min: 1, max: 86_400 }).map((s) => s * 1000),
          memoryRecheckMs: fc.integer({ min: 0, max: 30 }).map((s) => s * 1000),
          timing: fc.constant(DEFAULT_TIMING),
        }),
        fc.array(fc.tuple(delay, delay, delay), { minLength: 1, maxLength: 50 }),
        // Reads aimed just before one of the holder's writes takes effect: [write, how long
        // before it, how long the read took to take effect after it was sent].
        fc.array(fc.tuple(fc.nat(), fc.integer({ min: 1, max: 300 }), delay), { maxLength: 40 }),
        delay,
        (lifetime, settings, network, reads, beforeLease) => {
          const record = token(lifetime);
          const countdown = countdownFor(record, settings);
          // The holder's writes, [took effect at, value]: the lease itself takes effect
          // `beforeLease` after a read that found none (sent and effective at T0).
          const writes: Array<[number, number]> = [[T0 + beforeLease, countdown]];
          let answeredAt = T0 + beforeLease;
          for (let value = countdown - 1; value >= 0; value -= 1) {
            const [extra, toApply, toAnswer] = network[value % network.length] ?? [0, 0, 0];
            const applied = answeredAt + countdownStepMs + extra + toApply;
            writes.push([applied, value]);
            answeredAt = applied + toAnswer;
          }
          const postAt = answeredAt; // sent once the last write (0) is answered
          expect(T0 + proofMs(record, undefined, settings)).toBeLessThanOrEqual(
            postAt - proofMarginMs,
          );
          for (const [index, before, lag] of reads) {
            const target = writes[index % writes.length];
            if (!target) continue;
            const effective = target[0] - before;
            const sentAt = effective - lag;
            const seen = writes.filter(([applied]) => applied <= effective).at(-1);
            const lease = seen
              ? { holder: 'h', version: 'v-h', expiresAt: 0, durationMs: 0, countdown: seen[1] }
              : undefined;
            if (replacementMayBeOut(lease, DEFAULT_TIMING)) continue; // not served
            const until = sentAt + proofMs(record, lease, settings);
            expect(until).toBeLessThanOrEqual(postAt - proofMarginMs);
          }
        },
      ),
      { numRuns: 300 },
    );
  });

  it('counts down for longer than a re-check plus the margin, and announces nothing once down to 1', () => {
    fc.assert(
      fc.property(arbitraries.lifetimeMs, arbitraries.settings, (lifetime, settings) => {
        const record = token(lifetime);
        const fresh = { holder: 'h', version: 'v-h', expiresAt: 0, durationMs: 0 };
        // A reader that found no lease: the lease and `countdown` more writes come after it.
        expect(countdownFor(record, settings) * countdownStepMs).toBeGreaterThanOrEqual(
          recheckMs(record, settings) + proofMarginMs,
        );
        expect(announcedMs({ ...fresh, countdown: 3 }, DEFAULT_TIMING)).toBe(
          2 * countdownStepMs - proofMarginMs,
        );
        expect(replacementMayBeOut({ ...fresh, countdown: 1 }, DEFAULT_TIMING)).toBe(true);
        expect(replacementMayBeOut({ ...fresh, countdown: 0 }, DEFAULT_TIMING)).toBe(true);
        expect(replacementMayBeOut({ ...fresh, countdown: 2 }, DEFAULT_TIMING)).toBe(false);
        expect(replacementMayBeOut(undefined, DEFAULT_TIMING)).toBe(false);
      }),
    );
  });

  it('serves memory only while valid for the need, read less than a re-check ago, and inside what that read proved', () => {
    const settings: RefreshSettings = { refreshWindowMs: 600_000, memoryRecheckMs: 5_000, timing };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 3_600_000 }),
        fc.integer({ min: 0, max: 20_000 }),
        fc.integer({ min: -20_000, max: 20_000 }),
        fc.integer({ min: 0, max: 3_600_000 }),
        (elapsed, sinceCheck, untilOffset, needMs) => {
          const record = token(3_600_000);
          const now = T0 + elapsed;
          const servable = servableFromMemory(
            { record, checkedAt: now - sinceCheck, until: now + untilOffset },
            now,
            needMs,
            settings,
          );
          expect(servable).toBe(
            record.expiresAt - now > needMs && untilOffset > 0 && sinceCheck < 5_000,
          );
        },
      ),
    );
  });

  // I1: a lease version never lasts longer than the holder counts on it: at most a lease's
  // duration (a counting lease's when a step follows) and never past the caller's deadline.
  it('I1: writes a lease version lasting a lease’s duration cut to the deadline, never negative', () => {
    fc.assert(
      fc.property(fc.integer({ min: -10_000, max: 10_000 }), fc.boolean(), (leftMs, counting) => {
        const durationMs = leaseTerm(leftMs, DEFAULT_TIMING, counting);
        const lasts = counting ? countingLeaseMs(DEFAULT_TIMING) : DEFAULT_TIMING.leaseMs;
        expect(durationMs).toBeGreaterThanOrEqual(0);
        expect(durationMs).toBeLessThanOrEqual(Math.max(0, leftMs));
        expect(durationMs).toBeLessThanOrEqual(lasts);
        if (leftMs >= lasts) expect(durationMs).toBe(lasts);
      }),
    );
  });

  it('reads a countdown read more than 2 s before its end once more, a second before that end', () => {
    const settings: RefreshSettings = { refreshWindowMs: 600_000, memoryRecheckMs: 5_000, timing };
    const record = token(3_600_000);
    const lease = {
      holder: 'h:1',
      version: 'v-h:1',
      expiresAt: T0 + 3_000,
      durationMs: 3_000,
      countdown: 21,
    };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 4_999 }),
        fc.integer({ min: 1, max: 5_000 }),
        (sinceCheck, untilAfterCheck) => {
          const now = T0 + 10_000;
          const entry = {
            record,
            checkedAt: now - sinceCheck,
            until: now - sinceCheck + untilAfterCheck,
          };
          const plain = servableFromMemory(entry, now, 0, settings);
          const counted = servableFromMemory({ ...entry, lease }, now, 0, settings);
          // With no countdown read, nothing changes; with one, it is not served in the last
          // second before its end, unless the read that saw it came less than 2 s before it.
          expect(plain).toBe(now < entry.until);
          expect(counted).toBe(
            now < entry.until &&
              (untilAfterCheck <= 2 * cutOverRereadMs(timing) ||
                now < entry.until - cutOverRereadMs(timing)),
          );
        },
      ),
    );
  });
});

describe('Module: timing, each estimate never below the bound it stands in for', () => {
  it('a refresh’s budget is never less than what its lease needs (I3)', () => {
    fc.assert(
      fc.property(fc.integer({ min: 0, max: 500 }), fc.integer({ min: 1, max: 60_000 }), (n, t) => {
        expect(refreshBudgetMs(n, t, DEFAULT_TIMING)).toBeGreaterThanOrEqual(
          leaseNeedsMs(n, DEFAULT_TIMING),
        );
      }),
    );
  });

  it('the cut-over estimate never comes before the end the countdown announced (I2), and takes the holder’s step within its bounds', () => {
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 500 }),
        fc.integer({ min: 0, max: 60_000 }),
        fc.option(fc.integer({ min: 0, max: 5_000 }), { nil: undefined }),
        (n, issuance, stepMs) => {
          const lease = { holder: 'h', version: 'v', expiresAt: 0, durationMs: 0, countdown: n };
          const estimate = cutOverEstimate(T0, { countdown: n, stepMs }, issuance, DEFAULT_TIMING);
          expect(estimate.successorAt).toBeGreaterThanOrEqual(
            T0 + announcedMs(lease, DEFAULT_TIMING),
          );
          const { countdownStepMs: step, storeRoundTripMs: trip } = DEFAULT_TIMING;
          expect(estimate.stepMs).toBe(
            stepMs === undefined ? step : Math.min(Math.max(stepMs, step), step + trip),
          );
        },
      ),
    );
  });

  it('aims at the announced step: 9 steps of 280 ms, then half a 300 ms issuance and the write', () => {
    const { successorAt, stepMs } = cutOverEstimate(
      T0,
      { countdown: 9, stepMs: 280 },
      300,
      DEFAULT_TIMING,
    );
    expect([stepMs, successorAt - T0]).toEqual([280, 9 * 280 + 150 + 30]);
  });

  it('a wait for a holder never ends before its countdown can have (I2 liveness), nor under 1 ms', () => {
    fc.assert(
      fc.property(
        fc.record({
          countdown: fc.integer({ min: 0, max: 100 }),
          sinceReadMs: fc.integer({ min: 0, max: 30_000 }),
          issuanceMs: fc.integer({ min: 1, max: 60_000 }),
          waits: fc.integer({ min: 0, max: 20 }),
          draw: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
        }),
        (input) => {
          const wait = pollWaitMs(input, DEFAULT_TIMING);
          expect(wait).toBeGreaterThanOrEqual(1);
          expect(wait).toBeGreaterThanOrEqual(
            (input.countdown - 1) * countdownStepMs - input.sinceReadMs,
          );
        },
      ),
    );
  });

  it('the read reserve is never below the last read’s round trip', () => {
    fc.assert(
      fc.property(fc.option(fc.integer({ min: 0, max: 10_000 }), { nil: undefined }), (read) => {
        expect(readReserveMs(read, DEFAULT_TIMING)).toBeGreaterThanOrEqual(read ?? 0);
      }),
    );
  });
});

describe('Module: timing, stale-if-error (how long a caller that cannot reach the broker may use a token)', () => {
  const lease = {
    holder: 'h',
    version: 'v',
    expiresAt: T0 + 3_000,
    durationMs: 3_000,
    countdown: 21,
  };

  it('runs from the reuse time to the expiry less a minute, or a tenth of a short lifetime', () => {
    const hour = token(3600_000);
    expect(staleIfErrorMs({ record: hour }, T0 + 4_900, T0)).toBe(3600_000 - 60_000 - 4_900);
    const short = token(40_000);
    expect(staleMarginMs(short)).toBe(4_000);
    expect(staleIfErrorMs({ record: short }, T0 + 1_900, T0)).toBe(40_000 - 4_000 - 1_900);
  });

  it.each([
    ['a lease announced on the token (its replacement is under way)', { lease }],
    ['a token reported as rejected', { reported: true }],
  ])('is 0 for %s', (_name, extra) => {
    expect(staleIfErrorMs({ record: token(3600_000), ...extra }, T0 + 4_900, T0)).toBe(0);
  });

  it('is 0 for an answer not to be reused at all (its proof is spent), and never negative', () => {
    expect(staleIfErrorMs({ record: token(3600_000) }, T0, T0)).toBe(0);
    expect(staleIfErrorMs({ record: token(3600_000) }, T0 - 1, T0)).toBe(0);
    // Reusable up to where the margin begins: nothing left to use stale.
    expect(staleIfErrorMs({ record: token(100_000) }, T0 + 95_000, T0)).toBe(0);
  });

  it('never lets the reuse and the stale use together run past the expiry less the margin', () => {
    fc.assert(
      fc.property(
        arbitraries.lifetimeMs,
        fc.integer({ min: -10_000, max: 200_000 }),
        fc.integer({ min: 0, max: 10_000 }),
        (lifetime, reusable, elapsed) => {
          const record = token(lifetime);
          const now = T0 + elapsed;
          const stale = staleIfErrorMs({ record }, T0 + reusable, now);
          expect(stale).toBeGreaterThanOrEqual(0);
          if (stale > 0) {
            expect(T0 + reusable + stale).toBeLessThanOrEqual(
              record.expiresAt - staleMarginMs(record),
            );
            expect(staleMarginMs(record)).toBeLessThanOrEqual(TTL_MARGIN_SECONDS * 1000);
            expect(T0 + reusable).toBeGreaterThan(now);
          }
        },
      ),
    );
  });
});
