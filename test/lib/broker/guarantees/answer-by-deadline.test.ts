/**
 * I3, an answer by the deadline (docs/protocol.md, "Invariants, assumptions and states"): every
 * caller is answered before its deadline, with what kept it. Held by every store call cut to
 * the deadline, waits that wake with a read's time left, and no lease taken without time for its
 * POST.
 *
 * Issuance counts are exact: each issuance beyond one per lifetime revokes a token (I1).
 */
import { describe, expect, it, vi } from 'vitest';
import { issueWith } from '../../../../lib/broker/issuance/issue-flow.js';
import { Deadline } from '../../../../lib/clock.js';
import { UpstreamRejectedError, UpstreamUnavailableError } from '../../../../lib/errors.js';
import type { ClientCredentials, SecretSource, TokenIssuer } from '../../../../lib/ports.js';
import { sealCode } from '../../../../lib/upstream/authorization-code.js';
import { caught, unexpected } from '../../../support/errors.js';
import { InMemoryTokenStore, ManualClock } from '../../../support/fakes.js';
import {
  fleetBroker,
  issuerFor,
  sandbox,
  seed,
  Upstream,
  wrap,
} from '../../../support/fleet-model.js';
import { Sim } from '../../../support/sim.js';
import { deadline, issuance, setup, simAsk, simBroker, T0, useFakeTime } from '../setup.js';

describe('I3: an answer by the deadline', () => {
  describe('in one container', () => {
    useFakeTime();

    it('I3: a caller who joined a slow issuance in its container is answered at its own deadline, and the issuance goes on', async () => {
      const { broker, issuer } = setup();
      vi.useRealTimers();
      issuer.delayMs = 300;
      const leader = broker.getToken('sandbox', { deadline: deadline(5000) });
      const follower = broker.getToken('sandbox', { deadline: deadline(50) });
      await expect(follower).rejects.toBeInstanceOf(UpstreamUnavailableError);
      await expect(leader).resolves.toMatchObject({ source: 'upstream' });
    });

    it('I3: a caller waiting for another container’s lease is answered 503 by its own deadline rather than wait past it', async () => {
      const store = new InMemoryTokenStore();
      store.items.set('sandbox', {
        lease: {
          holder: 'slow:1',
          version: 'v-slow:1',
          expiresAt: T0 + 60_000,
          durationMs: 3_000,
          countdown: 0,
        },
      });
      const { broker, issuer } = setup({
        store,
        random: () => 0.99,
        sleep: async (ms) => {
          await vi.advanceTimersByTimeAsync(ms);
        },
      });
      const error = await broker
        .getToken('sandbox', { deadline: deadline(2_000) })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(UpstreamUnavailableError);
      expect(error.message).toBe('Timed out waiting for another container to issue the token');
      expect(issuer.issued).toBe(0);
    });

    it('I3: a flow that fails for sure frees its lease at once, so the next caller need not wait for it to lapse', async () => {
      const { broker, issuer, store } = setup();
      issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      await expect(
        broker.getToken('sandbox', { deadline: deadline(5_000) }),
      ).rejects.toBeInstanceOf(UpstreamUnavailableError);
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
    });
  });

  describe('interleavings of the fleet', () => {
    // Found as R3 by the review of issue 18 (0d5dd1e).
    it('I3: a caller at a cut-over whose deadline comes before the expected successor reads while there is time, and is served the successor, not STORE_UNAVAILABLE', async () => {
      const sim = new Sim(T0);
      sim.draw = 0;
      const store = new InMemoryTokenStore();
      const up = new Upstream();
      const clockC = sim.clock('C');
      // C's reads take 10 ms, as a real store's round trip does.
      const slowReads = wrap(store, {
        read: async (name) => {
          const state = await store.read(name);
          await clockC.sleep(10);
          return state;
        },
      });
      const c = simBroker(slowReads, clockC, up);
      await simAsk(sim, c, up, { step: 50 });
      const expiresAt = store.token('sandbox')?.expiresAt ?? 0;
      await sim.advance(expiresAt - 40_000 - sim.now());
      await simAsk(sim, c, up);
      const a = simBroker(store, sim.clock('A'), up);
      await sim.advance(5_000);
      await simAsk(sim, a, up); // A starts its refresh (countdown 21)
      await sim.advance(200);
      const seen = await simAsk(sim, c, up); // C reads the countdown
      expect(seen.token).toBe('tok-1');
      await sim.advance(4_960); // just past what C's read proved: C waits for the cut-over
      // Its deadline comes after the successor is written but before the wait would end.
      const caller = await simAsk(sim, c, up, { step: 1, budget: 200 });
      expect(up.n).toBe(2);
      // Before: it slept until its deadline and sent its read with 0 ms left (STORE_UNAVAILABLE).
      expect(caller.error).toBeUndefined();
      expect(caller.token).toBe('tok-2');
      expect(caller.late).toBeLessThanOrEqual(0);
    });

    // Found as F8 by the review of the countdown (ffc31f6): the re-read ignored the deadline.
    it('I3: a credential-rotation retry re-reads the secret within the caller’s deadline, so the caller is answered by it', async () => {
      const sim = new Sim(T0);
      const store = new InMemoryTokenStore();
      const up = new Upstream();
      const clock = sim.clock('C');
      let calls = 0;
      const issuer: TokenIssuer = {
        authorize: async (_c, _cr, o) => {
          calls += 1;
          if (calls === 1) {
            await clock.sleep(4_000); // a slow authorize
          } else if (o.deadline.passed()) {
            throw new UpstreamUnavailableError(
              'No time left to call the Open API authorize endpoint',
              { retryAfterSeconds: 1 },
            );
          }
          return sealCode('code');
        },
        requestToken: async () => {
          if (calls === 1) {
            await clock.sleep(5_000); // the POST takes its whole budget, then: 401
            throw new UpstreamRejectedError(
              'Open API rejected the access-token request: HTTP 401',
              { upstreamStatus: 401 },
            );
          }
          return up.post(clock.now());
        },
      };
      // The secret was rotated: a forced read goes to Secrets Manager (2 attempts of 1 s: the
      // adapter's bounded client config), not bounded by the caller's deadline.
      const secrets: SecretSource = {
        getCredentials: async (_id, opts) => {
          if (opts?.forceFetch) await clock.sleep(2_000);
          return opts?.forceFetch
            ? ({ clientId: 'client-1', clientSecret: 'rotated' } as ClientCredentials)
            : { clientId: 'client-1', clientSecret: 'old' };
        },
      };
      const c = simBroker(store, clock, up, { issuer, secrets });
      const outcome = await simAsk(sim, c, up, { step: 10 });
      expect(outcome.error ?? outcome.token).toBeDefined();
      expect(outcome.late, `answered ${outcome.late} ms after the deadline`).toBeLessThanOrEqual(0);
    });

    // Found by the adversarial review of the lease protocol (23ea480).
    it('I3: a holder whose token request had an unknown outcome answers by its deadline even when DynamoDB takes 600 ms', async () => {
      const clock = new ManualClock(T0);
      const store = new InMemoryTokenStore();
      const late = () => new Promise<void>((r) => clock.after(600, r));
      const slowStore = wrap(store, {
        deleteIfMatches: async (n, d, o) => {
          await late();
          return store.deleteIfMatches(n, d, o);
        },
        // Slow from the confirmation on (the countdown's own writes are the subject elsewhere).
        renewLease: async (n, l, t) => {
          if (t.countdown === 0) await late();
          return store.renewLease(n, l, t);
        },
        releaseLease: async (n, l) => {
          await late();
          return store.releaseLease(n, l);
        },
      });
      const up = new Upstream();
      const t0 = seed(store, up, T0 - 1_170_000, 1_200_000);
      const deadline = T0 + 8000;
      const a = issuance(slowStore, clock, async (_c, o) => {
        await o.fence?.();
        await clock.sleep(o.deadline.leftMs());
        throw new UpstreamUnavailableError('access-token timed out', {
          retryAfterSeconds: 1,
          outcomeUnknown: true,
        });
      });
      let at = 0;
      const p = a.refresh(sandbox, t0, Deadline.in(clock, 8000)).catch(() => {
        at = clock.now();
      });
      while (!at) await clock.advance(50);
      await p;
      expect(at).toBeLessThanOrEqual(deadline);
    });

    it('I3: an invalidate report is answered by its deadline (STORE_UNAVAILABLE) when the store stalls', async () => {
      const clock = new ManualClock(T0);
      const store = new InMemoryTokenStore();
      const up = new Upstream();
      const stalled = wrap(store, { markReported: () => new Promise<boolean>(() => undefined) });
      const a = fleetBroker(stalled, clock, up, { window: 60, floor: 2 });
      const token = (await a.getToken('sandbox', { deadline: Deadline.in(clock, 8_000) })).record
        .accessToken;
      const report = a
        .invalidate('sandbox', token, undefined, Deadline.in(clock, 500))
        .then(unexpected, (error: unknown) => ({ code: caught(error).code, at: clock.now() }));
      await clock.advance(1_000);
      expect(await report).toEqual({ code: 'STORE_UNAVAILABLE', at: T0 + 500 });
    });
  });
});

