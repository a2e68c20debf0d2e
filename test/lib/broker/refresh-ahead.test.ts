/**
 * Refresh ahead of expiry: on demand (XFetch, aimed inside the refresh window, in the background
 * of the request that wins the lease) and by the warm-up, with one window everywhere; and what
 * the cut-over costs readers (store reads, waits). That the countdown keeps the replaced token
 * from being served revoked is I2: guarantees/no-revoked-token.test.ts.
 *
 * Issuance counts are exact: each issuance beyond one per lifetime revokes a token (I1).
 */
import { describe, expect, it, vi } from 'vitest';
import { tokenDigest } from '../../../lib/broker/index.js';
import { issueWith } from '../../../lib/broker/issuance/issue-flow.js';
import { Deadline } from '../../../lib/clock.js';
import { UpstreamUnavailableError } from '../../../lib/errors.js';
import type { TokenIssuer } from '../../../lib/ports.js';
import { sealCode } from '../../../lib/upstream/authorization-code.js';
import {
  asks,
  connection,
  FakeIssuer,
  InMemoryTokenStore,
  ManualClock,
} from '../../support/fakes.js';
import {
  fleetBroker,
  issuerFor,
  sandbox,
  seed,
  Upstream,
  wrap,
} from '../../support/fleet-model.js';
import { Sim } from '../../support/sim.js';
import {
  deadline,
  issuance,
  setup,
  simAsk,
  simBroker,
  storeToken,
  T0,
  useFakeTime,
} from './setup.js';

