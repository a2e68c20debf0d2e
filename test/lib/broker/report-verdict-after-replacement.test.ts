/**
 * Found by an adversarial review (2026-11-26; failed before `Reports` took a token from memory
 * only while memory proves it): a probe's `valid` verdict reused for a token that this
 * container still holds in memory after its proof ran out, while another container (another
 * region) replaced it: the container's memory knows no lease, so the verdict is reused, and the
 * report of the revoked token is answered `verified: "valid"`. The client then forgets its
 * report and `withToken` gives its caller the 401 without the retry that would have succeeded.
 */
import { describe, expect, it, vi } from 'vitest';
import { tokenDigest } from '../../../lib/broker/types.js';
import type { ProbeVerdict, TokenProbe } from '../../../lib/ports.js';
import { connection } from '../../support/fakes.js';
import { deadline, setup, useFakeTime } from './setup.js';

class FakeProbe implements TokenProbe {
  readonly probed: string[] = [];
  constructor(public answer: ProbeVerdict) {}
  async probe(_c: unknown, accessToken: string): Promise<ProbeVerdict> {
    this.probed.push(accessToken);
    return this.answer;
  }
}

describe('Verified reports across a replacement made elsewhere (review 3)', () => {
  useFakeTime();

  it('does not answer "valid" from a verdict older than a replacement its memory never saw', async () => {
    const probed = connection({ probe: { path: '/open-api/v3/ping', intervalSeconds: 30 } });
    const probe = new FakeProbe({ verdict: 'valid' });
    const { broker, store } = setup({ connections: [probed], probe, invalidateFloor: 60 });
    const served = await broker.getToken('sandbox', { deadline: deadline() });
    // A report the Open API refutes: the verdict is kept for the interval.
    expect(await broker.invalidate('sandbox', 'token-1', 'svc', deadline())).toEqual({
      invalidated: false,
      verified: 'valid',
    });
    // Past this container's re-check, another region's holder counts down and replaces the
    // token; its POST revoked token-1. This container has not read the store since.
    await vi.advanceTimersByTimeAsync(10_000);
    const successor = {
      ...served.record,
      accessToken: 'token-2',
      tokenDigest: tokenDigest('token-2'),
      issuedAt: Date.now(),
      expiresAt: Date.now() + 3_600_000,
    };
    store.setToken(successor);
    probe.answer = { verdict: 'revoked' };
    // A caller that used token-1 reports the 401 to this container.
    const outcome = await broker.invalidate('sandbox', 'token-1', 'svc', deadline());
    expect(outcome.verified).not.toBe('valid');
  });
});
