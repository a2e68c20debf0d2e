/**
 * The holder's driver (lib/broker/holder/held-lease.ts) against a store and a manual clock: the
 * survivors of the mutation run of 2026-11-24 (docs/benchmarks.md) each have a test here that
 * says what it guards. The reducer's own cases are holder-state.test.ts's and the table's.
 */
import { describe, expect, it } from 'vitest';
import { HeldLease, type HolderEffects, LeaseLost } from '../../../lib/broker/holder/held-lease.js';
import { countingLeaseMs } from '../../../lib/broker/timing/bounds.js';
import {
  DEFAULT_TIMING,
  leaseHeartbeatMs,
  storeReserveMs,
} from '../../../lib/broker/timing/index.js';
import { Deadline } from '../../../lib/clock.js';
import type { LeaseRef, LeaseTerms, TokenStore } from '../../../lib/ports.js';
import { caught, unexpected } from '../../support/errors.js';
import { InMemoryTokenStore, ManualClock } from '../../support/fakes.js';
import { T0 } from './setup.js';

const effects: HolderEffects = {
  writeToken: async () => true,
  dropReplaced: async () => undefined,
  forgetReplaced: () => undefined,
  release: async () => undefined,
  holdForGrace: async () => undefined,
};

/** A store whose lease writes answer as `answer` says, by their order (1: the first write). */
const leaseStore = (
  answer: (n: number) => Promise<boolean>,
): TokenStore & { writes: LeaseTerms[]; refs: LeaseRef[] } => {
  const store = new InMemoryTokenStore();
  const writes: LeaseTerms[] = [];
  const refs: LeaseRef[] = [];
  return Object.assign(store, {
    writes,
    refs,
    renewLease: async (_c: string, ref: LeaseRef, next: LeaseTerms) => {
      writes.push(next);
      refs.push(ref);
      return answer(writes.length);
    },
  });
};

const hold = (store: TokenStore, clock: ManualClock, deadlineMs: number, countdown: number) =>
  new HeldLease({
    store,
    clock,
    connection: 'sandbox',
    lease: { holder: 'me:1', version: 'v0' },
    deadline: Deadline.in(clock, deadlineMs),
    leasedAt: clock.monotonic(),
    answeredAt: clock.monotonic(),
    countdown,
    upstreamTimeoutMs: 2_000,
    replacesToken: true,
    suspect: false,
    timing: DEFAULT_TIMING,
    bounded: (operation) => operation,
    effects,
  });

const never = () => new Promise<boolean>(() => undefined);