describe('Refresh ahead of expiry: on demand', () => {
  useFakeTime();

  it('does not refresh before the middle of the window without XFetch earliness', async () => {
    const { broker, store, issuer } = setup({ window: 600 });
    storeToken(store, 601_000);
    expect(
      (await broker.getToken('sandbox', { deadline: deadline(5_000) })).record.accessToken,
    ).toBe('current');
    expect(issuer.issued).toBe(0);
  });

  it('refreshes once inside the window, in the background of the request that wins the lease', async () => {
    const { broker, store, issuer } = setup({ window: 600 });
    storeToken(store, 299_000);
    // That caller is answered at once, with the current token: the countdown keeps it safe.
    const served = await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'current' } });
    expect(Date.now()).toBe(T0);
    expect(store.items.get('sandbox')?.lease?.countdown).toBe(21);
    await broker.idle();
    expect(issuer.issued).toBe(1);
    const next = await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(next).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
    expect(issuer.issued).toBe(1);
  });

  it('neither counts down nor makes callers wait when the upstream does not revoke on re-issue', async () => {
    const { broker, store, issuer } = setup({
      window: 600,
      connections: [connection({ revokesOnReissue: false })],
      sleep: async () => {
        throw new Error('nothing should wait');
      },
    });
    storeToken(store, 299_000);
    store.items.set('sandbox', {
      ...store.items.get('sandbox'),
      lease: {
        holder: 'refresher:1',
        version: 'v-refresher:1',
        expiresAt: T0 + 10_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    // A refresh elsewhere is in progress: the current token is served at once.
    expect(
      (await broker.getToken('sandbox', { deadline: deadline(5_000) })).record.accessToken,
    ).toBe('current');
    await broker.idle(); // this container's try lost to it
    store.items.set('sandbox', { token: store.token('sandbox') });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    await broker.idle();
    expect(issuer.issued).toBe(1);
    expect(Date.now()).toBe(T0); // no countdown, no wait
    const refreshed = await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(refreshed.record.accessToken).toBe('token-1');
  });

  it('budgets a refresh after the response from the invocation’s time left, and starts none that cannot fit it (issue 24)', async () => {
    // Its own budget: 21 steps of 300 ms, two upstream timeouts of 2 s and the write, 10.6 s;
    // the invocation ends in 3 s, less than the countdown alone (5.65 s at the least).
    const short = setup({ window: 600 });
    storeToken(short.store, 299_000);
    const served = await short.broker.getToken('sandbox', {
      deadline: deadline(2_500),
      workUntil: deadline(3_000),
    });
    expect(served.record.accessToken).toBe('current');
    await short.broker.idle();
    expect(short.issuer.issued).toBe(0);
    expect(short.store.items.get('sandbox')?.lease).toBeUndefined();
    expect(short.metrics.get('RefreshFailures') ?? 0).toBe(0);

    // With 8 s left it runs, and is over by then.
    const { broker, store, issuer } = setup({ window: 600 });
    storeToken(store, 299_000);
    const start = Date.now();
    await broker.getToken('sandbox', { deadline: deadline(7_500), workUntil: deadline(8_000) });
    await broker.idle();
    expect(issuer.issued).toBe(1);
    expect(Date.now()).toBeLessThanOrEqual(start + 8_000);
  });

  it('a readiness check inside the window starts no refresh that cannot end by its deadline (review of issue 24)', async () => {
    // A deploy gate's ready() with 3 s left: the same bound as getToken's workUntil.
    const { broker, store, issuer, metrics } = setup({
      window: 600,
      connections: [connection({ name: 'sandbox' })],
    });
    storeToken(store, 299_000);
    const report = await broker.ready(deadline(3_000));
    expect(report.ready).toBe(true);
    await broker.idle();
    expect(issuer.issued).toBe(0);
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    expect(metrics.get('RefreshFailures') ?? 0).toBe(0);
  });

  it('keeps serving the current token when the refresh fails, and counts the failure', async () => {
    const { broker, store, issuer, metrics, logger } = setup({ window: 600 });
    storeToken(store, 300_000);
    issuer.failWith = new UpstreamUnavailableError(
      'Open API authorize request failed: ECONNREFUSED',
      { retryAfterSeconds: 1 },
    );
    const served = await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(served.record.accessToken).toBe('current');
    await broker.idle();
    expect(metrics.get('RefreshFailures')).toBe(1);
    expect(
      logger.lines.some(
        (l) => l.level === 'warn' && l.message.startsWith('Refresh ahead of expiry failed'),
      ),
    ).toBe(true);
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    expect(
      (await broker.getToken('sandbox', { deadline: deadline(5_000) })).record.accessToken,
    ).toBe('current');
  });

  it('tries earlier with XFetch as expiry nears, with a probability that grows towards the window', async () => {
    // δ (last issuance) 0.3 s by default; earliness = -δ·ln(1 - u), aimed a countdown (21
    // steps, 5.25 s) before the middle of the window. At 1 s before that aim, u must exceed
    // 1 - e^(-1/0.3) ≈ 0.9643 for a request to try.
    const tries = async (u: number, remainingMs: number) => {
      const { broker, store, issuer } = setup({ window: 600, random: () => u });
      storeToken(store, remainingMs);
      await broker.getToken('sandbox', { deadline: deadline(5_000) });
      await broker.idle();
      return issuer.issued;
    };
    expect(await tries(0.5, 306_250)).toBe(0);
    expect(await tries(0.95, 306_250)).toBe(0);
    expect(await tries(0.97, 306_250)).toBe(1);
  });

  it('never tries before the window starts, however the draw falls', async () => {
    const { broker, store, issuer } = setup({ window: 600, random: () => 1 - 1e-15 });
    storeToken(store, 601_000);
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    expect(issuer.issued).toBe(0);
  });

  it('reads the store once per re-check inside the window too, and learns of a refresh elsewhere from its countdown', async () => {
    const { broker, store, issuer } = setup({ window: 600, recheck: 5 });
    storeToken(store, 400_000); // inside the window, before its middle: this one does not try
    const served = () =>
      broker.getToken('sandbox', { deadline: deadline(5_000) }).then((s) => s.record.accessToken);
    expect(await served()).toBe('current');
    for (let i = 0; i < 49; i += 1) {
      vi.advanceTimersByTime(100);
      expect(await served()).toBe('current');
    }
    expect(store.calls.read).toBeLessThanOrEqual(1); // 4.9 s of requests, one read at most
    // Another container takes the lease: its countdown announces 5 steps (1 s, less 100 ms).
    store.items.set('sandbox', {
      ...store.items.get('sandbox'),
      lease: {
        holder: 'other:1',
        version: 'v-other:1',
        expiresAt: Date.now() + 3_000,
        durationMs: 3_000,
        countdown: 5,
      },
    });
    vi.advanceTimersByTime(100);
    expect(await served()).toBe('current'); // read again at 5 s: still served
    // At least the re-check's read: it is how this container learns of the countdown (I2). At
    // most that one: efficiency.
    expect(store.calls.read).toBeGreaterThanOrEqual(2);
    expect(store.calls.read).toBeLessThanOrEqual(2);
    vi.advanceTimersByTime(850);
    expect(await served()).toBe('current'); // from memory, inside what was announced
    expect(store.calls.read).toBeLessThanOrEqual(2);
    // The countdown it read has run out: no longer served from memory; the store says the
    // replacement is out (countdown 0), and its token comes.
    store.items.set('sandbox', {
      ...store.items.get('sandbox'),
      lease: {
        holder: 'other:1',
        version: 'v-other:1',
        expiresAt: Date.now() + 5_000,
        durationMs: 5_000,
        countdown: 0,
      },
    });
    vi.advanceTimersByTime(100);
    const waiting = served();
    store.items.set('sandbox', {
      token: {
        connection: 'sandbox',
        accessToken: 'refreshed',
        tokenDigest: tokenDigest('refreshed'),
        issuedAt: Date.now(),
        expiresAt: Date.now() + 3600_000,
      },
    });
    expect(await waiting).toBe('refreshed');
    expect(issuer.issued).toBe(0);
  });

  it('clamps the window to half the token lifetime, so a short-lived token is not refreshed on every request', async () => {
    const issuer = new FakeIssuer();
    issuer.expiresIn = 300; // shorter than the 600 s window
    const { broker } = setup({ window: 600, issuer });
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    vi.advanceTimersByTime(100_000); // 200 s left: outside the clamped 150 s window
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    await broker.idle();
    expect(issuer.issued).toBe(1);
    vi.advanceTimersByTime(130_000); // 70 s left: past the middle of that window
    await broker.getToken('sandbox', { deadline: deadline(5_000) });
    await broker.idle();
    expect(issuer.issued).toBe(2);
  });
});

describe('Refresh ahead of expiry: on a container’s monotonic clock', () => {
  it('judges the invocation’s end on the monotonic clock: a wall clock stepped back during the request stretches no refresh (issue 27)', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 3_320_000, 3_600_000); // 280 s left: past the window's middle
    // The request's read: the wall clock is stepped back 10 s meanwhile (NTP, an operator).
    let stepped = false;
    const stepping = wrap(store, {
      read: async (name) => {
        if (!stepped) clock.step(-10_000);
        stepped = true;
        return store.read(name);
      },
    });
    const broker = fleetBroker(stepping, clock, up, { window: 600 });
    // 3 s left, less than the countdown alone: as an epoch read after the step it was 13 s.
    const workUntil = broker.deadlineIn(3_000);
    const served = await broker.getToken('sandbox', { deadline: workUntil, workUntil });
    expect(served.source).toBe('dynamodb');
    await clock.advance(0);
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    await broker.idle();
    expect(up.issuedAt).toHaveLength(1); // the seeded token's only
  });
});

