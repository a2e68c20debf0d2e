/**
 * Guarantee: no caller is handed a token the upstream has already revoked, when the containers
 * of one deployment do not agree: on their settings (a rolling configuration change), or on the
 * time (a wall clock stepped back). Each container is a broker over one in-memory store, on its
 * own manual clock; the upstream model revokes every earlier token on each issuance.
 */
import { describe, expect, it } from 'vitest';
import type { Clock } from '../../../../lib/clock.js';
import { InMemoryTokenStore, ManualClock } from '../../../support/fakes.js';
import { fleetBroker, issuerFor, Upstream, wrap } from '../../../support/fleet-model.js';
import { Sim } from '../../../support/sim.js';

const T0 = 1_795_262_400_000;
/** Tokens live 120 s: a 60 s refresh window. */
const LIFE_S = 120;

/**
 * Two containers on one timeline (one manual clock: a container's sleeps move time for both),
 * with their own settings; container A's wall clock may be offset from the timeline by `step`.
 */
const setup = (recheck: { a: number; b: number }) => {
  const clock = new ManualClock(T0);
  let offsetA = 0;
  const clockA: Clock = {
    now: () => clock.now() + offsetA,
    monotonic: () => clock.monotonic(),
    sleep: (ms) => clock.sleep(ms),
    random: () => clock.random(),
    every: (ms, tick) => clock.every(ms, tick),
    after: (ms, fire) => clock.after(ms, fire),
  };
  const store = new InMemoryTokenStore();
  const up = new Upstream();
  const options = { window: 60, floor: 2 };
  const a = fleetBroker(store, clockA, up, {
    ...options,
    recheck: recheck.a,
    issuer: issuerFor(up, clockA, LIFE_S),
  });
  const b = fleetBroker(store, clock, up, {
    ...options,
    recheck: recheck.b,
    issuer: issuerFor(up, clock, LIFE_S),
  });
  /** Steps A's wall clock (an NTP correction): its monotonic clock goes on unmoved. */
  const stepA = (ms: number) => {
    offsetA += ms;
  };
  return { clock, clockA, store, up, a, b, stepA };
};

describe('Guarantee I2: no revoked token served, across containers that disagree', () => {
  for (const writer of ['a', 'b'] as const) {
    it(`with re-checks of 10 s and 2 s in one deployment (the token written by the ${writer === 'a' ? '10 s' : '2 s'} container), the 10 s container never serves a token the 2 s container's warm-up replaced`, async () => {
      const { clock, up, a, b } = setup({ a: 10, b: 2 });
      const first = writer === 'a' ? a : b;
      const old = (await first.getToken('sandbox', { deadline: clock.now() + 8_000 })).record
        .accessToken;
      await clock.advance(61_000); // inside the 60 s window now
      expect(
        (await a.getToken('sandbox', { deadline: clock.now() + 8_000 })).record.accessToken,
      ).toBe(old);
      // The warm-up runs on the 2 s container and replaces the token.
      const warm = b.warmUp(clock.now() + 30_000);
      const served: { token: string; revoked: boolean }[] = [];
      for (let i = 0; i < 240; i += 1) {
        await clock.advance(50);
        const answer = await a.getToken('sandbox', { deadline: clock.now() + 8_000 });
        const token = answer.record.accessToken;
        served.push({ token, revoked: up.revoked.has(token) });
      }
      expect((await warm).issued).toBe(1);
      expect(up.revoked.has(old)).toBe(true);
      // Before: the 2 s container counted down 2 s, and the 10 s one served the replaced token
      // for up to 8 s after its revocation.
      expect(served.filter((s) => s.revoked)).toEqual([]);
      expect(served.at(-1)?.token).not.toBe(old);
    });
  }

  it('a container whose wall clock is stepped back 4 s during a countdown never serves the token it replaced (its proofs run on its monotonic clock)', async () => {
    const { clock, up, a, b, stepA } = setup({ a: 5, b: 5 });
    const old = (await b.getToken('sandbox', { deadline: clock.now() + 8_000 })).record.accessToken;
    await clock.advance(61_000);
    expect(
      (await a.getToken('sandbox', { deadline: clock.now() + 8_000 })).record.accessToken,
    ).toBe(old);
    const warm = b.warmUp(clock.now() + 30_000);
    const served: { token: string; revoked: boolean }[] = [];
    for (let i = 0; i < 240; i += 1) {
      await clock.advance(50);
      if (i === 20) stepA(-4_000); // NTP steps A's wall clock back, a second into the countdown
      const answer = await a.getToken('sandbox', { deadline: clock.now() + 8_000 });
      served.push({
        token: answer.record.accessToken,
        revoked: up.revoked.has(answer.record.accessToken),
      });
    }
    expect((await warm).issued).toBe(1);
    expect(up.revoked.has(old)).toBe(true);
    // Before: A's memory judged its proof on the stepped wall clock and served the replaced
    // token for up to 4 s after its revocation.
    expect(served.filter((s) => s.revoked)).toEqual([]);
    expect(served.at(-1)?.token).not.toBe(old);
  });
});