describe('Class: HeldLease (the holder’s driver)', () => {
  // Survivor held-lease.ts:90–95 (the last-call timer, I3): a store slow enough that the
  // countdown never reaches the fence before the POST and the write after it no longer fit.
  it('I3: gives the lease up at the last moment a POST still fits, when a slow store keeps the countdown from the fence', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(never); // the first step write never comes back
    // A deadline before the counting version lapses (countingLeaseMs): the last call comes first.
    const deadlineMs = 800;
    expect(deadlineMs).toBeLessThan(countingLeaseMs(DEFAULT_TIMING));
    const lease = hold(store, clock, deadlineMs, 5);
    const fenced = lease.fence().then(unexpected, caught);
    const lastCall = deadlineMs - storeReserveMs(DEFAULT_TIMING) - DEFAULT_TIMING.minPostMs;
    // A millisecond at a time: the holder's own step sleeps move this clock too.
    while (clock.monotonic() < lastCall - 1) await clock.advance(1);
    expect(clock.monotonic()).toBe(lastCall - 1);
    expect(lease.signal.aborted).toBe(false);
    expect(lease.state.name).toBe('counting');
    await clock.advance(1);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.state).toMatchObject({
      name: 'lost',
      reason: 'No time left for the access-token request',
    });
    // The flow waiting at the fence is told at once: nothing is sent.
    expect(await fenced).toBeInstanceOf(LeaseLost);
    expect(store.writes.map((w) => w.countdown)).toEqual([4]);
  });

  it('I1 (liveness of the others): a countdown step that never comes back loses the lease when its version lapses, a counting lease (850 ms) after it was sent, not a whole lease (3 s)', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(never);
    const lease = hold(store, clock, 10_000, 5);
    const fenced = lease.fence().then(unexpected, caught);
    // Every write of a countdown lasts a counting lease: readers find it stale that soon too.
    // A millisecond at a time: the holder's own step sleeps move this clock too.
    while (clock.monotonic() < countingLeaseMs(DEFAULT_TIMING) + leaseHeartbeatMs(DEFAULT_TIMING)) {
      await clock.advance(1);
    }
    expect(store.writes.map((w) => w.durationMs)).toEqual([countingLeaseMs(DEFAULT_TIMING)]);
    expect(lease.state).toMatchObject({ name: 'lost', reason: 'Lease time ran out' });
    expect(lease.signal.aborted).toBe(true);
    expect(await fenced).toBeInstanceOf(LeaseLost);
  });

  // Survivor held-lease.ts:217–230: a refused countdown write must stop the flow there, not
  // leave it to the fence's confirmation to find out.
  it('I1: a refused countdown step stops the flow at once: no further write, the fence refused, the signal aborted', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(async (n) => n < 3); // the third step is refused (taken over)
    const lease = hold(store, clock, 10_000, 6);
    // The steps' sleeps move the manual clock: the fence's answer is awaited alone.
    const fenced = await lease.fence().then(unexpected, caught);
    expect(fenced).toBeInstanceOf(LeaseLost);
    expect(store.writes.map((w) => w.countdown)).toEqual([5, 4, 3]);
    expect(lease.signal.aborted).toBe(true);
    expect(lease.signal.reason).toMatchObject({ name: 'LeaseLost', message: 'Lease taken over' });
    await clock.advance(2_000);
    expect(store.writes).toHaveLength(3);
    // No confirmation (countdown 0) was ever attempted, and the refused version is not ours.
    expect(store.writes.some((w) => w.countdown === 0)).toBe(false);
    expect(lease.ref).toEqual({ holder: 'me:1', version: store.writes[1]?.version });
  });

  // Issue 17: a lease given up because the environment shuts down stops the flow before its
  // POST, and the flow (and its log) is told why, not that the lease was taken over.
  it('I1: an abandoned lease refuses the fence and stops the upstream request, with the reason given', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(async () => true);
    const lease = hold(store, clock, 10_000, 6);
    lease.abandon('Execution environment shutting down');
    const fenced = await lease.fence().then(unexpected, caught);
    expect(fenced).toMatchObject({
      name: 'LeaseLost',
      message: 'Execution environment shutting down',
    });
    expect(lease.signal.reason).toBe(fenced);
    expect(store.writes.some((w) => w.countdown === 0)).toBe(false);
  });

  it('I1: a countdown step that failed stops the flow too, and its version stays unanswered for the release', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(async (n) => {
      if (n === 2) throw new Error('socket hang up');
      return true;
    });
    const lease = hold(store, clock, 10_000, 6);
    expect(await lease.fence().then(unexpected, caught)).toBeInstanceOf(LeaseLost);
    expect(store.writes).toHaveLength(2);
    expect(lease.signal.reason).toMatchObject({ message: 'Lease write failed' });
    expect(lease.ref).toEqual({
      holder: 'me:1',
      version: store.writes[0]?.version,
      unanswered: store.writes[1]?.version,
    });
  });

  it('I2: each write names the version last written, the one it sets as unanswered (a retry that landed still matches)', async () => {
    const clock = new ManualClock(T0);
    const store = leaseStore(async () => true);
    const lease = hold(store, clock, 10_000, 3);
    await lease.fence();
    expect(store.writes.map((w) => w.countdown)).toEqual([2, 1, 0]);
    expect(store.refs.map((r) => r.version)).toEqual([
      'v0',
      store.writes[0]?.version,
      store.writes[1]?.version,
    ]);
    expect(store.refs.map((r) => r.unanswered)).toEqual(store.writes.map((w) => w.version));
    expect(lease.state.name).toBe('posting');
  });

  // Issue 26: readers aim their one read at a cut-over with the holder's step; on a global
  // table a step's write is a cross-region round trip that no reader's own read measures.
  it('announces with each write how long its steps take: the step and its last write’s round trip', async () => {
    const clock = new ManualClock(T0);
    // Each write answers 40 ms after it was sent; the lease's own write took 70 ms.
    const store = leaseStore(async () => {
      await clock.sleep(40);
      return true;
    });
    const lease = new HeldLease({
      store,
      clock,
      connection: 'sandbox',
      lease: { holder: 'me:1', version: 'v0' },
      deadline: Deadline.in(clock, 10_000),
      leasedAt: clock.monotonic() - 70,
      answeredAt: clock.monotonic(),
      countdown: 3,
      upstreamTimeoutMs: 2_000,
      replacesToken: true,
      suspect: false,
      timing: DEFAULT_TIMING,
      bounded: (operation) => operation,
      effects,
    });
    const fenced = lease.fence();
    while (store.writes.length < 3) await clock.advance(1);
    await fenced;
    const step = DEFAULT_TIMING.countdownStepMs;
    const [first, ...later] = store.writes.map((w) => w.stepMs ?? 0);
    expect(first).toBe(step + 70);
    // The clock moves a millisecond at a time here: a round trip reads 40 or 41 ms.
    for (const ms of later) expect(ms - step).toBeOneOf([40, 41]);
    expect(later).toHaveLength(2);
  });
});