describe('Refresh ahead of expiry: by the warm-up', () => {
  useFakeTime();

  it('issues where a token is missing or inside the refresh window, and leaves fresh ones alone', async () => {
    const { broker, issuer, store } = setup({ window: 600 });
    store.setToken({
      connection: 'legacy',
      accessToken: 'still-fresh',
      tokenDigest: tokenDigest('still-fresh'),
      issuedAt: T0,
      expiresAt: T0 + 3600_000,
    });
    const first = await broker.warmUp(deadline());
    expect(first.connections).toEqual({
      sandbox: {
        status: 'issued',
        expiresAt: new Date(T0 + 3600_000).toISOString(),
        expiresIn: 3600,
      },
      legacy: {
        status: 'fresh',
        expiresAt: new Date(T0 + 3600_000).toISOString(),
        expiresIn: 3600,
      },
    });
    expect(issuer.issued).toBe(1);
    vi.advanceTimersByTime(3000_000); // both now have 600 s left: inside the window
    // Each replacement of a valid token counts down first (21 steps of 250 ms, longer than the
    // 5 s re-check); the fake sleeps of both add up here.
    const second = await broker.warmUp(deadline(30_000));
    expect(second.issued).toBe(2);
    expect(second.connections.sandbox?.status).toBe('issued');
    const third = await broker.warmUp(deadline());
    expect(third.issued).toBe(0);
  });

  it('reports a failing connection without stopping the others', async () => {
    const { broker, issuer } = setup();
    const authorize = issuer.authorize.bind(issuer);
    issuer.authorize = async (conn, creds, options) => {
      if (conn.name === 'legacy')
        throw new UpstreamUnavailableError('Open API authorize request failed: ECONNREFUSED', {
          retryAfterSeconds: 1,
        });
      return authorize(conn, creds, options);
    };
    const report = await broker.warmUp(deadline());
    expect(report.failed).toBe(1);
    expect(report.connections.sandbox?.status).toBe('issued');
    expect(report.connections.legacy).toEqual({
      status: 'failed',
      error: {
        code: 'UPSTREAM_UNAVAILABLE',
        message: 'Open API authorize request failed: ECONNREFUSED',
      },
    });
  });

  it('uses the window clamped to half the lifetime, like every other path: tokens shorter than the configured window are issued once, not forever', async () => {
    // Waits are timers here: both connections count down at once, in the same fake time.
    const { broker, issuer } = setup({
      window: 600,
      sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
    });
    issuer.expiresIn = 300;
    expect((await broker.warmUp(deadline())).connections.sandbox).toMatchObject({
      status: 'issued',
    });
    // 300 s tokens have a 150 s window: 100 s later the token is still outside it.
    vi.advanceTimersByTime(100_000);
    expect((await broker.warmUp(deadline())).connections.sandbox).toMatchObject({
      status: 'fresh',
    });
    vi.advanceTimersByTime(60_000); // now inside the window (140 s left)
    const started = Date.now();
    const warming = broker.warmUp(deadline());
    await vi.advanceTimersByTimeAsync(6_000); // the countdown (21 steps of 250 ms) and the POST
    expect((await warming).connections.sandbox).toMatchObject({ status: 'issued' });
    expect(issuer.issued).toBe(4); // two rounds of issuance for the two connections
    expect(Date.now() - started).toBe(6_000);
  });
});

