/**
 * The caller bounds (lib/broker/observer/caller-bounds.ts), invariant I4 at its edges: which
 * requests force a replacement, how long a caller's word must wait, what a refusal says can be
 * had, and which `minValidity` a request may ask at all. The fleet-wide bound is
 * `guarantees/caller-word-bounded.test.ts`; these are the rules it is built from, each stated
 * from docs/protocol.md rather than from the code.
 */

import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  availableMinValidity,
  forcesReplacement,
  forcingRefusal,
  tokenRequest,
  waitBeforeReplacing,
} from '../../../lib/broker/observer/caller-bounds.js';
import { DEFAULT_TIMING } from '../../../lib/broker/timing/index.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import { Deadline } from '../../../lib/clock.js';
import {
  BadRequestError,
  ForceNotAllowedError,
  ReplacementTooSoonError,
} from '../../../lib/errors.js';
import type { TokenRecord } from '../../../lib/ports.js';
import { ManualClock } from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const LIFE_MS = 1_200_000;
/** A 60 s window: shorter than half the 1,200 s lifetime. */
const settings = { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, timing: DEFAULT_TIMING };
const WINDOW_MS = 60_000;

const token = (forced = false, expiresAt = T0 + LIFE_MS): TokenRecord => ({
  connection: 'sandbox',
  accessToken: 'current',
  tokenDigest: tokenDigest('current'),
  issuedAt: expiresAt - LIFE_MS,
  expiresAt,
  ...(forced ? { forced } : {}),
});

describe('I4: which requests force a replacement', () => {
  it('I4: a request the token cannot serve (left <= need) forces its replacement, unless the token is in its window', () => {
    const record = token();
    const at = (leftMs: number) => record.expiresAt - leftMs;
    // Served when left > need: asking for exactly what is left, or more, forces.
    expect(forcesReplacement(record, 500_000, at(500_001), settings)).toBe(false);
    expect(forcesReplacement(record, 500_000, at(500_000), settings)).toBe(true);
    expect(forcesReplacement(record, 600_000, at(500_000), settings)).toBe(true);
    // In its window (left <= window, as the observer judges it) the token is due anyway.
    expect(forcesReplacement(record, 600_000, at(WINDOW_MS), settings)).toBe(false);
    expect(forcesReplacement(record, 600_000, at(WINDOW_MS + 1), settings)).toBe(true);
  });

  it('I4: a request the token can serve is never refused, whoever asks and however young the token', () => {
    const record = token(true);
    const request = { record, needMs: 60_000, now: T0, knownForMs: 0, mayForce: false };
    expect(forcingRefusal(request, settings)).toBeUndefined();
  });
});