describe('I3: readiness', () => {
  useFakeTime();

  it('I3: a Secrets Manager that does not answer fails the readiness check at its deadline, not later', async () => {
    const { broker, secrets } = setup();
    secrets.getCredentials = () => new Promise(() => undefined); // never answers
    const checked = broker.ready(deadline(1_000));
    await vi.advanceTimersByTimeAsync(1_000);
    const report = await checked;
    expect(report.ready).toBe(false);
    expect(Object.values(report.connections)[0]).toMatchObject({
      ready: false,
      secret: { status: 'failed', error: { code: 'SECRET_UNAVAILABLE' } },
    });
  });
});

describe('I3: a fence whose answer is lost', () => {
  // Seen in the chaos scenario dynamodb-answer-lost: the confirmation landed, its answer was
  // lost, the holder gave up (nothing sent), and its release named the version before the
  // confirmation: the countdown-0 lease stood for its whole duration, the token suspect
  // fleet-wide, and callers got 503s for up to twice the upstream timeout.
  it('I3: the holder that gave up releases the confirmation it sent, so callers are not held', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // in its window
    const lossy = wrap(store, {
      renewLease: async (n, l, t) => {
        const landed = await store.renewLease(n, l, t);
        if (t.countdown === 0 && landed) throw new Error('socket hang up'); // answer lost
        return landed;
      },
    });
    const holder = issuance(lossy, clock, (c, o) =>
      issueWith(issuerFor(up, clock), c, {} as never, o),
    );
    const refreshed = holder.refresh(sandbox, t0, Deadline.in(clock, 8_000));
    for (let i = 0; i < 100 && store.items.get('sandbox')?.lease?.countdown !== 0; i += 1) {
      await clock.advance(50);
    }
    await clock.advance(50);
    await refreshed.catch(() => undefined);
    expect(up.issuedAt).toHaveLength(1); // the seed only: nothing was sent
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
  });
});
