/**
 * Every issuance accounted for: its cause and the caller that led to it, in one INFO line and a
 * metric per cause; the warm-up counted per run; and a token of ours rejected early reported
 * as the sign of another issuer on the same client ID.
 *
 * Counts are exact here: the audit and its metrics count each issuance and each run once.
 */
import { describe, expect, it, vi } from 'vitest';
import { tokenDigest } from '../../../lib/broker/index.js';
import { causeOf } from '../../../lib/broker/issuance/issuance-cause.js';
import { connection } from '../../support/fakes.js';
import { deadline, setup, useFakeTime } from './setup.js';

const T0 = new Date('2026-11-24T12:00:00Z').getTime();
const ARN = 'arn:aws:sts::123456789012:assumed-role/orders/i-1';

/** One container with the `sandbox` connection alone. */
const audited = () => {
  const container = setup({ connections: [connection()] });
  /** The audit lines of the issuances so far: cause, trigger and, for a validity, its value. */
  const audits = () =>
    container.logger.lines
      .filter((line) => line.message === 'Token issued by the Open API')
      .map((line) => {
        const { cause, trigger, minValidity } = line.attributes[0] as Record<string, unknown>;
        return { cause, trigger, ...(minValidity === undefined ? {} : { minValidity }) };
      });
  return { ...container, audits };
};

describe('Issuance audit: every issuance with its cause and caller', () => {
  useFakeTime(T0);

  it('logs and counts the first token, a caller’s minValidity, an invalidate and an expired token', async () => {
    const { broker, store, metrics, audits } = audited();
    const first = await broker.getToken('sandbox', { deadline: deadline(), caller: ARN });
    // A validity only a new token has (the first lives 3,600 s).
    await vi.advanceTimersByTimeAsync(10_000);
    const forced = await broker.getToken('sandbox', {
      deadline: deadline(),
      minValiditySeconds: 3_595,
      caller: ARN,
    });
    expect(forced.record.accessToken).not.toBe(first.record.accessToken);
    // Issued on a caller's word: a report of it waits until it is a refresh window old.
    expect(
      await broker.invalidate('sandbox', forced.record.accessToken, 'direct invoke'),
    ).toMatchObject({ invalidated: false });
    await vi.advanceTimersByTimeAsync(600_000);
    expect(await broker.invalidate('sandbox', forced.record.accessToken, 'direct invoke')).toEqual({
      invalidated: true,
    });
    await broker.getToken('sandbox', { deadline: deadline(), caller: 'direct invoke' });
    // The stored token expires unrefreshed (a fleet that was idle past it).
    const stored = store.token('sandbox');
    if (!stored) throw new Error('no token stored');
    store.setToken({ ...stored, issuedAt: Date.now() - 3_600_001, expiresAt: Date.now() - 1 });
    await vi.advanceTimersByTimeAsync(6_000);
    await broker.getToken('sandbox', { deadline: deadline(), caller: ARN });

    expect(audits()).toEqual([
      { cause: 'first-token', trigger: ARN },
      { cause: 'min-validity', trigger: ARN, minValidity: 3_595 },
      { cause: 'invalidate', trigger: 'direct invoke' },
      { cause: 'expired', trigger: ARN },
    ]);
    expect(metrics.get('UpstreamIssuances')).toBe(4);
    for (const name of [
      'IssuedForFirstToken',
      'IssuedForMinValidity',
      'IssuedForInvalidate',
      'IssuedForExpired',
    ]) {
      expect(metrics.get(name), name).toBe(1);
    }
  });

  it('names the warm-up and its trigger, and counts each run per connection', async () => {
    const { broker, store, metrics, audits } = audited();
    await broker.warmUp(deadline());
    // Inside the refresh window (600 s): the next run replaces it.
    const stored = store.token('sandbox');
    if (!stored) throw new Error('no token stored');
    store.setToken({
      ...stored,
      issuedAt: Date.now() - 3_300_000,
      expiresAt: Date.now() + 300_000,
    });
    await vi.advanceTimersByTimeAsync(6_000);
    await broker.warmUp(deadline(), ARN);
    expect(audits()).toEqual([
      { cause: 'first-token', trigger: 'schedule' },
      { cause: 'warm-up', trigger: ARN },
    ]);
    expect(metrics.get('WarmUpRuns')).toBe(2);
    expect(metrics.get('IssuedForWarmUp')).toBe(1);
  });

  it('names a refresh ahead with the caller whose request started it', async () => {
    const { broker, store, audits } = audited();
    store.setToken({
      connection: 'sandbox',
      accessToken: 'current',
      tokenDigest: tokenDigest('current'),
      issuedAt: T0 - 3_300_000,
      expiresAt: T0 + 299_000,
    });
    await broker.getToken('sandbox', { deadline: deadline(5_000), caller: ARN });
    await broker.idle();
    expect(audits()).toEqual([{ cause: 'refresh-ahead', trigger: ARN }]);
  });

  it('tells a takeover and an unknown outcome from the read that led to them', () => {
    const token = {
      connection: 'sandbox',
      accessToken: 't',
      tokenDigest: 'd',
      issuedAt: 0,
      expiresAt: 10,
    };
    const lease = {
      holder: 'h:1',
      version: 'v-h:1',
      expiresAt: 1,
      durationMs: 3_000,
      countdown: 0,
    };
    const base = { valid: undefined, suspect: false, takeOver: undefined, warmUp: false };
    expect(causeOf({ ...base, state: { token: undefined, lease }, takeOver: lease })).toBe(
      'takeover',
    );
    expect(causeOf({ ...base, state: { token, lease }, valid: token, suspect: true })).toBe(
      'unknown-outcome',
    );
    expect(causeOf({ ...base, state: { token: undefined, lease: undefined } })).toBe('first-token');
    expect(
      causeOf({ ...base, state: { token: undefined, lease: undefined, invalidatedAt: 5 } }),
    ).toBe('invalidate');
  });
});

describe('Another issuer on the same client ID', () => {
  useFakeTime(T0);

  it('says so loudly when the token it holds as current is reported rejected early in its life', async () => {
    const { broker, logger, metrics } = audited();
    const served = await broker.getToken('sandbox', { deadline: deadline() });
    await vi.advanceTimersByTimeAsync(60_000);
    await broker.invalidate('sandbox', served.record.accessToken, ARN);
    const errors = logger.lines.filter((line) => line.level === 'error');
    expect(errors.map((line) => line.message)).toEqual([
      'Another system may be issuing tokens for this client ID',
    ]);
    expect(errors[0]?.attributes[0]).toMatchObject({
      connection: 'sandbox',
      tokenAgeSeconds: 60,
      reportedBy: ARN,
    });
    expect(metrics.get('AnotherIssuerSuspected')).toBe(1);
    // Never the token itself.
    expect(JSON.stringify(logger.lines)).not.toContain(served.record.accessToken);
  });

  it('stays quiet for a report about an older token, or one late in its life', async () => {
    const { broker, logger, metrics } = audited();
    const first = await broker.getToken('sandbox', { deadline: deadline() });
    await broker.invalidate('sandbox', 'some-older-token', ARN);
    // Past half its life (3,600 s), a rejection may be the upstream's own expiry policy.
    await vi.advanceTimersByTimeAsync(1_900_000);
    await broker.getToken('sandbox', { deadline: deadline() });
    await broker.invalidate('sandbox', first.record.accessToken, ARN);
    expect(logger.lines.filter((line) => line.level === 'error')).toEqual([]);
    expect(metrics.get('AnotherIssuerSuspected')).toBe(0);
  });
});