describe('Refresh ahead of expiry: what the cut-over costs readers', () => {
  // Found as F6 by the review of the countdown (ffc31f6): readers read at every request.
  it('a lapsed lease left at a low countdown on a token outside its window is let go by the first reader that sees it stale: readers are then back to one read per re-check', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    seed(store, up, T0 - 300_000, 1_200_000); // 900 s left, the window is 60 s
    // H: a caller needs 1000 s of validity, which forces a replacement (countdown 21). At its
    // last countdown step H's connection to DynamoDB stalls: the renewal times out, so does
    // the release. Its lease stays in the table at countdown 2, nobody renewing it.
    let partitioned = false;
    const cut = async () => {
      partitioned = true;
      throw new Error('DynamoDB request timed out');
    };
    const hStore = wrap(store, {
      read: (n) => (partitioned ? cut() : store.read(n)),
      renewLease: (n, l, t) =>
        t.countdown <= 1 || partitioned ? cut() : store.renewLease(n, l, t),
      releaseLease: (n, l) => (partitioned ? cut() : store.releaseLease(n, l)),
    });
    const clockH = sim.clock('H');
    const h = issuance(hStore, clockH, (c, o) =>
      issueWith(issuerFor(up, clockH), c, {} as never, o),
    );
    const forced = await sim.run(h.obtain(sandbox, asks(1_000_000, Deadline.in(clockH, 9_500))));
    expect(forced.error).toBeDefined();
    expect(store.items.get('sandbox')?.lease?.countdown).toBe(2);

    // C: an ordinary container serving a caller every 100 ms for 30 s.
    let reads = 0;
    const cStore = wrap(store, {
      read: (n) => {
        reads += 1;
        return store.read(n);
      },
    });
    const c = simBroker(cStore, sim.clock('C'), up);
    let maxWait = 0;
    let readsWhenLetGo: number | undefined;
    const start = sim.now();
    const end = start + 30_000;
    while (sim.now() < end) {
      const served = await simAsk(sim, c, up, { step: 5 });
      expect(served.revoked).toBe(false);
      maxWait = Math.max(maxWait, served.waited);
      if (readsWhenLetGo === undefined && !store.items.get('sandbox')?.lease) {
        readsWhenLetGo = reads;
        // Seen unchanged for its 3 s on C's clock, then let go (not before: its holder could be
        // alive and slow).
        expect(sim.now() - start).toBeLessThan(4_000);
      }
      await sim.advance(100);
    }
    // The lapsed lease is let go by the first reader that sees it stale...
    expect(readsWhenLetGo, 'the lapsed lease is still there').toBeDefined();
    // ...after which that container reads once per 5 s re-check (27 s left: at most 6 reads).
    expect(reads - (readsWhenLetGo ?? 0)).toBeLessThanOrEqual(6);
    // A caller waits once, for the cut-over the countdown announced (a step and a round trip).
    expect(maxWait, 'longest caller wait (ms)').toBeLessThanOrEqual(500);
  });

  // The late refresh of the three-region bench (2026-11-26): a holder killed at countdown 3 of 4
  // late in the window; the readers let its lease go and a new holder counted 4 afresh, and the
  // successor came 528 ms after the token expired.
  it('a stale lease left mid-countdown on a token inside its window is taken over by a caller the token does not satisfy, and its countdown goes on from the value seen, not let go and counted afresh (I1, I2)', async () => {
    const sim = new Sim(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const old = seed(store, up, T0 - 1_180_000, 1_200_000); // 20 s left of the 60 s window
    // H takes the lease (countdown 21) and stops at countdown 11: its steps and release stall.
    let partitioned = false;
    const cut = async () => {
      partitioned = true;
      throw new Error('DynamoDB request timed out');
    };
    const hStore = wrap(store, {
      read: (n) => (partitioned ? cut() : store.read(n)),
      renewLease: (n, l, t) =>
        t.countdown <= 10 || partitioned ? cut() : store.renewLease(n, l, t),
      releaseLease: (n, l) => (partitioned ? cut() : store.releaseLease(n, l)),
    });
    const clockH = sim.clock('H');
    const h = issuance(hStore, clockH, (c, o) =>
      issueWith(issuerFor(up, clockH), c, {} as never, o),
    );
    const stopped = await sim.run(h.obtain(sandbox, asks(55_000, Deadline.in(clockH, 9_500))));
    expect(stopped.error).toBeDefined();
    const stale = store.items.get('sandbox')?.lease;
    expect(stale?.countdown).toBe(11);

    // C serves a caller every 100 ms who needs 25 s, more than the token has left (as the
    // warm-up needs the window): every lease it writes, and when the successor is issued.
    const leases: { countdown: number; takeOver: string | undefined }[] = [];
    let releases = 0;
    const cStore = wrap(store, {
      acquireLease: (n, r) => {
        leases.push({ countdown: r.countdown, takeOver: r.takeOver?.version });
        return store.acquireLease(n, r);
      },
      releaseLease: (n, l) => {
        releases += 1;
        return store.releaseLease(n, l);
      },
    });
    const c = simBroker(cStore, sim.clock('C'), up);
    const start = sim.now();
    while (sim.now() < start + 10_000) {
      const served = await simAsk(sim, c, up, { step: 5, minValiditySeconds: 25 });
      expect(served.revoked).toBe(false);
      await sim.advance(100);
    }
    // One successor (I1), under one lease that took H's version over and went on from 11; no
    // let-go (a release), no countdown of 21 afresh.
    expect(up.n).toBe(2);
    expect(leases).toEqual([{ countdown: 11, takeOver: stale?.version }]);
    expect(releases).toBe(0);
    // Issued a counting lease (850 ms) and 11 steps after C first saw that version, give or take
    // its reads: well before the token expired, and before 21 steps could have run.
    const issued = up.issuedAt.at(-1) ?? 0;
    expect(issued - start).toBeLessThan(850 + 11 * 250 + 1_000);
    expect(issued).toBeLessThan(old.expiresAt);
  });

  // Found as F7 by the review of the countdown (ffc31f6): callers slept past the countdown.
  it('a caller at a cut-over waits less than a second for the successor, even in a container that once measured a slow issuance', async () => {
    const sim = new Sim(T0);
    sim.draw = 0; // XFetch without earliness: who refreshes when is fixed by the window only
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const clockC = sim.clock('C');
    // C issued the current token itself, slowly: the authorize step waited out a 503's
    // Retry-After (8 s in all). C's measured issuance (XFetch's delta) is now 8 s.
    let slow = true;
    const cIssuer: TokenIssuer = {
      authorize: async () => {
        if (slow) await clockC.sleep(8_000);
        return sealCode('code');
      },
      requestToken: async () => up.post(clockC.now()),
    };
    const c = simBroker(store, clockC, up, { issuer: cIssuer });
    const first = await simAsk(sim, c, up, { step: 50 });
    expect(first.source).toBe('upstream');
    slow = false;
    const expiresAt = store.token('sandbox')?.expiresAt ?? 0;
    await sim.advance(expiresAt - 40_000 - sim.now()); // 40 s left in the 60 s window
    await simAsk(sim, c, up); // C reads (no lease yet), not due yet
    const a = simBroker(store, sim.clock('A'), up);
    await sim.advance(5_000);
    await simAsk(sim, a, up); // 35 s left: A is due and starts its refresh (countdown 21)
    await sim.advance(200);
    const seen = await simAsk(sim, c, up); // C's re-check: it reads the countdown
    expect(seen.token).toBe('tok-1');
    expect(store.items.get('sandbox')?.lease?.countdown).toBeGreaterThan(1);
    await sim.advance(4_960); // just past what C's read proved
    const caller = await simAsk(sim, c, up, { step: 10 });
    expect(caller.revoked).toBe(false);
    expect(caller.token).toBe('tok-2');
    const written = up.issuedAt[1] ?? 0;
    expect(
      caller.waited,
      `waited ${caller.waited} ms; tok-2 existed ${sim.now() - written} ms before the answer`,
    ).toBeLessThan(1_000);
  });
});
