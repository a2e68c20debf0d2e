/**
 * A token kept in memory only (its write after the POST failed), found by an adversarial review
 * of the paths that hand out a token without a fresh read (2026-11-26); both tests failed before
 * their fixes: memory's bound counted on the wall clock, and the token was granted stale use.
 */
import { describe, expect, it } from 'vitest';
import type { TokenIssuer } from '../../../lib/ports.js';
import { sealCode } from '../../../lib/upstream/authorization-code.js';
import { InMemoryTokenStore } from '../../support/fakes.js';
import { fleetBroker, Upstream, wrap } from '../../support/fleet-model.js';
import { Sim } from '../../support/sim.js';

const T0 = 1_795_262_400_000;

describe('I2: a token kept in memory only (its write failed)', () => {
  it('I2: a wall clock stepped back during the POST does not stretch memory past the confirmed lease', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const hClock = sim.clock('H');
    // H's POST: NTP steps H's wall clock back 1 s while it is out (the clock "may be stepped").
    const hIssuer: TokenIssuer = {
      authorize: async () => sealCode('code'),
      requestToken: async (_c, _cr, _code, o) => {
        o.signal?.throwIfAborted();
        sim.step('H', -1_000);
        return up.post(hClock.now(), 1200);
      },
    };
    // H's token write fails (it did not land): H keeps its token in memory only.
    const hStore = wrap(store, {
      putToken: async () => {
        throw new Error('DynamoDB request timed out');
      },
    });
    const h = fleetBroker(hStore, hClock, up, { timeout: 1_000, issuer: hIssuer });
    const s = fleetBroker(store, sim.clock('S'), up, { timeout: 1_000 });

    const first = await sim.run(h.getToken('sandbox', { deadline: h.deadlineIn(3_000) }));
    const mine = first.value?.record.accessToken;
    expect(mine).toBe('tok-1');
    // The store still holds H's confirmed lease (countdown 0, the POST's budget and grace).
    expect(store.items.get('sandbox')?.lease?.countdown).toBe(0);

    // S finds that lease stale once it has seen it for its duration, takes it over and POSTs
    // at once (countdown 0): tok-1 is revoked.
    const other = await sim.run(s.getToken('sandbox', { deadline: s.deadlineIn(6_000) }));
    expect(other.value?.record.accessToken).toBe('tok-2');
    expect(up.revoked.has('tok-1')).toBe(true);
    const revokedAt = (up.issuedAt.at(-1) ?? 0) - T0;

    // H is asked again, within its re-check: its memory must not hand out the revoked tok-1.
    await sim.advance(200);
    const again = await sim.run(h.getToken('sandbox', { deadline: h.deadlineIn(3_000) }));
    const served = again.value?.record.accessToken;
    expect(
      served === 'tok-1'
        ? `served tok-1 at ${sim.now() - T0} ms, revoked at ${revokedAt} ms (timeline)`
        : 'ok',
    ).toBe('ok');
  });

  it('ADR 0017: a token whose write failed is granted no stale use (its confirmed lease is taken over, at countdown 0, once it runs out)', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const hStore = wrap(store, {
      putToken: async () => {
        throw new Error('DynamoDB request timed out');
      },
    });
    const h = fleetBroker(hStore, sim.clock('H'), up, { timeout: 1_000 });
    const first = await sim.run(h.getToken('sandbox', { deadline: h.deadlineIn(3_000) }));
    expect(first.value?.record.accessToken).toBe('tok-1');
    expect(first.value?.reusableUntil).toBeGreaterThan(sim.now());
    // The broker knows its replacement comes within seconds: 0, as for an announced one.
    expect(first.value?.staleIfErrorMs).toBe(0);
  });
});
