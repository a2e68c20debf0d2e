/**
 * I4, a caller's word is bounded (docs/protocol.md, "Invariants, assumptions and states"): no
 * caller's word — a `minValidity` the current token cannot give, an invalidate report, or any
 * mix of them, on any container — replaces tokens more than once per refresh window (after the
 * first replacement of a token issued otherwise), and a report that comes too early is kept,
 * not dropped. Ages are judged on each container's own monotonic clock, so a
 * container whose wall clock runs ahead cannot shorten them.
 *
 * Every container here is a broker over one in-memory store, on its own manual clock; the
 * upstream model revokes every earlier token on each issuance, and every token a caller is
 * handed is checked against it at that moment.
 *
 * Issuance counts are upper bounds where the bound is the guarantee, and exact where one
 * replacement (or none) is: each issuance beyond those revokes a token (I1, I4).
 */
import { describe, expect, it, vi } from 'vitest';
import type { TokenBroker } from '../../../../lib/broker/index.js';
import { Deadline } from '../../../../lib/clock.js';
import { UpstreamUnavailableError } from '../../../../lib/errors.js';
import type { TokenIssuer } from '../../../../lib/ports.js';
import { sealCode } from '../../../../lib/upstream/authorization-code.js';
import { InMemoryTokenStore, ManualClock } from '../../../support/fakes.js';
import { fleetBroker, issuerFor, seed, Upstream } from '../../../support/fleet-model.js';
import { deadline, setup, T0, useFakeTime } from '../setup.js';

/** Tokens live 1,200 s; the refresh window is 60 s; the invalidate floor 2 s. */
const LIFE_MS = 1_200_000;
const WINDOW_S = 60;

interface Refusal {
  readonly code: string;
  readonly availableMinValidity?: number;
  readonly retryAfterSeconds?: number;
}

const unexpectedAnswer = (): never => {
  throw new Error('expected a refusal');
};

/** Calls `getToken` and records what the caller got: a token (checked) or a refusal. */
const ledger = (up: Upstream) => {
  const served: { token: string; revoked: boolean }[] = [];
  const refused: Refusal[] = [];
  const ask = async (broker: TokenBroker, clock: ManualClock, minValiditySeconds?: number) => {
    try {
      const answer = await broker.getToken('sandbox', {
        deadline: Deadline.in(clock, 8_000),
        minValiditySeconds,
        caller: 'arn:aws:iam::111122223333:role/service',
      });
      const token = answer.record.accessToken;
      served.push({ token, revoked: up.revoked.has(token) });
      return token;
    } catch (error) {
      refused.push(error as Refusal);
      return undefined;
    }
  };
  return { served, refused, ask };
};

