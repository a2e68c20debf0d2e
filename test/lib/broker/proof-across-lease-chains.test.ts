/**
 * I2 across lease chains (found by an adversarial review, 2026-11-26; failed before
 * `proofMs` capped a lease's proof at the reader's re-check): a read of a long countdown proved
 * (k - 1) steps, uncapped by the reader's re-check, and memory served inside it while the store
 * was unreadable (`whileStoreDown`). After a let-go, a holder with a shorter re-check counts down afresh from a
 * shorter N: its POST leaves before that proof runs out. Mixed settings (a rolling change of
 * BROKER_MEMORY_RECHECK_SECONDS), which docs/protocol.md allows.
 */
import { describe, expect, it } from 'vitest';
import { Deadline } from '../../../lib/clock.js';
import { InMemoryTokenStore } from '../../support/fakes.js';
import { fleetBroker, seed, Upstream, wrap } from '../../support/fleet-model.js';
import { Sim } from '../../support/sim.js';

const T0 = 1_795_262_400_000;

describe('I2: proofs across a let-go and a fresh, shorter countdown', () => {
  it('I2: a reader that saw a dead 100 s holder’s countdown does not serve the token from memory after a 5 s holder’s POST revoked it', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    // 500 s left of a 1 h token; written by a container whose re-check was 5 s.
    const x = seed(store, up, T0 - 3_100_000, 3_600_000);
    store.setToken({ ...x, recheckMs: 5_000 });
    // H1 (BROKER_MEMORY_RECHECK_SECONDS=100, window 600 s: own re-check 100 s) took the lease
    // with countdown max(100 s, 5 s) -> 401 steps and died at once.
    const item = store.items.get('sandbox');
    if (!item) throw new Error('no item');
    item.lease = {
      holder: 'h1:1',
      version: 'v-h1',
      expiresAt: T0 + 850,
      durationMs: 850,
      countdown: 401,
    };

    let rDown = false;
    const rStore = wrap(store, {
      read: async (n) => {
        if (rDown) throw new Error('DynamoDB request timed out');
        return store.read(n);
      },
    });
    const r = fleetBroker(rStore, sim.clock('R'), up, { recheck: 5, window: 600 });
    const s = fleetBroker(store, sim.clock('S'), up, { recheck: 5, window: 600 });

    // R reads the countdown of 401 and serves X: its read proves 99.9 s.
    const first = await sim.run(r.getToken('sandbox', { deadline: r.deadlineIn(3_000) }));
    expect(first.value?.record.accessToken).toBe(x.accessToken);

    // 11 s later the lease is stale at first sight; a caller S serves (satisfied) lets it go,
    // then S's warm-up counts afresh from its own N (21 steps) and POSTs.
    await sim.advance(11_000);
    const satisfied = await sim.run(s.getToken('sandbox', { deadline: s.deadlineIn(3_000) }));
    expect(satisfied.value?.record.accessToken).toBe(x.accessToken);
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    const warm = await sim.run(s.warmUp(Deadline.in(sim.clock('S'), 9_000)));
    expect(warm.error).toBeUndefined();
    expect(up.n).toBe(2);
    expect(up.revoked.has(x.accessToken)).toBe(true);
    const revokedAt = up.issuedAt.at(-1) ?? 0;
    expect(revokedAt - T0).toBeLessThan(20_000);

    // R's store reads now fail: R serves what memory proved. It must not be X any more.
    rDown = true;
    await sim.advance(1_000);
    const later = await sim.run(r.getToken('sandbox', { deadline: r.deadlineIn(3_000) }));
    const served = later.value?.record.accessToken;
    expect(
      served === x.accessToken ? `served revoked ${served} at ${sim.now() - T0} ms` : 'ok',
    ).toBe('ok');
  });
});
