/**
 * Verified reports: on a connection with a `probe`, a caller's report is checked with the Open
 * API before any age rule (docs/protocol.md, "A verified report"). A token the probe accepts is
 * not replaced; one it rejects is dropped at once, whatever its age, and its successor issued
 * once (I1); anything else leaves the report to the age rules (I4, as without a probe). A
 * container probes one token at most once per interval, however many report it.
 */
import { describe, expect, it, vi } from 'vitest';
import type { ConnectionConfig } from '../../../lib/config.js';
import type { ProbeVerdict, StepOptions, TokenProbe } from '../../../lib/ports.js';
import { connection } from '../../support/fakes.js';
import { deadline, setup, useFakeTime } from './setup.js';

/** An Open API that answers the probe with `answer` (a verdict, or a function of the token). */
class FakeProbe implements TokenProbe {
  /** What each probe was asked, with the ms its deadline left it. */
  readonly probed: { connection: string; accessToken: string; leftMs: number }[] = [];
  delayMs = 0;
  constructor(public answer: ProbeVerdict | ((accessToken: string) => ProbeVerdict)) {}

  async probe(
    c: ConnectionConfig,
    accessToken: string,
    options: StepOptions,
  ): Promise<ProbeVerdict> {
    this.probed.push({ connection: c.name, accessToken, leftMs: options.deadline.leftMs() });
    if (this.delayMs > 0) await new Promise((resolve) => setTimeout(resolve, this.delayMs));
    return typeof this.answer === 'function' ? this.answer(accessToken) : this.answer;
  }
}

const VALID: ProbeVerdict = { verdict: 'valid' };
const REVOKED: ProbeVerdict = { verdict: 'revoked' };
const probed = connection({ probe: { path: '/open-api/v3/ping', intervalSeconds: 5 } });

/** One container whose `sandbox` connection has a probe; reports wait 60 s by age. */
const withProbe = (answer: ConstructorParameters<typeof FakeProbe>[0], floor = 60) => {
  const probe = new FakeProbe(answer);
  return { probe, ...setup({ connections: [probed], probe, invalidateFloor: floor }) };
};