describe('I4: a caller’s word replaces tokens at most once per refresh window', () => {
  it('I4: one caller asking minValidity=1199 every 2 s on two containers replaces the token at most once per window, and is told what it can have', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS); // issued by the warm-up 100 s ago
    const options = { window: WINDOW_S, recheck: 5, floor: 2 };
    const fleet = [fleetBroker(store, clock, up, options), fleetBroker(store, clock, up, options)];
    const { served, refused, ask } = ledger(up);
    const before = up.n;
    const runMs = 200_000;
    for (let i = 0; clock.now() < T0 + runMs; i += 1) {
      await ask(fleet[i % 2] as TokenBroker, clock, 1199);
      await clock.advance(2_000);
    }
    const issued = up.n - before;
    // Before the bound: every request replaced the token (about 27 issuances in 200 s).
    expect(issued).toBeGreaterThanOrEqual(1);
    expect(issued).toBeLessThanOrEqual(1 + Math.floor(runMs / (WINDOW_S * 1000)));
    expect(served.filter((s) => s.revoked)).toEqual([]);
    expect(refused.length).toBeGreaterThan(0);
    for (const refusal of refused) {
      expect(refusal.code).toBe('REPLACEMENT_TOO_SOON');
      // What the current token gives now: less than asked, more than the window.
      expect(refusal.availableMinValidity).toBeLessThan(1199);
      expect(refusal.availableMinValidity).toBeGreaterThan(1000);
      expect(refusal.retryAfterSeconds).toBeGreaterThan(0);
      expect(refusal.retryAfterSeconds).toBeLessThanOrEqual(WINDOW_S);
    }
  });

  it('I4: a mix of minValidity and invalidate reports from two containers replaces the token at most once per window', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    const options = { window: WINDOW_S, recheck: 5, floor: 2 };
    const a = fleetBroker(store, clock, up, options);
    const b = fleetBroker(store, clock, up, options);
    const { served, ask } = ledger(up);
    const before = up.n;
    const runMs = 200_000;
    for (let i = 0; clock.now() < T0 + runMs; i += 1) {
      if (i % 2 === 0) {
        await ask(a, clock, 1199);
      } else {
        const token = await ask(b, clock);
        if (token) await b.invalidate('sandbox', token, 'arn:aws:iam::111122223333:role/service');
      }
      await clock.advance(1_000);
    }
    const issued = up.n - before;
    expect(issued).toBeGreaterThanOrEqual(1);
    expect(issued).toBeLessThanOrEqual(1 + Math.floor(runMs / (WINDOW_S * 1000)));
    expect(served.filter((s) => s.revoked)).toEqual([]);
  });

  // Found as R2 by the review of the invalidate floor (issue 19, dd781c9; ADR 0004).
  it('I4: a storm of reports from a container whose clock runs 3 s ahead re-issues at most once per floor: no clock is compared with another’s', async () => {
    const clock = new ManualClock(T0);
    const ahead = new ManualClock(T0 + 3_000);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    const options = { window: WINDOW_S, recheck: 0.25, floor: 2 };
    const issuer = fleetBroker(store, clock, up, options);
    const reporter = fleetBroker(store, ahead, up, options);
    const { served, ask } = ledger(up);
    const before = up.n;
    const runMs = 4_000;
    while (clock.now() < T0 + runMs) {
      const token = await ask(issuer, clock);
      if (token) await reporter.invalidate('sandbox', token);
      await Promise.all([clock.advance(100), ahead.advance(100)]);
    }
    const issued = up.n - before;
    // Before: the reporter judged every token 3 s older than it was, and about 10 were issued.
    expect(issued).toBeGreaterThanOrEqual(1);
    expect(issued).toBeLessThanOrEqual(Math.ceil(runMs / 2_000));
    expect(served.filter((s) => s.revoked)).toEqual([]);
  });

  it('I4: a single report about a token younger than the floor is kept, and replaces it once, after the floor', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const options = { window: WINDOW_S, recheck: 5, floor: 2 };
    const a = fleetBroker(store, clock, up, options);
    const b = fleetBroker(store, clock, up, options);
    const { served, ask } = ledger(up);
    const first = await ask(b, clock); // the first token, issued now
    await clock.advance(100);
    expect(await ask(a, clock)).toBe(first);
    await clock.advance(400);
    const outcome = await a.invalidate('sandbox', first as string);
    // No further report; both containers keep serving callers.
    const reportedAt = clock.now();
    let replacedAt: number | undefined;
    while (clock.now() < reportedAt + 20_000) {
      for (const broker of [a, b]) {
        const token = await ask(broker, clock);
        if (token !== first && replacedAt === undefined) replacedAt = clock.now();
      }
      await clock.advance(250);
    }
    // Before: the report was dropped, and the token was never replaced (1 issuance).
    expect(up.n).toBe(2);
    expect(replacedAt).toBeDefined();
    // Not before the floor; within the floor, a re-check and a countdown of one.
    expect((replacedAt as number) - reportedAt).toBeGreaterThanOrEqual(1_500);
    expect((replacedAt as number) - reportedAt).toBeLessThan(2_000 + 5_000 + 7_000);
    expect(served.filter((s) => s.revoked)).toEqual([]);
    // The reporter was told so.
    expect(outcome).toEqual({ invalidated: false, deferredSeconds: 2 });
  });

  it('I4: a token the upstream really rejected, reported when old enough, is replaced at once, by the next request', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    const a = fleetBroker(store, clock, up, { window: WINDOW_S, floor: 2 });
    const { ask } = ledger(up);
    const old = (await ask(a, clock)) as string;
    await clock.advance(2_000);
    expect(await a.invalidate('sandbox', old)).toEqual({ invalidated: true });
    const before = up.n;
    const next = await ask(a, clock);
    expect(next).not.toBe(old);
    expect(up.n).toBe(before + 1);
  });

  it('I4: a caller that may not force is refused with what it can have, and nothing is issued', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    const a = fleetBroker(store, clock, up, { window: WINDOW_S, floor: 0 });
    const before = up.n;
    const refusal = await a
      .getToken('sandbox', {
        deadline: Deadline.in(clock, 8_000),
        minValiditySeconds: 1150,
        mayForce: false,
      })
      .then(
        () => undefined,
        (error: unknown) => error as Refusal,
      );
    expect(refusal).toMatchObject({ code: 'FORCE_NOT_ALLOWED', availableMinValidity: 1099 });
    expect(up.n).toBe(before);
    // What it was told it can have, it gets, from the same token.
    const served = await a.getToken('sandbox', {
      deadline: Deadline.in(clock, 8_000),
      minValiditySeconds: 1099,
      mayForce: false,
    });
    expect(up.revoked.has(served.record.accessToken)).toBe(false);
    expect(up.n).toBe(before);
  });

  // Found by the adversarial review of the caller bounds (1db301a).
  it('I4: each caller of a shared load is answered for its own request: a refusal goes only to the caller that forced', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    // A cold container: it has known the token for 0 s, so a forcing request is refused.
    const cold = fleetBroker(store, clock, up, { window: WINDOW_S, floor: 2 });
    const deadline = Deadline.in(clock, 30_000);
    const outcome = (answer: Promise<{ record: { accessToken: string } }>) =>
      answer.then(
        (a) => a.record.accessToken,
        (error: unknown) => (error as Refusal).code,
      );
    const forcing = outcome(cold.getToken('sandbox', { deadline, minValiditySeconds: 1199 }));
    const plain = outcome(cold.getToken('sandbox', { deadline }));
    const warm = cold.warmUp(deadline);
    await clock.advance(1_000);
    // Before: all three got the forcing caller's 429 (the warm-up reported a failure).
    expect(await forcing).toBe('REPLACEMENT_TOO_SOON');
    expect(await plain).toBe('tok-1');
    expect((await warm).connections.sandbox).toMatchObject({ status: 'fresh' });

    // A caller that may force, joining one that may not, gets its replacement.
    await clock.advance(10_000);
    const later = Deadline.in(clock, 30_000);
    const notAllowed = outcome(
      cold.getToken('sandbox', { deadline: later, minValiditySeconds: 1150, mayForce: false }),
    );
    const allowed = outcome(
      cold.getToken('sandbox', { deadline: later, minValiditySeconds: 1150, mayForce: true }),
    );
    await clock.advance(20_000);
    expect(await notAllowed).toBe('FORCE_NOT_ALLOWED');
    expect(await allowed).toBe('tok-2');
  });

  // Found by the adversarial review of the caller bounds (1db301a).
  it('I4: a forced replacement whose token request had an unknown outcome stays a caller’s word: the takeover’s token is forced too', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 100_000, LIFE_MS);
    // Every other token request times out after it was sent (its outcome unknown).
    let attempts = 0;
    const issuer: TokenIssuer = {
      authorize: async () => sealCode('code'),
      requestToken: async (_connection, _credentials, _code, options) => {
        options.signal?.throwIfAborted();
        attempts += 1;
        if (attempts % 2 === 1) {
          throw new UpstreamUnavailableError('The Open API did not answer in time', {
            outcomeUnknown: true,
          });
        }
        return up.post(clock.now(), LIFE_MS / 1000);
      },
    };
    const options = { window: WINDOW_S, recheck: 5, floor: 2, issuer };
    const fleet = [fleetBroker(store, clock, up, options), fleetBroker(store, clock, up, options)];
    const { served, ask } = ledger(up);
    const before = up.n;
    const runMs = WINDOW_S * 1000;
    for (let i = 0; clock.now() < T0 + runMs; i += 1) {
      const answer = ask(fleet[i % 2] as TokenBroker, clock, 1199);
      await clock.advance(1_000);
      await answer;
    }
    for (const broker of fleet) await broker.idle();
    // Before: the takeover's token was not marked, and a forcing caller replaced it 2 s later
    // (3 issuances in 60 s, one every ~18 s).
    expect(up.n - before).toBeLessThanOrEqual(1 + Math.floor(runMs / (WINDOW_S * 1000)));
    expect(served.filter((s) => s.revoked)).toEqual([]);
  });

  // Found by the adversarial review of the caller bounds (1db301a).
  it('I4: what a refusal says can be had is served a round trip later', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 99_950, LIFE_MS); // 1,100.05 s left
    const a = fleetBroker(store, clock, up, { window: WINDOW_S, floor: 0 });
    const refusal = await a
      .getToken('sandbox', {
        deadline: Deadline.in(clock, 30_000),
        minValiditySeconds: 1150,
        mayForce: false,
      })
      .then(unexpectedAnswer, (error: unknown) => error as Refusal);
    await clock.advance(100);
    const served = await a.getToken('sandbox', {
      deadline: Deadline.in(clock, 30_000),
      minValiditySeconds: refusal.availableMinValidity,
      mayForce: false,
    });
    // Before: 1,100 was offered, and refused again 100 ms later.
    expect(served.record.accessToken).toBe('tok-1');
  });

  // Found by the adversarial review of the caller bounds (1db301a).
  it('I4: a kept report outlives a replacement that failed: the token is still replaced, once', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const real = issuerFor(up, clock);
    let calls = 0;
    const issuer: TokenIssuer = {
      authorize: async (connection, credentials, options) => {
        calls += 1;
        // The deferred replacement's first try: a definite failure (nothing issued).
        if (calls === 2) throw new UpstreamUnavailableError('503 from the Open API');
        return real.authorize(connection, credentials, options);
      },
      requestToken: (...args) => real.requestToken(...args),
    };
    const a = fleetBroker(store, clock, up, { window: WINDOW_S, recheck: 5, floor: 2, issuer });
    const first = (await a.getToken('sandbox', { deadline: Deadline.in(clock, 30_000) })).record
      .accessToken;
    await clock.advance(500);
    expect(await a.invalidate('sandbox', first)).toEqual({
      invalidated: false,
      deferredSeconds: 2,
    });
    for (let i = 0; i < 120; i += 1) {
      await a.getToken('sandbox', { deadline: Deadline.in(clock, 30_000) }).catch(() => undefined);
      await clock.advance(250);
    }
    await a.idle();
    expect(calls).toBeGreaterThanOrEqual(3);
    expect(up.n).toBe(2);
  });
});

