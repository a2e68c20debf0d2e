/**
 * The last good token: served from memory when a newer token cannot be had, within what the
 * caller asked for and never once expired. Where it may be revoked (a refresh in progress
 * elsewhere, an unknown outcome) it is held back: those tests are in
 * guarantees/no-revoked-token.test.ts (I2).
 */
import { describe, expect, it, vi } from 'vitest';
import { UpstreamUnavailableError } from '../../../lib/errors.js';
import { deadline, setup, useFakeTime } from './setup.js';

describe('Last good token: served when a newer one cannot be had', () => {
  useFakeTime();

  it('is served when a newer token cannot be had and the caller gave no minValidity', async () => {
    const { broker, issuer, metrics } = setup({ recheck: 0 });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    vi.advanceTimersByTime(3570_000); // 30 s left, below the 60 s default validity
    issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
    const served = await broker.getToken('sandbox', { deadline: deadline(10_000) });
    expect(served).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
    expect(metrics.get('LastGoodTokenServed')).toBe(1);
  });

  it('is served without a second upstream attempt in the same request', async () => {
    const { broker, issuer } = setup({ recheck: 0 });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    vi.advanceTimersByTime(3570_000);
    let attempts = 0;
    issuer.authorize = async () => {
      attempts += 1;
      throw new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
    };
    const served = await broker.getToken('sandbox', { deadline: deadline(10_000) });
    // One attempt, which failed, and then the last good token: not a second try, and not none.
    expect(attempts).toBe(1);
    expect(served).toMatchObject({ record: { accessToken: 'token-1' } });
  });

  it('is not served to a caller who asked for a validity it does not have', async () => {
    const { broker, issuer } = setup({ recheck: 0 });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    vi.advanceTimersByTime(3570_000);
    issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
    await expect(
      broker.getToken('sandbox', { minValiditySeconds: 60, deadline: deadline(5_000) }),
    ).rejects.toBeInstanceOf(UpstreamUnavailableError);
  });

  it('is never served once expired', async () => {
    const { broker, issuer } = setup({ recheck: 0 });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    vi.advanceTimersByTime(3600_001);
    issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
    await expect(broker.getToken('sandbox', { deadline: deadline(5_000) })).rejects.toBeInstanceOf(
      UpstreamUnavailableError,
    );
  });
});
