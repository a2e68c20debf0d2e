/**
 * The token answer every caller kind gets, and its `Cache-Control`: the reuse time and the
 * stale-if-error time (RFC 5861), as the broker core's answer states them.
 */
import { describe, expect, it } from 'vitest';
import { cacheControl, tokenResponse } from '../../functions/broker/shared.js';
import type { TokenRecord } from '../../lib/ports.js';

const NOW = 1_795_262_400_000;
const record: TokenRecord = {
  connection: 'sandbox',
  accessToken: 'at_1',
  tokenDigest: 'd',
  issuedAt: NOW - 1_000,
  expiresAt: NOW + 3_600_000,
};

describe('Function: the token answer and its Cache-Control', () => {
  it('says the stale-if-error time in whole seconds, beside the reuse time', () => {
    const answer = tokenResponse(
      'sandbox',
      { record, reusableUntil: NOW + 4_900, staleIfErrorMs: 3_535_100 },
      NOW,
    );
    expect(answer).toMatchObject({ maxAgeMs: 4_900, staleIfErrorSeconds: 3_535 });
    expect(cacheControl(answer.maxAgeMs, answer.staleIfErrorSeconds)).toBe(
      'private, max-age=4, stale-if-error=3535',
    );
  });

  it('gives no stale-if-error to an answer not to be reused at all, and says no-store', () => {
    const answer = tokenResponse(
      'sandbox',
      { record, reusableUntil: NOW - 5, staleIfErrorMs: 60_000 },
      NOW,
    );
    expect(answer).toMatchObject({ maxAgeMs: 0, staleIfErrorSeconds: 0 });
    expect(cacheControl(answer.maxAgeMs, answer.staleIfErrorSeconds)).toBe('no-store');
  });

  it('keeps a token reusable for less than a second cacheable when it may be used stale', () => {
    expect(cacheControl(800, 30)).toBe('private, max-age=0, stale-if-error=30');
    expect(cacheControl(800, 0)).toBe('no-store');
    expect(cacheControl(4_900, 0)).toBe('private, max-age=4');
  });
});