describe('I4: a caller’s word is bounded, in one container', () => {
  useFakeTime();

  it('I4: a report about a token younger than the floor does not drop it but is kept, and the token it then issues is not replaced on a report for a window', async () => {
    const { broker, issuer, store } = setup({ invalidateFloor: 10 });
    const first = await broker.getToken('sandbox', { deadline: deadline() });
    vi.advanceTimersByTime(5_000);
    expect(await broker.invalidate('sandbox', first.record.accessToken)).toEqual({
      invalidated: false,
      deferredSeconds: 5,
    });
    expect(store.token('sandbox')?.accessToken).toBe(first.record.accessToken);
    expect((await broker.getToken('sandbox', { deadline: deadline() })).record.accessToken).toBe(
      first.record.accessToken,
    );
    vi.advanceTimersByTime(5_001);
    expect(await broker.invalidate('sandbox', first.record.accessToken)).toEqual({
      invalidated: true,
    });
    const next = await broker.getToken('sandbox', { deadline: deadline() });
    expect(next.record).toMatchObject({ accessToken: 'token-2', forced: true });
    // Issued on a caller's word: reports of it wait a refresh window (600 s here).
    expect(await broker.invalidate('sandbox', next.record.accessToken)).toEqual({
      invalidated: false,
      deferredSeconds: 600,
    });
    expect(issuer.issued).toBe(2);
  });
});