describe('I4: how long a caller’s word waits', () => {
  it('I4: a token issued on a caller’s word is replaced on one only once it is a refresh window old here', () => {
    const forced = token(true);
    expect(waitBeforeReplacing(forced, 0, settings)).toBe(WINDOW_MS);
    expect(waitBeforeReplacing(forced, WINDOW_MS - 1, settings)).toBe(1);
    expect(waitBeforeReplacing(forced, WINDOW_MS, settings)).toBe(0);
    // BROKER_FORCED_MIN_AGE_SECONDS sets another age.
    expect(waitBeforeReplacing(forced, 1_000, { ...settings, forcedMinAgeMs: 5_000 })).toBe(4_000);
  });

  it('I4: any other token waits only BROKER_INVALIDATE_MIN_AGE_SECONDS (none when not set)', () => {
    const natural = token(false);
    expect(waitBeforeReplacing(natural, 0, settings)).toBe(0);
    expect(waitBeforeReplacing(natural, 500, { ...settings, invalidateFloorMs: 2_000 })).toBe(
      1_500,
    );
    expect(waitBeforeReplacing(natural, 500, { ...settings, forcedMinAgeMs: 9_000 })).toBe(-500);
    const early = forcingRefusal(
      { record: natural, needMs: LIFE_MS, now: T0, knownForMs: 500, mayForce: true },
      { ...settings, invalidateFloorMs: 2_000 },
    );
    expect(early).toMatchObject({ retryAfterSeconds: 2 });
    expect(early?.message).toMatch(
      /sooner than a caller's request may \(not in its first moments\)/,
    );
  });

  it('I4: a forcing request too early is refused with when to retry (whole seconds, never early) and what it can have now', () => {
    const record = token(true);
    const now = T0 + 100_000;
    const needMs = LIFE_MS; // more than any token left
    const early = forcingRefusal(
      { record, needMs, now, knownForMs: WINDOW_MS - 1_500, mayForce: true },
      settings,
    );
    expect(early).toBeInstanceOf(ReplacementTooSoonError);
    expect(early).toMatchObject({ retryAfterSeconds: 2, availableMinValidity: 1_099 });
    expect(early?.message).toBe(
      "A minValidity of 1200s would replace the current token sooner than a caller's request may (once per refresh window); ask for 1099s or less now, or retry in 2s",
    );
    // Once the age is reached, it may go on.
    expect(
      forcingRefusal({ record, needMs, now, knownForMs: WINDOW_MS, mayForce: true }, settings),
    ).toBeUndefined();
  });

  it('I4: a caller that may not force is refused whatever the token’s age, with what it can have', () => {
    const record = token(false);
    const refusal = forcingRefusal(
      { record, needMs: 1_150_500, now: T0 + 100_000, knownForMs: 10 * LIFE_MS, mayForce: false },
      settings,
    );
    expect(refusal).toBeInstanceOf(ForceNotAllowedError);
    expect(refusal).toMatchObject({ availableMinValidity: 1_099 });
    expect(refusal?.message).toBe(
      'A minValidity of 1151s would replace the current token, which this caller may not force; ask for 1099s or less',
    );
  });
});

describe('I4: what a refusal says can be had', () => {
  it('I4: the largest whole minValidity the token serves with a second to spare, and 0 below that', () => {
    fc.assert(
      fc.property(fc.integer({ min: -5_000, max: LIFE_MS }), (leftMs) => {
        const record = token();
        const available = availableMinValidity(record, record.expiresAt - leftMs);
        expect(Number.isInteger(available)).toBe(true);
        if (leftMs < 2_000) {
          expect(available).toBe(0);
          return;
        }
        // Served (left > need) a second later; one more second would not leave that spare.
        expect(leftMs - available * 1_000).toBeGreaterThanOrEqual(1_000);
        expect(leftMs - (available + 1) * 1_000).toBeLessThan(1_000);
      }),
    );
  });
});

describe('What a request may ask for: one TokenRequest, checked once', () => {
  const config = { defaultMinValiditySeconds: 60, maxTokenLifetimeSeconds: 86_400 };
  const deadline = Deadline.in(new ManualClock(T0), 1_000);
  const minValidityMs = (minValiditySeconds: number | undefined) =>
    tokenRequest({ minValiditySeconds, deadline }, config).minValidityMs;

  it('takes a whole number of seconds from 0 to below the longest lifetime, and the default when none', () => {
    expect(minValidityMs(undefined)).toBe(60_000);
    expect(minValidityMs(0)).toBe(0);
    expect(minValidityMs(86_399)).toBe(86_399_000);
  });

  it('says whether the caller named its validity, and who asks: an unnamed caller that may force by default', () => {
    expect(tokenRequest({ deadline }, config)).toEqual({
      minValidityMs: 60_000,
      explicit: false,
      deadline,
      workUntil: undefined,
      caller: 'unnamed caller',
      mayForce: true,
    });
    const named = { minValiditySeconds: 60, deadline, caller: 'svc', mayForce: false };
    expect(tokenRequest(named, config)).toMatchObject({
      explicit: true,
      caller: 'svc',
      mayForce: false,
    });
  });

  it('refuses a fraction, a negative value and one the longest lifetime cannot give', () => {
    for (const bad of [1.5, -1, Number.NaN]) {
      expect(() => minValidityMs(bad)).toThrow(
        new BadRequestError('minValidity must be a whole number of seconds, 0 or more'),
      );
    }
    expect(() => minValidityMs(86_400)).toThrow(
      new BadRequestError('minValidity must be below the maximum token lifetime (86400s)'),
    );
  });
});