describe('Guarantee I2: a store call in flight while the clocks move', () => {
  const LIFE = 120;
  it('a wall clock stepped back 4 s while a 20 ms read is in flight does not stretch what the read proves', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const clockA = sim.clock('a');
    const clockB = sim.clock('b');
    const slowA = wrap(store, {
      read: async (name) => {
        await clockA.sleep(20);
        return store.read(name);
      },
    });
    const options = { window: 60, recheck: 5, floor: 2 };
    const a = fleetBroker(slowA, clockA, up, { ...options, issuer: issuerFor(up, clockA, LIFE) });
    const b = fleetBroker(store, clockB, up, { ...options, issuer: issuerFor(up, clockB, LIFE) });
    const first = await sim.run(b.getToken('sandbox', { deadline: clockB.now() + 8_000 }));
    const old = first.value?.record.accessToken;
    await sim.advance(61_000);
    const read = a.getToken('sandbox', { deadline: clockA.now() + 8_000 });
    await sim.advance(10);
    sim.step('a', -4_000); // NTP, while A's read is in flight
    expect((await sim.run(read)).value?.record.accessToken).toBe(old);
    const warm = b.warmUp(clockB.now() + 30_000);
    const revoked: number[] = [];
    for (let i = 0; i < 240; i += 1) {
      await sim.advance(50);
      const answer = (await sim.run(a.getToken('sandbox', { deadline: clockA.now() + 8_000 })))
        .value;
      if (answer && up.revoked.has(answer.record.accessToken)) revoked.push(sim.now() - T0);
    }
    expect((await sim.run(warm)).value).toMatchObject({ issued: 1 });
    // Before: 74 answers served the replaced token after its revocation.
    expect(revoked).toEqual([]);
  });

  for (const variant of [
    { name: 'a minValidity above the lifetime, clocks agreeing', minValiditySeconds: 200, skew: 0 },
    {
      name: 'a minValidity of the lifetime less 1 s, on a clock 1.5 s ahead',
      minValiditySeconds: LIFE - 1,
      skew: 1_500,
    },
  ]) {
    it(`a lease taken after reading no token never replaces one another container wrote meanwhile (${variant.name})`, async () => {
      const sim = new Sim(T0);
      const store = new InMemoryTokenStore();
      const up = new Upstream();
      const clockA = sim.clock('a');
      const clockB = sim.clock('b', variant.skew);
      const slowB = wrap(store, {
        acquireLease: async (name, request) => {
          await clockB.sleep(30);
          return store.acquireLease(name, request);
        },
      });
      const options = { window: 60, recheck: 5, floor: 2 };
      const a = fleetBroker(store, clockA, up, { ...options, issuer: issuerFor(up, clockA, LIFE) });
      const b = fleetBroker(slowB, clockB, up, { ...options, issuer: issuerFor(up, clockB, LIFE) });
      // B reads an empty item; its acquire lands 30 ms later, after A wrote the first token.
      const fromB = b.getToken('sandbox', {
        deadline: clockB.now() + 5_000,
        minValiditySeconds: variant.minValiditySeconds,
      });
      await sim.advance(10);
      await sim.run(a.getToken('sandbox', { deadline: clockA.now() + 5_000 }));
      await sim.run(fromB);
      const revoked: number[] = [];
      for (let i = 0; i < 40; i += 1) {
        await sim.advance(100);
        const answer = (await sim.run(a.getToken('sandbox', { deadline: clockA.now() + 5_000 })))
          .value;
        if (answer && up.revoked.has(answer.record.accessToken)) revoked.push(sim.now() - T0);
      }
      // Before: B's countdown-0 lease replaced A's token 100 ms after its issuance, and A served
      // the revoked token for its whole re-check (40 answers).
      expect(revoked).toEqual([]);
      expect(up.n).toBe(1);
    });
  }
});
