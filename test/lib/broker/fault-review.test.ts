/**
 * Regression tests from an adversarial review of the lease protocol: each interleaving broke
 * the fleet guarantee (a revoked token served, or a caller answered after its deadline) before
 * its fix. The upstream model revokes every earlier token on each issuance.
 */
import { describe, expect, it } from 'vitest';
import { issueWith } from '../../../lib/broker/issue-flow.js';
import { LeasedIssuance } from '../../../lib/broker/leased-issuance.js';
import { servableFromMemory } from '../../../lib/broker/refresh-policy.js';
import { TokenMemory } from '../../../lib/broker/token-memory.js';
import { UpstreamUnavailableError } from '../../../lib/errors.js';
import type { TokenStore } from '../../../lib/ports.js';
import {
  CountingMetrics,
  captureLogger,
  confirmedAt,
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

const T0 = 1_795_262_400_000;
const broker = fleetBroker;

describe('Fleet guarantee: interleavings found by review', () => {
  it('a 600 ms read does not hand out a token revoked by a refresh whose countdown began after the read was sent', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // 30 s left: inside the 60 s window
    const mk = (s: TokenStore) =>
      new LeasedIssuance({
        store: s,
        clock,
        issue: (c, o) => issueWith(issuerFor(up, clock), c, {} as never, o),
        memory: new TokenMemory(),
        settings: { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, upstreamTimeoutMs: 5_000 },
        logger: captureLogger(),
        metrics: new CountingMetrics(),
      });
    const slowStore = wrap(store, {
      read: async (n) => {
        const snap = await store.read(n);
        await new Promise<void>((r) => clock.after(600, r));
        return snap;
      },
    });
    const slow = mk(slowStore);
    const fast = mk(store);
    const pending = slow.obtain(sandbox, 1000, T0 + 8000, false);
    await clock.advance(10);
    // The slow container's answer is judged when it comes (the ledger's rule), not later.
    let served: { token: string; revoked: boolean } | undefined;
    void pending.then((result) => {
      const token = result.record.accessToken;
      served = { token, revoked: up.revoked.has(token) };
    });
    await fast.refresh(sandbox, t0, T0 + 8000); // lease, countdown, POST: t0 revoked
    expect(up.revoked.has(t0.accessToken)).toBe(true);
    // The slow container asks again (600 ms a read) until it has a token it may serve.
    for (let i = 0; i < 100 && !served; i += 1) await clock.advance(100);
    if (!served) throw new Error('the slow container never answered');
    expect(served.revoked).toBe(false);
  });
  it('a refresher 2.5 s ahead at the window’s edge finds a reader that does not see the window yet re-checking fast', async () => {
    const ahead = new ManualClock(T0 + 2_500);
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    // Enters the 60 s window at T0 + 1000 (true time); the ahead clock sees it in the window already.
    const t0 = seed(store, up, T0 + 61_000 - 1_200_000, 1_200_000);
    const reader = broker(store, clock, up);
    expect((await reader.getToken('sandbox', { deadline: T0 + 8000 })).record.accessToken).toBe(
      t0.accessToken,
    );
    // Warm-up (or a refresh) on the container whose clock is 2.5 s ahead.
    const warm = broker(store, ahead, up);
    await ahead.advance(100);
    await clock.advance(100);
    const started = ahead.now();
    const issuedBefore = up.n;
    const report = await warm.warmUp(ahead.now() + 8000);
    expect(report.issued).toBe(1);
    expect(up.n).toBe(issuedBefore + 1);
    expect(up.revoked.has(t0.accessToken)).toBe(true);
    // The reader, whose clock does not see the window yet, re-checks fast all the same (from
    // 10 s before the window), so the refresher's short drain covers it.
    const drained = ahead.now() - started;
    await clock.advance(drained + 450); // the reader lives through the same time
    const served = await reader.getToken('sandbox', { deadline: clock.now() + 8000 });
    expect(up.revoked.has(served.record.accessToken)).toBe(false);
  });
  it('a definite failure after the lease was lost (paused) does not re-confirm the replaced token', async () => {
    const clockA = new ManualClock(T0);
    const clockB = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // in window
    let fail: ((e: Error) => void) | undefined;
    const memA = new TokenMemory();
    memA.set(confirmedAt(t0, T0));
    const a = new LeasedIssuance({
      store,
      clock: clockA,
      memory: memA,
      issue: () =>
        new Promise((_, rej) => {
          fail = rej;
        }), // authorize in flight
      settings: { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, upstreamTimeoutMs: 5_000 },
      logger: captureLogger(),
      metrics: new CountingMetrics(),
    });
    const b = new LeasedIssuance({
      store,
      clock: clockB,
      memory: new TokenMemory(),
      issue: (c, o) => issueWith(issuerFor(up, clockB), c, {} as never, o),
      settings: { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, upstreamTimeoutMs: 5_000 },
      logger: captureLogger(),
      metrics: new CountingMetrics(),
    });
    const pending = a.refresh(sandbox, t0, T0 + 8000).catch((e) => e);
    await clockA.advance(400); // counting down, authorize sent; then A is SIGSTOPped
    // B needs more than t0 has left: it waits out A's lease, takes it over, counts down, POSTs.
    const got = await b.obtain(sandbox, 40_000, T0 + 20_000, false);
    expect(up.revoked.has(t0.accessToken)).toBe(true);
    clockA.advanceNow(clockB.now() - clockA.now()); // A resumes; the authorize 5xx is read before its timers run
    fail?.(
      new UpstreamUnavailableError('Open API authorize answered HTTP 503', {
        retryAfterSeconds: 1,
      }),
    );
    await pending;
    const entry = memA.get('sandbox');
    expect(
      entry !== undefined &&
        servableFromMemory(entry, clockA.now(), 0, {
          refreshWindowMs: 60_000,
          memoryRecheckMs: 5_000,
        }),
    ).toBe(false);
    expect(got.record.accessToken).not.toBe(t0.accessToken);
  });
  it('answers by its deadline after an unknown outcome even when DynamoDB takes 600 ms', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const late = () => new Promise<void>((r) => clock.after(600, r));
    const slowStore = wrap(store, {
      deleteIfMatches: async (n, d, o) => {
        await late();
        return store.deleteIfMatches(n, d, o);
      },
      // Slow from the confirmation on (the countdown's own writes are the subject elsewhere).
      renewLease: async (n, h, e, d, c) => {
        if (c === 0) await late();
        return store.renewLease(n, h, e, d, c);
      },
      releaseLease: async (n, h) => {
        await late();
        return store.releaseLease(n, h);
      },
    });
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000);
    const deadline = T0 + 8000;
    const a = new LeasedIssuance({
      store: slowStore,
      clock,
      memory: new TokenMemory(),
      issue: async (_c, o) => {
        await o.fence?.();
        await clock.sleep(o.deadline - clock.now());
        throw new UpstreamUnavailableError('access-token timed out', {
          retryAfterSeconds: 1,
          outcomeUnknown: true,
        });
      },
      settings: { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, upstreamTimeoutMs: 5_000 },
      logger: captureLogger(),
      metrics: new CountingMetrics(),
    });
    let at = 0;
    const p = a.refresh(sandbox, t0, deadline).catch(() => {
      at = clock.now();
    });
    while (!at) await clock.advance(50);
    await p;
    expect(at).toBeLessThanOrEqual(deadline);
  });
  it('takes its own lease when the acquire was applied but its answer lost and the retry refused', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000);
    const retrying = wrap(store, {
      acquireLease: async (n, r) => {
        await store.acquireLease(n, r);
        return store.acquireLease(n, r);
      },
    });
    const a = new LeasedIssuance({
      store: retrying,
      clock,
      memory: new TokenMemory(),
      issue: (c, o) => issueWith(issuerFor(up, clock), c, {} as never, o),
      settings: { refreshWindowMs: 60_000, memoryRecheckMs: 5_000, upstreamTimeoutMs: 5_000 },
      logger: captureLogger(),
      metrics: new CountingMetrics(),
    });
    const refreshed = await a.refresh(sandbox, t0, T0 + 8000);
    expect(refreshed?.source).toBe('upstream');
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
  });
  it('never serves the token its own refresh revoked when the token write was applied but its answer lost', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // 30 s left: in the window, due for refresh
    const lossy = wrap(store, {
      putToken: async (r, h) => {
        await store.putToken(r, h);
        return store.putToken(r, h);
      },
    });
    const a = broker(lossy, clock, up);
    // The caller that starts the refresh gets t0 at once: its countdown keeps it safe for now.
    const first = await a.getToken('sandbox', { deadline: T0 + 8000 });
    expect(up.revoked.has(first.record.accessToken)).toBe(false);
    await a.idle();
    expect(store.token('sandbox')?.accessToken).not.toBe(t0.accessToken); // the new token was written
    const served = await a.getToken('sandbox', { deadline: clock.now() + 8000 });
    expect(up.revoked.has(served.record.accessToken)).toBe(false);
  });
  it('does not keep an unwritten token in memory past the confirmed lease that protects it', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const aStore = wrap(store, {
      putToken: async () => {
        throw new Error('write timed out (not applied)');
      },
    });
    const a = broker(aStore, clock, up, { recheck: 30, timeout: 2_000 });
    const b = broker(store, clock, up, { recheck: 30, timeout: 2_000 });
    const mine = await a.getToken('sandbox', { deadline: T0 + 8000 });
    expect(mine.source).toBe('upstream');
    await clock.advance(6_000); // confirmed lease (budget 2 s + grace 2 s) is long gone
    await b.getToken('sandbox', { deadline: clock.now() + 8000 }).catch(() => undefined); // sees the lease first
    await clock.advance(4_500);
    await b.getToken('sandbox', { deadline: clock.now() + 8000 });
    expect(up.revoked.has(mine.record.accessToken)).toBe(true);
    const served = await a.getToken('sandbox', { deadline: clock.now() + 8000 });
    expect(up.revoked.has(served.record.accessToken)).toBe(false);
  });
});