describe('Verified reports: a probe checks a report before any age rule', () => {
  useFakeTime();

  it('replaces nothing when the probe accepts the token, and says so', async () => {
    const { broker, probe, issuer, store, metrics } = withProbe(VALID, 0);
    const served = await broker.getToken('sandbox', { deadline: deadline() });
    await vi.advanceTimersByTimeAsync(60_000);
    // Without a probe, a token this old (floor 0) would be dropped at once.
    expect(
      await broker.invalidate('sandbox', served.record.accessToken, 'svc', deadline()),
    ).toEqual({ invalidated: false, verified: 'valid' });
    expect(store.token('sandbox')?.accessToken).toBe('token-1');
    expect(store.items.get('sandbox')?.reportedDigest).toBeUndefined();
    expect((await broker.getToken('sandbox', { deadline: deadline() })).record.accessToken).toBe(
      'token-1',
    );
    expect(issuer.issued).toBe(1);
    expect(probe.probed.map((p) => p.accessToken)).toEqual(['token-1']);
    // Not revoked: no other issuer to suspect.
    expect(metrics.get('AnotherIssuerSuspected')).toBe(0);
  });

  it('replaces a token the probe rejects at once, inside its min age, and its forced successor too', async () => {
    const { broker, issuer, metrics } = withProbe(REVOKED, 60);
    await broker.getToken('sandbox', { deadline: deadline() });
    await vi.advanceTimersByTimeAsync(1_000);
    // 1 s old, 60 s of min age: deferred without a probe.
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: true,
      verified: 'revoked',
    });
    const next = await broker.getToken('sandbox', { deadline: deadline() });
    expect(next).toMatchObject({ source: 'upstream', record: { accessToken: 'token-2' } });
    // Issued on a report: `forced`, which bounds an unverified report to once per window.
    expect(next.record.forced).toBe(true);
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await broker.invalidate('sandbox', 'token-2', 'svc', deadline())).toEqual({
      invalidated: true,
      verified: 'revoked',
    });
    expect((await broker.getToken('sandbox', { deadline: deadline() })).record.accessToken).toBe(
      'token-3',
    );
    expect(issuer.issued).toBe(3);
    // Revoked early in its life with nothing of ours under way: another issuer, alarmed.
    expect(metrics.get('AnotherIssuerSuspected')).toBe(2);
  });

  it.each<[string, ProbeVerdict]>([
    ['answers 503', { verdict: 'unknown', reason: 'HTTP 503' }],
    ['answers 403', { verdict: 'unknown', reason: 'HTTP 403' }],
    ['cannot be reached', { verdict: 'unknown', reason: 'ECONNREFUSED' }],
  ])('leaves the report to the age rules when the probe %s', async (_, verdict) => {
    const { broker, issuer, store, logger } = withProbe(verdict, 60);
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      deferredSeconds: 60,
    });
    expect(store.items.get('sandbox')?.reportedDigest).toBeDefined();
    expect(issuer.issued).toBe(1);
    const handled = logger.lines.find((l) => l.message === 'Invalidate request handled');
    expect(handled?.attributes[0]).toMatchObject({
      probeInconclusive: (verdict as { reason: string }).reason,
    });
  });

  it('leaves the report to the age rules when the probe hangs, and answers within the deadline', async () => {
    const { broker, probe } = withProbe(VALID, 60);
    probe.delayMs = 60_000;
    await broker.getToken('sandbox', { deadline: deadline() });
    const started = Date.now();
    const report = broker.invalidate('sandbox', 'token-1', 'svc', deadline(4_000));
    await vi.advanceTimersByTimeAsync(2_000);
    // 2 s of its 60 went on the probe.
    expect(await report).toEqual({ invalidated: false, deferredSeconds: 58 });
    // Half of the report's time at most, so that the store calls after it still fit.
    expect(Date.now() - started).toBeLessThanOrEqual(2_000);
    expect(probe.probed[0]?.leftMs).toBeLessThanOrEqual(2_000);
  });

  it('leaves the report to the age rules when the probe throws, or there is no time for it', async () => {
    const { broker, probe, logger } = withProbe(() => {
      throw new TypeError('a bug in an adapter: token-1');
    }, 60);
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      deferredSeconds: 60,
    });
    // 60 ms left: half of it is too short for a probe, none is sent.
    await vi.advanceTimersByTimeAsync(5_000);
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline(60))).toMatchObject({
      invalidated: false,
    });
    expect(probe.probed).toHaveLength(1);
    const reasons = logger.lines
      .filter((l) => l.message === 'Invalidate request handled')
      .map((l) => l.attributes[0]?.probeInconclusive);
    expect(reasons).toEqual(['TypeError', 'no time left']);
    expect(JSON.stringify(logger.lines)).not.toContain('token-1"');
  });

  it('probes one token at most once per interval, however many report it', async () => {
    const { broker, probe, issuer } = withProbe(VALID, 0);
    probe.delayMs = 100;
    await broker.getToken('sandbox', { deadline: deadline() });
    const reports = Promise.all(
      Array.from({ length: 50 }, () => broker.invalidate('sandbox', 'token-1', 'svc', deadline())),
    );
    await vi.advanceTimersByTimeAsync(100);
    const storm = await reports;
    expect(storm.every((o) => o.verified === 'valid' && !o.invalidated)).toBe(true);
    await vi.advanceTimersByTimeAsync(4_000);
    await broker.invalidate('sandbox', 'token-1', 'svc', deadline());
    expect(probe.probed).toHaveLength(1);
    // The verdict is reused for the interval only: a revocation after it is seen then.
    probe.answer = REVOKED;
    await vi.advanceTimersByTimeAsync(1_000);
    const late = broker.invalidate('sandbox', 'token-1', 'svc', deadline());
    await vi.advanceTimersByTimeAsync(100);
    expect(await late).toEqual({ invalidated: true, verified: 'revoked' });
    expect(probe.probed).toHaveLength(2);
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(issuer.issued).toBe(2);
  });

  it('reuses no probe that proved nothing: the next report asks again (review of issue 24)', async () => {
    const { broker, probe } = withProbe({ verdict: 'unknown', reason: 'HTTP 503' }, 60);
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      deferredSeconds: 60,
    });
    probe.answer = VALID;
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      verified: 'valid',
    });
    expect(probe.probed).toHaveLength(2);
  });

  it('I2: reuses no valid verdict once a replacement holds a lease on the token: its POST may have revoked it (review of issue 24)', async () => {
    const { broker: first, store, issuer } = withProbe(VALID, 60);
    await first.getToken('sandbox', { deadline: deadline() });
    const probe = new FakeProbe(VALID);
    const other = setup({ connections: [probed], probe, invalidateFloor: 60, store, issuer });
    expect(await other.broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      verified: 'valid',
    });
    // Then a holder takes the lease to replace token-1, and its POST revokes it upstream.
    const held = await store.acquireLease('sandbox', {
      holder: 'holder',
      version: 'v1',
      leaseExpiresAt: Date.now() + 10_000,
      durationMs: 10_000,
      countdown: 0,
      replacesDigest: store.token('sandbox')?.tokenDigest,
    });
    expect(held.acquired).toBe(true);
    probe.answer = REVOKED;
    // Within the interval, the 401s of that revocation reach the broker: asked again.
    await vi.advanceTimersByTimeAsync(1_000);
    expect(await other.broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: true,
      verified: 'revoked',
    });
    expect(probe.probed).toHaveLength(2);
  });

  it('I1: a storm of reports of a revoked token costs one probe and one issuance', async () => {
    const { broker, probe, issuer } = withProbe(REVOKED, 60);
    await broker.getToken('sandbox', { deadline: deadline() });
    const storm = await Promise.all(
      Array.from({ length: 30 }, () => broker.invalidate('sandbox', 'token-1', 'svc', deadline())),
    );
    expect(storm.filter((o) => o.invalidated)).toHaveLength(1);
    expect(storm.every((o) => o.verified === 'revoked')).toBe(true);
    const after = await Promise.all(
      Array.from({ length: 10 }, () => broker.getToken('sandbox', { deadline: deadline() })),
    );
    expect(new Set(after.map((s) => s.record.accessToken))).toEqual(new Set(['token-2']));
    expect(probe.probed).toHaveLength(1);
    expect(issuer.issued).toBe(2);
  });

  it('never sends the Open API a token that is not the current one', async () => {
    const { broker, probe, issuer } = withProbe(REVOKED, 0);
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'some-other-token', 'svc', deadline())).toEqual({
      invalidated: false,
    });
    expect(probe.probed).toEqual([]);
    expect(issuer.issued).toBe(1);
  });

  it('keeps today’s rules on a connection without a probe, even when a probe is wired', async () => {
    const probe = new FakeProbe(REVOKED);
    const { broker, store } = setup({ connections: [connection()], probe, invalidateFloor: 60 });
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      deferredSeconds: 60,
    });
    expect(store.token('sandbox')?.accessToken).toBe('token-1');
    expect(probe.probed).toEqual([]);
  });

  it('checks a token it only knows from the store, and suspects another issuer when the probe confirms it', async () => {
    const { broker: first, store, issuer } = withProbe(VALID, 60);
    await first.getToken('sandbox', { deadline: deadline() });
    const probe = new FakeProbe(REVOKED);
    // Another container, which has never read the token: a caller's word alone would not do.
    const other = setup({ connections: [probed], probe, invalidateFloor: 60, store, issuer });
    expect(await other.broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: true,
      verified: 'revoked',
    });
    expect(other.metrics.get('AnotherIssuerSuspected')).toBe(1);
    expect(JSON.stringify(other.logger.lines)).not.toContain('"token-1"');
  });
});
