/**
 * Invalidate: a caller reports the token it was given as rejected. Compare-and-delete on its
 * digest (a late report about an older token changes nothing), a lease in progress left alone,
 * and other containers stop serving the dropped token within a re-check. How often a report
 * may replace a token is I4: guarantees/caller-word-bounded.test.ts.
 *
 * Issuance counts are exact: each issuance beyond one per lifetime revokes a token (I1).
 */
import { describe, expect, it, vi } from 'vitest';
import { tokenDigest } from '../../../lib/broker/index.js';
import { InMemoryTokenStore } from '../../support/fakes.js';
import { deadline, record, setup, T0, useFakeTime } from './setup.js';

describe('Invalidate: a report drops the token it names, and nothing else', () => {
  useFakeTime();

  it('drops the token reported when it is the current one, and the next request issues its successor once', async () => {
    const { broker, store, issuer } = setup();
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1')).toEqual({ invalidated: true });
    expect(store.token('sandbox') !== undefined).toBe(false);
    const next = await broker.getToken('sandbox', { deadline: deadline() });
    expect(next).toMatchObject({ source: 'upstream', record: { accessToken: 'token-2' } });
    expect(issuer.issued).toBe(2);
  });

  it('ignores a report about a token that is no longer the current one', async () => {
    const { broker, store, issuer } = setup();
    await broker.getToken('sandbox', { deadline: deadline() });
    await broker.invalidate('sandbox', 'token-1');
    await broker.getToken('sandbox', { deadline: deadline() });
    expect(await broker.invalidate('sandbox', 'token-1')).toEqual({ invalidated: false });
    expect(store.token('sandbox')?.accessToken).toBe('token-2');
    expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('memory');
    expect(issuer.issued).toBe(2);
  });

  it('logs the digest of the reported token, never the token', async () => {
    const { broker, logger } = setup();
    await broker.getToken('sandbox', { deadline: deadline() });
    await broker.invalidate('sandbox', 'token-1');
    expect(JSON.stringify(logger.lines)).not.toContain('"token-1"');
    expect(JSON.stringify(logger.lines)).toContain(tokenDigest('token-1'));
  });

  it('leaves a lease in progress alone, and records when the report came', async () => {
    const store = new InMemoryTokenStore();
    const { broker } = setup({ store });
    store.items.set('sandbox', {
      token: record('current', T0 + 3600_000),
      lease: {
        holder: 'refresher:1',
        version: 'v-refresher:1',
        expiresAt: T0 + 10_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    expect(await broker.invalidate('sandbox', 'current')).toEqual({ invalidated: true });
    expect(store.items.get('sandbox')).toEqual({
      lease: {
        holder: 'refresher:1',
        version: 'v-refresher:1',
        expiresAt: T0 + 10_000,
        durationMs: 3_000,
        countdown: 0,
      },
      // When the report came: why the next token is issued.
      invalidatedAt: T0,
    });
  });

  it('stops serving a token dropped by another container once the memory re-check has passed', async () => {
    const { broker, store, issuer } = setup({ recheck: 5 });
    await broker.getToken('sandbox', { deadline: deadline() });
    store.items.delete('sandbox'); // another container invalidated it
    vi.advanceTimersByTime(5_001);
    const served = await broker.getToken('sandbox', { deadline: deadline() });
    expect(served.record.accessToken).toBe('token-2');
    expect(issuer.issued).toBe(2);
  });
});
