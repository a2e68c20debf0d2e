import { describe, expect, it } from 'vitest';
import { LeasedIssuance } from '../../../lib/broker/fleet/leased-issuance.js';
import { IssuanceCause } from '../../../lib/broker/issuance/index.js';
import type { Issue } from '../../../lib/broker/issuance/issue-flow.js';
import { countdownFor, countingLeaseMs } from '../../../lib/broker/timing/bounds.js';
import {
  DEFAULT_TIMING,
  leaseCountdown,
  leaseHeartbeatMs,
  leaseNeedsMs,
  storeReserveMs,
} from '../../../lib/broker/timing/index.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import { Deadline } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import {
  FunctionTimeoutTooShortError,
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import { MetricName } from '../../../lib/metrics.js';
import type { LeaseRequest, TokenRecord } from '../../../lib/ports.js';
import { caught, unexpected } from '../../support/errors.js';
import {
  asks,
  CountingMetrics,
  captureLogger,
  connection,
  InMemoryTokenStore,
  ManualClock,
  primed,
} from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const { countdownStepMs, leaseMs } = DEFAULT_TIMING;
const heartbeatMs = leaseHeartbeatMs(DEFAULT_TIMING);
const HOUR = 3_600_000;

const record = (accessToken: string, expiresAt: number): TokenRecord => ({
  connection: 'sandbox',
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - HOUR,
  expiresAt,
});

/** One container's leased issuance over a shared store, with a controllable upstream. */
const container = (
  store: InMemoryTokenStore,
  clock: ManualClock,
  issue: Issue = async () => ({
    accessToken: 'issued',
    expiresIn: 3600,
    upstreamTimestamp: undefined,
    requestedAt: clock.now(),
  }),
  /** The re-check, ms: 5 s unless a test needs memory's proof to outlast the lease. */
  memoryRecheckMs = 5_000,
) => {
  const calls: number[] = [];
  const metrics = new CountingMetrics();
  const logger = captureLogger();
  const issuance = new LeasedIssuance({
    store,
    clock,
    issue: async (c, deadline) => {
      calls.push(clock.now());
      return issue(c, deadline);
    },
    settings: {
      refreshWindowMs: 600_000,
      memoryRecheckMs,
      upstreamTimeoutMs: 2_000,
      timing: DEFAULT_TIMING,
    },
    logger,
    metrics,
  });
  return { issuance, memory: issuance.view, calls, metrics, logger };
};

const sandbox: ConnectionConfig = connection();

/** Another container's lease at `countdown`, a version per step, its step announced if given. */
const countingLease = (countdown: number, stepMs?: number) => ({
  holder: 'other:1',
  version: `v-${countdown}`,
  expiresAt: T0 + leaseMs,
  durationMs: leaseMs,
  countdown,
  ...(stepMs === undefined ? {} : { stepMs }),
});

/** Records the countdown of every lease renewal `store` accepts a call for. */
const recordCountdowns = (store: InMemoryTokenStore): number[] => {
  const written: number[] = [];
  const renew = store.renewLease.bind(store);
  store.renewLease = async (name, lease, next) => {
    written.push(next.countdown);
    return renew(name, lease, next);
  };
  return written;
};

/** An issue() that passes the fence, then records when its access-token request leaves. */
const fencedIssue =
  (clock: ManualClock, posts: number[], expiresIn = 3600): Issue =>
  async (_c, options) => {
    await options.fence?.();
    posts.push(clock.now());
    return { accessToken: 'issued', expiresIn, upstreamTimestamp: undefined, requestedAt: T0 };
  };

describe('Class: LeasedIssuance', () => {
  it('loses its lease while issuing, drops its own token and serves the new holder’s', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let release: (() => void) | undefined;
    const slow = container(store, clock, async () => {
      // Paused past the lease; meanwhile another container takes over and writes its token.
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return {
        accessToken: 'stale',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    store.renewLease = async () => false; // its heartbeats no longer land
    const by = Deadline.in(clock, 60_000);
    const pending = slow.issuance.obtain(sandbox, asks(60_000, by));
    await clock.advance(leaseMs + 1);
    const fast = container(store, clock);
    const theirs = await fast.issuance.obtain(sandbox, asks(60_000, by));
    expect(theirs).toMatchObject({ source: 'upstream', record: { accessToken: 'issued' } });
    release?.();
    const served = await pending;
    expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'issued' } });
    expect(slow.memory.entry('sandbox')?.record.accessToken).toBe('issued');
    expect(store.token('sandbox')?.accessToken).toBe('issued');
  });

  it('renews its lease by heartbeats while the flow runs, and stops them when it ends', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const renewals: number[] = [];
    const renew = store.renewLease.bind(store);
    store.renewLease = async (name, lease, next) => {
      renewals.push(next.leaseExpiresAt);
      return renew(name, lease, next);
    };
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(2 * heartbeatMs + 10);
      return {
        accessToken: 'slow',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 60_000)));
    expect(renewals).toEqual([T0 + heartbeatMs + leaseMs, T0 + 2 * heartbeatMs + leaseMs]);
    expect(clock.pending()).toBe(0);
  });

  it('announces its step with the take: the step’s wait and its last read’s round trip (ADR 0032)', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const read = store.read.bind(store);
    // The store is another region's: each read takes 80 ms.
    store.read = async (name) => {
      await clock.sleep(80);
      return read(name);
    };
    const announced: (number | undefined)[] = [];
    const acquire = store.acquireLease.bind(store);
    store.acquireLease = async (name, request) => {
      announced.push(request.stepMs);
      return acquire(name, request);
    };
    const { issuance } = container(store, clock);
    let served: unknown;
    const pending = issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 60_000)));
    void pending.then((answer) => {
      served = answer;
    });
    for (let ms = 0; ms < 1_000 && served === undefined; ms += 1) await clock.advance(1);
    expect(served).toMatchObject({ source: 'upstream' });
    // A reader of this first version aims its cut-over read with it, not with the wait alone.
    // The clock moves a millisecond at a time here: the read measures 80 or 81 ms.
    expect(announced).toHaveLength(1);
    expect(announced[0]).toBeOneOf([countdownStepMs + 80, countdownStepMs + 81]);
  });

  it('never renews its lease past the caller’s deadline, and tells each write apart by a version of its own', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const renewals: number[] = [];
    const versions: string[] = [];
    const acquire = store.acquireLease.bind(store);
    const renew = store.renewLease.bind(store);
    store.acquireLease = async (name, request) => {
      versions.push(request.version);
      return acquire(name, request);
    };
    store.renewLease = async (_name, lease, next) => {
      // Each write names the version written before it.
      expect(lease.version).toBe(versions.at(-1));
      renewals.push(next.leaseExpiresAt);
      versions.push(next.version);
      return renew(_name, lease, next);
    };
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(heartbeatMs);
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 1_500)));
    // The lease was taken until the deadline; the heartbeat repeats that expiry, and is still a
    // new version (a watcher sees it change, so takes no live lease over): no "+1 ms".
    expect(renewals).toEqual([T0 + 1_500]);
    expect(new Set(versions).size).toBe(2);
  });

  it('counts its lease down, a step per write, before the access-token request of a revoking upstream, and only then', async () => {
    for (const revokesOnReissue of [true, false]) {
      const clock = new ManualClock(T0);
      const store = new InMemoryTokenStore();
      const current = record('current', T0 + 200_000);
      store.setToken(current);
      const written = recordCountdowns(store);
      const posts: number[] = [];
      const { issuance, calls } = container(store, clock, fencedIssue(clock, posts));
      const refreshed = await issuance.refresh(
        connection({ revokesOnReissue }),
        current,
        Deadline.in(clock, 10_000),
      );
      expect(refreshed?.record.accessToken).toBe('issued');
      // The authorization code is asked for at once, while the lease counts down.
      expect(calls).toEqual([T0]);
      const steps = countdownFor(current, {
        refreshWindowMs: 600_000,
        memoryRecheckMs: 5_000,
        timing: DEFAULT_TIMING,
      });
      expect(steps).toBe(21); // (5 s re-check + 100 ms margin) / 250 ms steps
      expect(posts).toEqual([revokesOnReissue ? T0 + steps * countdownStepMs : T0]);
      // Writes lower it by one each (a heartbeat would repeat a value), down to the
      // confirmation's 0.
      expect(written).toEqual(
        revokesOnReissue ? Array.from({ length: steps }, (_, i) => steps - 1 - i) : [0],
      );
    }
  });

  // Issue 26: a store on a multi-Region table retries a replicated write conflict until the
  // deadline it is given, else for a budget of its own (2 s): a caller with more time left must
  // not be answered 503 because a conflict outlasted the store's budget.
  it('gives the store the caller’s deadline with every write of a refresh, to retry conflicts within', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    store.setToken(current);
    const { issuance } = container(store, clock, fencedIssue(clock, []));
    const by = Deadline.in(clock, 10_000);
    expect((await issuance.refresh(sandbox, current, by))?.record.accessToken).toBe('issued');
    expect(store.calls.acquire).toBe(1);
    expect(store.deadlines.acquire).toBe(by);
    expect(store.deadlines.put).toBe(by);
    // The countdown's steps and the fence's confirmation: the caller's, or the command's own
    // bound within it, never none.
    expect(store.deadlines.renew).toBeDefined();
    expect(store.deadlines.renew?.at).toBeLessThanOrEqual(by.at);
  });

  it('tries for the lease once per announced cut-over: a countdown it has read stops further tries', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    store.items.set('sandbox', {
      token: current,
      lease: {
        holder: 'other:1',
        version: 'v-other:1',
        expiresAt: T0 + leaseMs,
        durationMs: leaseMs,
        countdown: 18,
      },
    });
    const { issuance, memory } = container(store, clock);
    expect(await issuance.refresh(sandbox, current, Deadline.in(clock, 10_000))).toBeUndefined();
    expect(store.calls.acquire).toBe(1);
    // The refused write showed the countdown: the token is kept, served until it ends.
    expect(memory.entry('sandbox')).toMatchObject({
      until: T0 + 17 * countdownStepMs - 100,
      lease: { countdown: 18 },
    });
    for (let i = 0; i < 10; i += 1) {
      await clock.advance(100);
      expect(await issuance.refresh(sandbox, current, Deadline.in(clock, 10_000))).toBeUndefined();
    }
    expect(store.calls.acquire).toBe(1);
  });

  it('makes no write for a countdown it read, even once the lease is older than its duration: only a read can show it stale', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    const lease = {
      holder: 'other:1',
      version: 'v-other:1',
      expiresAt: T0 + leaseMs,
      durationMs: leaseMs,
    };
    store.items.set('sandbox', { token: current, lease: { ...lease, countdown: 21 } });
    const { issuance, memory } = container(store, clock);
    expect(await issuance.refresh(sandbox, current, Deadline.in(clock, 10_000))).toBeUndefined();
    expect(store.calls.acquire).toBe(1); // refused: it showed the countdown
    // The holder goes on counting down; this container has not read since (a 5 s re-check)
    // and still serves the token it proved safe until the countdown's end.
    store.items.set('sandbox', {
      token: current,
      lease: { ...lease, expiresAt: T0 + 2 * leaseMs, countdown: 7 },
    });
    await clock.advance(leaseMs + 500);
    expect(clock.now()).toBeLessThan(memory.entry('sandbox')?.until ?? 0);
    expect(await issuance.refresh(sandbox, current, Deadline.in(clock, 10_000))).toBeUndefined();
    // Every busy container would make this write once per countdown: a fleet-sized write load
    // on the one item, where only the holder's writes belong.
    expect(store.calls.acquire).toBe(1);
  });

  it('takes over a countdown whose holder died, going on from where it was seen, never higher', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    // Expired a second ago here, maybe not yet on a container whose clock runs behind: its
    // replacement is counted down, and the holder of that countdown died at 7.
    const current = record('current', T0 - 1_000);
    const dead = {
      holder: 'dead:1',
      version: 'v-dead:1',
      expiresAt: T0 + leaseMs,
      durationMs: leaseMs,
      countdown: 7,
    };
    store.items.set('sandbox', { token: current, lease: dead });
    const written = recordCountdowns(store);
    const takeovers: number[] = [];
    const acquire = store.acquireLease.bind(store);
    store.acquireLease = async (name, request) => {
      if (request.takeOver) takeovers.push(clock.now());
      return acquire(name, request);
    };
    const posts: number[] = [];
    const { issuance } = container(store, clock, fencedIssue(clock, posts));
    // The caller's reads see the lease unchanged for its duration: then it takes it over.
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    expect(served.record.accessToken).toBe('issued');
    expect(takeovers).toHaveLength(1);
    expect(takeovers[0]).toBeGreaterThanOrEqual(T0 + leaseMs); // stale on our clock only then
    expect(written).toEqual([6, 5, 4, 3, 2, 1, 0]);
    expect(posts).toEqual([(takeovers[0] ?? 0) + 7 * countdownStepMs]);
  });

  it('at a cut-over, reads once when the successor is due rather than chasing the countdown', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    const successor = record('successor', T0 + HOUR);
    const lease = {
      holder: 'other:1',
      version: 'v-other:1',
      expiresAt: T0 + leaseMs,
      durationMs: leaseMs,
    };
    // The holder elsewhere: countdown 3 at T0, 1 from T0 + 500, its token written at T0 + 850.
    store.read = async () => {
      store.calls.read += 1;
      const now = clock.now();
      if (now >= T0 + 850) return { token: successor, lease: undefined };
      return { token: current, lease: { ...lease, countdown: now >= T0 + 500 ? 1 : 3 } };
    };
    const { issuance } = container(store, clock);
    const first = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(first.record.accessToken).toBe('current'); // served: 2 steps announced
    // Past what that read proved (2 × 250 ms − 100 ms), within a step and the POST (250 + 150
    // ms) of the successor's expected time: it waits for it.
    await clock.advance(560);
    const next = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(next.record.accessToken).toBe('successor');
    expect(store.calls.read).toBe(2);
    // Its countdown's end (3 steps) plus half an issuance (300 ms by default), no later.
    expect(clock.now()).toBe(T0 + 3 * countdownStepMs + 150);
  });

  // Issue 25's cut-over bound and issue 26's: what a read proves runs out up to a step, the
  // margin and the countdown's step writes before its end; a caller that came then waited all
  // of it (1.2 s on a global table). Further than a step and the POST away, it reads instead.
  it('at a cut-over, a caller further than two steps and the POST from the successor reads at once, and is served what the countdown still proves', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    // A holder in a far region: its steps take 300 ms (250 and a 50 ms write, the most the
    // default timing's `storeRoundTripMs` lets a reader believe).
    const lease = { holder: 'other:1', version: 'v-other:1', expiresAt: T0 + leaseMs };
    store.read = async () => {
      store.calls.read += 1;
      return {
        token: current,
        lease: { ...lease, durationMs: leaseMs, countdown: 8, stepMs: 300 },
      };
    };
    const { issuance } = container(store, clock);
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    // Past what the read proved (7 × 250 − 100 ms); the successor expected at T0 + 8 × 300 +
    // 150 + 50 = T0 + 2,600: 900 ms away, more than two steps and the POST (800 ms).
    await clock.advance(1_700);
    const next = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(next.record.accessToken).toBe('current');
    expect(store.calls.read).toBe(2);
    expect(clock.now()).toBe(T0 + 1_700); // not held at all
  });

  it('at a cut-over, starts its backoff again when the countdown moves: the token comes within the POST of the fence', async () => {
    const clock = new ManualClock(T0);
    clock.draw = 0.99; // the longest jitter every time
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    const successor = record('successor', T0 + HOUR);
    // A holder slow to be confirmed: countdown 1 for 1 s, then the fence (0), its token 450 ms on.
    store.read = async () => {
      store.calls.read += 1;
      const now = clock.now();
      if (now >= T0 + 1_450) return { token: successor, lease: undefined };
      return { token: current, lease: countingLease(now >= T0 + 1_000 ? 0 : 1) };
    };
    const { issuance } = container(store, clock);
    const got = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    expect(got.record.accessToken).toBe('successor');
    // Polls at 0, 148, 445 and 940 ms (countdown 1: 150, 300, then the 500 ms cap), 1,435 (the
    // fence: the backoff starts again at 150 ms), 1,583: the successor. Without the reset, the
    // read after 1,435 came at 1,930.
    expect(clock.now() - T0).toBeLessThan(1_450 + 150);
  });

  it('at a cut-over, aims its one read with the step the holder announced, not its own round trip', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    const successor = record('successor', T0 + HOUR);
    // A holder in another region: its steps take 250 ms and a 40 ms write; ours reads in 2 ms.
    const STEP = countdownStepMs + 40;
    const writtenAt = T0 + 8 * STEP + 150 + 40;
    store.read = async () => {
      store.calls.read += 1;
      await clock.sleep(2);
      const now = clock.now();
      if (now >= writtenAt) return { token: successor, lease: undefined };
      const countdown = Math.max(0, 8 - Math.floor((now - T0) / STEP));
      return { token: current, lease: countingLease(countdown, STEP) };
    };
    const { issuance } = container(store, clock);
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    await clock.advance(writtenAt - T0 - 300); // within a step and the POST of the successor
    const next = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(next.record.accessToken).toBe('successor');
    expect(store.calls.read).toBe(2);
    // Guessing the holder's write from its own 2 ms read, it read 8 × 38 ms early, found the
    // countdown still running, and read again.
    expect(clock.now() - writtenAt).toBeLessThanOrEqual(4);
  });

  it('at a cut-over, counts the step the holder announced (its wait and its write), so its one read finds the successor', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    const successor = record('successor', T0 + HOUR);
    const ROUND_TRIP = 12;
    const STEP = countdownStepMs + ROUND_TRIP; // each write is sent a step after the last answer
    const confirmedAt = T0 + 21 * STEP;
    const writtenAt = confirmedAt + 150 + ROUND_TRIP; // the POST, then the token's write
    // The holder elsewhere took the lease at T0 with a countdown of 21 (a 5 s re-check).
    store.read = async () => {
      store.calls.read += 1;
      await clock.sleep(ROUND_TRIP);
      const now = clock.now();
      if (now >= writtenAt) return { token: successor, lease: undefined };
      const countdown = Math.max(0, 21 - Math.floor((now - T0) / STEP));
      const lease = {
        holder: 'other:1',
        version: 'v-other:1',
        expiresAt: T0 + leaseMs + (21 - countdown) * STEP,
        durationMs: leaseMs,
        countdown,
        // Announced by every version here (a take's own write announces none: the test
        // above, which reads at the step's wait alone).
        stepMs: STEP,
      };
      return { token: current, lease };
    };
    const { issuance } = container(store, clock);
    const first = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    expect(first.record.accessToken).toBe('current');
    // Past what that read proved (20 × 250 ms − 100 ms), within a step and the POST of the
    // successor's expected time.
    await clock.advance(5_300 - ROUND_TRIP);
    const next = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(next.record.accessToken).toBe('successor');
    // One read at the cut-over, not one before the token was there and more after.
    expect(store.calls.read).toBe(2);
    expect(clock.now() - writtenAt).toBeLessThanOrEqual(2 * ROUND_TRIP);
  });

  // Issue 26: an isolated region's callers get a fast, clear error. Each waited the whole store
  // call (the SDK's 2 s) in regions-isolated-holder; after one read that failed, the next is
  // given a short wait, and a read that answers gives back the caller's whole deadline.
  it('after a read the store did not answer, gives the next one a short wait, and the whole deadline again once one answers', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 200_000));
    let down = true;
    const read = store.read.bind(store);
    // Answers take 200 ms when the store is up: the measured read the short wait is four of.
    store.read = (name) =>
      down ? new Promise(() => undefined) : clock.sleep(200).then(() => read(name));
    const { issuance } = container(store, clock);
    const ask = async () => {
      const started = clock.monotonic();
      const outcome = issuance
        .obtain(sandbox, asks(60_000, Deadline.in(clock, 3_000)))
        .then((served) => served.record.accessToken, caught);
      let settled = false;
      void outcome.then(() => {
        settled = true;
      });
      while (!settled) await clock.advance(10);
      return { outcome: await outcome, tookMs: clock.monotonic() - started };
    };
    const first = await ask();
    expect(first.outcome).toBeInstanceOf(StoreUnavailableError);
    expect(first.tookMs).toBeGreaterThanOrEqual(2_900);
    const second = await ask();
    expect(second.outcome).toBeInstanceOf(StoreUnavailableError);
    // No read measured yet: the floor, 500 ms.
    expect(second.tookMs).toBeGreaterThanOrEqual(500);
    expect(second.tookMs).toBeLessThanOrEqual(510);
    down = false;
    expect((await ask()).outcome).toBe('current');
    down = true;
    // A later outage, past what memory proved: its first read waits the whole deadline again.
    clock.step(6_000);
    const fourth = await ask();
    expect(fourth.outcome).toBeInstanceOf(StoreUnavailableError);
    expect(fourth.tookMs).toBeGreaterThanOrEqual(2_900);
    // Then four of the last measured read (200 ms, measured up to 210: this clock moves 10 ms
    // at a time here), above the floor.
    const fifth = await ask();
    expect(fifth.outcome).toBeInstanceOf(StoreUnavailableError);
    expect(fifth.tookMs).toBeGreaterThanOrEqual(800);
    expect(fifth.tookMs).toBeLessThanOrEqual(860);
  });

  it('gives up a refresh at once when the lease went elsewhere', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', {
      token: record('current', T0 + 200_000),
      lease: {
        holder: 'other:1',
        version: 'v-other:1',
        expiresAt: T0 + leaseMs,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    const { issuance, calls } = container(store, clock);
    expect(
      await issuance.refresh(sandbox, record('current', T0 + 200_000), Deadline.in(clock, 10_000)),
    ).toBe(undefined);
    expect(calls).toEqual([]);
  });

  // I3: a refresh takes no lease it cannot use before the caller's deadline, and needs the
  // same time as a replacement through `obtain` (observer.ts): strictly more than its countdown,
  // the least POST and the write after it.
  it('I3: refuses a refresh whose countdown, POST and write do not fit before the deadline, before taking the lease', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    store.setToken(current);
    const settings = {
      refreshWindowMs: 600_000,
      memoryRecheckMs: 5_000,
      upstreamTimeoutMs: 2_000,
      timing: DEFAULT_TIMING,
    };
    const least = leaseNeedsMs(leaseCountdown(true, current, undefined, settings), DEFAULT_TIMING);
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .refresh(sandbox, current, Deadline.in(clock, least))
      .then(unexpected, caught);
    expect(error.message).toBe('Not enough time left to replace the token safely; retry shortly');
    expect(store.calls.acquire).toBe(0);
    expect(calls).toEqual([]);
  });

  // I2: a refresh that lost its lease during the flow cannot tell whether the new holder's
  // request revoked the token it meant to replace: it answers with what the store holds now,
  // never with nothing (which would leave the caller the old token).
  it('I2: a refresh that lost its lease during the flow answers with the new holder’s token from the store', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    store.setToken(current);
    const { issuance, calls } = container(store, clock, async (_c, options) => {
      // Another container took the lease over and wrote its token meanwhile.
      store.items.set('sandbox', { token: record('theirs', T0 + HOUR) });
      await options.fence?.();
      return {
        accessToken: 'ours',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    const served = await issuance.refresh(
      connection({ revokesOnReissue: false }),
      current,
      Deadline.in(clock, 10_000),
    );
    expect(calls).toHaveLength(1);
    expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'theirs' } });
  });

  // I4: each refusal of a caller's word is counted (ReplacementsRefused, on the dashboard) and
  // logged with who asked, what and what it can have, so that an operator finds the callers
  // asking more than the bound lets them; other refusals are not.
  it('I4: counts and logs a caller’s word it refuses, with the caller, and no other refusal', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 1_000_000));
    const { issuance, calls, metrics, logger } = container(store, clock);
    const caller = 'arn:aws:iam::123456789012:role/svc';
    const forced = await issuance
      .obtain(sandbox, asks(1_100_500, Deadline.in(clock, 10_000), { caller, mayForce: false }))
      .then(unexpected, caught);
    expect(forced).toMatchObject({ code: 'FORCE_NOT_ALLOWED' });
    expect(metrics.totals.get('ReplacementsRefused')).toBe(1);
    expect(logger.lines.filter((line) => line.attributes[0]?.code)).toEqual([
      {
        level: 'info',
        message: 'Replacement on a caller’s word refused',
        attributes: [
          {
            connection: 'sandbox',
            caller,
            code: 'FORCE_NOT_ALLOWED',
            minValidity: 1_101,
            availableMinValidity: 999,
          },
        ],
      },
    ]);
    const beyond = await issuance
      .obtain(sandbox, asks(2 * HOUR, Deadline.in(clock, 10_000), { mayForce: false }))
      .then(unexpected, caught);
    expect(beyond).toBeInstanceOf(MinValidityUnsatisfiableError);
    expect(metrics.totals.get('ReplacementsRefused')).toBe(1);
    expect(calls).toEqual([]);
  });

  // I2: once its POST has left, the token it replaces is revoked upstream, wherever it is held;
  // a holder whose token write is then refused (taken over) forgets it: its memory no longer
  // vouches for it, and nothing is served through the outage that follows
  // (holder/state.ts: 'forget-replaced').
  it('I2: forgets the token it replaced when its write is refused after the POST left', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 200_000);
    store.setToken(current);
    const { issuance, memory } = container(store, clock, async (_c, options) => {
      await options.fence?.();
      // The POST has left; another container takes the lease over, and the store then fails.
      store.items.set('sandbox', {
        token: current,
        lease: {
          holder: 'other:1',
          version: 'v-other:1',
          expiresAt: clock.now() + leaseMs,
          durationMs: leaseMs,
          countdown: 0,
        },
      });
      store.read = async () => {
        throw new Error('store down');
      };
      return {
        accessToken: 'ours',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(memory.entry('sandbox')?.record.accessToken).toBe('current');
    const outcome = await issuance
      .refresh(sandbox, current, Deadline.in(clock, 20_000))
      .then((served) => served?.record.accessToken, caught);
    expect(outcome).toBeInstanceOf(StoreUnavailableError);
    expect(memory.entry('sandbox')).toBeUndefined();
  });

  // The item a lost race for the lease returns is a read as good as any (I1: it shows the
  // winner's lease): the loser waits on it, and reads again only when the winner's token is due.
  it('at the fleet’s cold start, a container that finds the holder’s lease reads once more, when its token is due, not in a backoff', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    // The holder elsewhere took the lease on the empty item 40 ms ago; its token is written at
    // T0 + 230 (an issuance under the default estimate of 300 ms from its lease).
    const takenAt = T0 - 40;
    const lease = {
      holder: 'other:1',
      version: 'v-other:1',
      expiresAt: takenAt + leaseMs,
      durationMs: leaseMs,
      countdown: 0,
    };
    const writtenAt = T0 + 230;
    store.read = async () => {
      store.calls.read += 1;
      return clock.now() >= writtenAt
        ? { token: record('first', T0 + HOUR), lease: undefined }
        : { token: undefined, lease };
    };
    const { issuance, calls } = container(store, clock);
    clock.draw = 0.5;
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(served.record.accessToken).toBe('first');
    expect(calls).toEqual([]);
    // The read that found the lease, and one when the token is due: the lease's send plus an
    // issuance (300 ms), plus this container's jitter (half of a quarter issuance).
    expect(store.calls.read).toBe(2);
    expect(clock.now()).toBe(takenAt + 300 + 37.5);
  });

  it('at the fleet’s cold start, a token later than expected is read again in growing steps, not every few milliseconds', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const lease = {
      holder: 'other:1',
      version: 'v-other:1',
      expiresAt: T0 + leaseMs,
      durationMs: leaseMs,
      countdown: 0,
    };
    const writtenAt = T0 + 1_500; // a slow upstream: five times the estimate
    store.read = async () => {
      store.calls.read += 1;
      return clock.now() >= writtenAt
        ? { token: record('first', T0 + HOUR), lease: undefined }
        : { token: undefined, lease };
    };
    const { issuance } = container(store, clock);
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(served.record.accessToken).toBe('first');
    // At 0 and 300 ms, then steps of 75, 150, 250, 250 … ms (draw 0): 8 reads, not 1,500.
    expect(store.calls.read).toBe(8);
    expect(clock.now() - writtenAt).toBeLessThan(250);
  });

  it('takes the item a lost race for the lease returned as a read: no extra read before waiting', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const theirs = {
      holder: 'other:1',
      version: 'v-other:1',
      expiresAt: T0 + leaseMs,
      durationMs: leaseMs,
      countdown: 0,
    };
    const acquire = store.acquireLease.bind(store);
    store.acquireLease = async (name, request) => {
      store.items.set('sandbox', { lease: theirs }); // the other container won just before
      return acquire(name, request);
    };
    const sleep = clock.sleep.bind(clock);
    clock.sleep = async (ms: number) => {
      await sleep(ms);
      store.items.set('sandbox', { token: record('theirs', T0 + HOUR) });
    };
    const { issuance, calls } = container(store, clock);
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'theirs' } });
    expect(calls).toEqual([]);
    expect(store.calls.read).toBeLessThanOrEqual(2);
  });

  it('does not replace a token another container wrote after the one it meant to refresh', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('newer', T0 + HOUR));
    const { issuance, calls } = container(store, clock);
    expect(
      await issuance.refresh(sandbox, record('older', T0 + 200_000), Deadline.in(clock, 10_000)),
    ).toBe(undefined);
    expect(calls).toEqual([]);
  });

  it('serves the token it issued from memory when the store write fails', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.putToken = async () => {
      throw new Error('store down');
    };
    const { issuance, memory } = container(store, clock);
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: 'issued' } });
    expect(memory.entry('sandbox')?.record.accessToken).toBe('issued');
  });

  // I2: a token that could not be written is vouched for by memory only while the confirmed
  // lease (the POST's 1 s send window and A1's 4 s after it) keeps every other container from
  // replacing it, less the proof margin.
  it('I2: keeps a token it could not write in memory only until the confirmed lease ends, less the proof margin', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.putToken = async () => {
      throw new Error('store down');
    };
    // A 20 s re-check: memory's own proof would outlast the lease, which must cut it.
    const { issuance, memory } = container(store, clock, fencedIssue(clock, []), 20_000);
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(memory.entry('sandbox')?.until).toBe(T0 + 1_000 + 4_000 - DEFAULT_TIMING.proofMarginMs);
  });

  it('falls back to memory when the store is unreadable only while no replacement elsewhere can have revoked it', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance, memory, logger } = container(store, clock);
    store.failing = true;
    // Confirmed 50 ms ago: any replacement elsewhere is still draining (5 s + 100 ms here).
    primed(memory, clock, record('remembered', T0 + HOUR), T0 - 50);
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).resolves.toMatchObject({
      source: 'memory',
      record: { accessToken: 'remembered' },
    });
    expect(logger.lines.filter((line) => line.level === 'warn')).toEqual([
      {
        level: 'warn',
        message: 'Token store unreadable; serving the token held in memory',
        attributes: [{ connection: 'sandbox' }],
      },
    ]);
    const unreadable = async (minValidityMs: number | 'outside-window') => {
      const failed = await issuance
        .obtain(sandbox, asks(minValidityMs, Deadline.in(clock, 5_000)))
        .then(unexpected, caught);
      expect(failed).toBeInstanceOf(StoreUnavailableError);
      expect(failed.message).toBe('The token store could not be read; retry shortly');
    };
    // Unless told not to (the warm-up).
    await unreadable('outside-window');
    // Confirmed 10 s ago: another container may have replaced (and so revoked) it since.
    primed(memory, clock, record('remembered', T0 + HOUR), T0 - 10_000);
    await unreadable(60_000);
  });

  it('serves an unconfirmed token through an outage for as long as the operator allowed', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const issuance = new LeasedIssuance({
      store,
      clock,
      issue: async () => Promise.reject(new Error('not called')),
      settings: {
        refreshWindowMs: 600_000,
        memoryRecheckMs: 5_000,
        upstreamTimeoutMs: 2_000,
        storeOutageGraceMs: 60_000,
        timing: DEFAULT_TIMING,
      },
      logger: captureLogger(),
      metrics: new CountingMetrics(),
    });
    store.failing = true;
    primed(issuance.view, clock, record('remembered', T0 + HOUR), T0 - 30_000);
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).resolves.toMatchObject({
      source: 'memory',
    });
  });

  // XFetch's δ is the issuance's own duration: from the flow's start to the token, less the
  // wait at the fence for the countdown (which a replacement elsewhere would not pay).
  it('measures an issuance from its start, the countdown it waited out excluded', async () => {
    const clock = new ManualClock(T0);
    await clock.advance(10_000);
    const store = new InMemoryTokenStore();
    const current = record('current', clock.now() + 200_000);
    store.setToken(current);
    const { issuance } = container(store, clock, async (_c, options) => {
      await options.fence?.();
      await clock.sleep(420); // the access-token request
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    const start = clock.monotonic();
    await issuance.refresh(sandbox, current, Deadline.in(clock, 10_000));
    // 21 steps of 250 ms waited out at the fence: not counted.
    expect(clock.monotonic() - start).toBe(21 * countdownStepMs + 420);
    expect(issuance.view.issuanceMs('sandbox')).toBe(420);
  });

  // Served only when left > need: a token issued with exactly the validity asked for is not.
  it('refuses a token issued with no more validity left than the caller needs', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(HOUR, Deadline.in(clock, 5_000)))
      .then(unexpected, caught);
    expect(error).toBeInstanceOf(MinValidityUnsatisfiableError);
    const served = await issuance.obtain(sandbox, asks(HOUR - 1, Deadline.in(clock, 5_000)));
    expect(served.record.expiresAt - clock.now()).toBe(HOUR);
  });

  it('measures each issuance for XFetch, with a default before the first', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(420);
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    expect(issuance.view.issuanceMs('sandbox')).toBe(300);
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(issuance.view.issuanceMs('sandbox')).toBe(420);
  });
});

describe('Class: LeasedIssuance under faults', () => {
  const code = (clock: ManualClock) => ({
    accessToken: 'late',
    expiresIn: 3600,
    upstreamTimestamp: undefined,
    requestedAt: clock.now(),
  });

  it('never sends the POST from a holder paused past its lease once another took over', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let posts = 0;
    const paused = container(store, clock, async (_c, options) => {
      // Authorization code in hand; the process stops here while another container takes the
      // lease over, issues and writes its token.
      store.items.set('sandbox', { token: record('theirs', T0 + HOUR + 5_000) });
      await options.fence?.();
      posts += 1;
      return code(clock);
    });
    const served = await paused.issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    expect(posts).toBe(0);
    expect(served.record.accessToken).toBe('theirs');
    expect(store.token('sandbox')?.accessToken).toBe('theirs');
  });

  it('never sends a POST whose lease confirmation went stale (paused after confirming)', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const renew = store.renewLease.bind(store);
    let posts = 0;
    const { issuance } = container(store, clock, async (_c, options) => {
      store.renewLease = async (...args) => {
        const renewed = await renew(...args);
        clock.advanceNow(2_500); // paused right after the confirmation came back
        return renewed;
      };
      await options.fence?.();
      posts += 1;
      return code(clock);
    });
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    expect(posts).toBe(0);
  });

  it('aborts the flow when a lease renewal fails, before anything is sent', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let posts = 0;
    let aborted = false;
    const { issuance } = container(store, clock, async (_c, options) => {
      store.renewLease = async () => {
        throw new Error('DynamoDB unreachable');
      };
      await clock.advance(heartbeatMs); // a heartbeat fires, and fails
      aborted = options.signal?.aborted ?? false;
      await options.fence?.();
      posts += 1;
      return code(clock);
    });
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    expect(aborted).toBe(true);
    expect(posts).toBe(0);
  });

  it('confirms the lease before the POST for the POST and a grace after it', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let leaseAtPost: number | undefined;
    const { issuance } = container(store, clock, async (_c, options) => {
      await options.fence?.();
      leaseAtPost = store.items.get('sandbox')?.lease?.expiresAt;
      return code(clock);
    });
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000)));
    // The POST's send window (a heartbeat, 1 s: the latest it may leave; its budget, 2 s, is
    // longer); then A1's bound: it is processed within twice the timeout of its send.
    expect(leaseAtPost).toBe(T0 + 1_000 + 4_000);
  });

  it('treats a POST with an unknown outcome as issued: drops the token it replaces and holds the lease through the grace', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 100_000);
    store.setToken(current);
    const { issuance, memory } = container(store, clock, async (_c, options) => {
      await options.fence?.();
      throw new UpstreamUnavailableError('Open API access-token request timed out after 2000 ms', {
        outcomeUnknown: true,
      });
    });
    primed(memory, clock, current, T0);
    const error = await issuance
      .refresh(sandbox, current, Deadline.in(clock, 10_000))
      .then(unexpected, caught);
    expect(error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE', outcomeUnknown: true });
    expect(store.token('sandbox')).toBeUndefined();
    expect(memory.entry('sandbox')).toBeUndefined();
    // Held for all the confirmation reserved (the POST's 1 s send window and A1's 4 s after it),
    // as a new version: the POST failed at once, so the reservation outlasts now + A1's bound.
    // 1 ms past the confirmation's expiry: 0.1.0 tells writes apart by holder and expiry.
    expect(store.items.get('sandbox')?.lease?.expiresAt).toBe(clock.now() + 1_000 + 4_000 + 1);
  });

  it('never serves a valid token that has a lease on it, live or lapsed, and replaces a lapsed one', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    // A refresh that died mid-flight: its POST may have revoked this token.
    store.items.set('sandbox', {
      token: record('suspect', T0 + HOUR),
      lease: {
        holder: 'dead:1',
        version: 'v-dead:1',
        expiresAt: T0 - 1,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    const { issuance, memory, calls } = container(store, clock);
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 20_000)));
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: 'issued' } });
    expect(calls).toHaveLength(1);
    expect(memory.entry('sandbox')?.record.accessToken).toBe('issued');
  });

  it('refuses a validity the known lifetime cannot give before any upstream call', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 1_000_000)); // tokens live one hour
    const { issuance, calls } = container(store, clock);
    await expect(
      issuance.obtain(sandbox, asks(HOUR + 1_000, Deadline.in(clock, 5_000))),
    ).rejects.toBeInstanceOf(MinValidityUnsatisfiableError);
    expect(calls).toEqual([]);
    expect(store.token('sandbox')?.accessToken).toBe('current');
  });

  it('stamps memory with the time the read was sent, not when its slow answer came', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + HOUR));
    const read = store.read.bind(store);
    store.read = async (name) => {
      clock.advanceNow(600);
      return read(name);
    };
    const { issuance, memory } = container(store, clock);
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)));
    expect(memory.entry('sandbox')?.checkedAt).toBe(T0);
  });

  it('announces the same countdown before replacing a token outside its window', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 1_000_000)); // far outside a 600 s window
    const posts: number[] = [];
    const { issuance } = container(store, clock, fencedIssue(clock, posts, 7200));
    await issuance.obtain(sandbox, asks(1_200_000, Deadline.in(clock, 10_000)));
    expect(posts).toEqual([T0 + 21 * countdownStepMs]);
  });

  it('refuses at once a replacement whose countdown cannot end before the deadline', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 1_000_000));
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(1_200_000, Deadline.in(clock, 4_000)))
      .then(unexpected, caught);
    expect(error).toMatchObject({ code: 'UPSTREAM_UNAVAILABLE' });
    expect(calls).toEqual([]);
    expect(store.calls.acquire).toBe(0);
  });
});

describe('Class: LeasedIssuance, lease edges', () => {
  const slowIssue = (clock: ManualClock, during: () => void) =>
    (async (_c, options) => {
      during();
      await clock.advance(heartbeatMs);
      await options.fence?.();
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    }) satisfies Issue;

  it('stops at the next heartbeat when its lease was taken over during the authorize step', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance } = container(
      store,
      clock,
      slowIssue(clock, () =>
        store.items.set('sandbox', {
          lease: {
            holder: 'other:1',
            version: 'v-other:1',
            expiresAt: T0 + 60_000,
            durationMs: 3_000,
            countdown: 0,
          },
        }),
      ),
    );
    // It waits for the new holder, which never finishes here: the caller gets its 503.
    const error = await issuance
      .obtain(sandbox, asks(60_000, Deadline.in(clock, 3_000)))
      .then(unexpected, caught);
    expect(error.message).toBe('Timed out waiting for another container to issue the token');
  });

  it('stops when its lease time ran out locally before a renewal came back', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let posts = 0;
    const { issuance } = container(store, clock, async (_c, options) => {
      store.renewLease = () => new Promise<boolean>(() => undefined); // renewals hang
      await clock.advance(leaseMs + heartbeatMs);
      await options.fence?.();
      posts += 1;
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 6_000))),
    ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    expect(posts).toBe(0);
  });

  it('does not start a replacement whose countdown cannot end before the deadline', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('current', T0 + 1_000_000));
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(1_200_000, Deadline.in(clock, 4_000)))
      .then(unexpected, caught);
    expect(error.message).toBe('Not enough time left to replace the token safely; retry shortly');
    expect(calls).toEqual([]);
    expect(store.items.get('sandbox')?.token).toEqual(record('current', T0 + 1_000_000));
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
  });

  it('does not start a token request without time for it and the write after it', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let posts = 0;
    const { issuance } = container(store, clock, async (_c, options) => {
      await clock.advance(500);
      await options.fence?.();
      posts += 1;
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    // 500 ms of authorization leave 300 ms: less than the shortest POST and the write after it.
    expect(DEFAULT_TIMING.minPostMs + storeReserveMs(DEFAULT_TIMING)).toBe(400);
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 800))),
    ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    expect(posts).toBe(0);
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
  });

  it('aborts a token request that outlives its confirmed lease', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let abortedAt: number | undefined;
    const { issuance } = container(store, clock, async (_c, options) => {
      await options.fence?.();
      options.signal?.addEventListener('abort', () => {
        abortedAt = clock.now();
      });
      await clock.advance(5_000); // the POST hangs past its 2 s budget
      throw new UpstreamUnavailableError('abandoned', { outcomeUnknown: true });
    });
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 10_000))),
    ).rejects.toMatchObject({
      outcomeUnknown: true,
    });
    expect(abortedAt).toBe(T0 + 2_000);
  });
});

describe('Class: LeasedIssuance, clocks', () => {
  it('does not take over a live lease from a clock running 2.5 s ahead of the holder’s', async () => {
    const clock = new ManualClock(T0 + 2_500); // this container runs 2.5 s ahead
    const store = new InMemoryTokenStore();
    // The holder (true time T0) took the lease for 3 s and renews it every second.
    let holderNow = T0 + 100;
    store.items.set('sandbox', {
      lease: {
        holder: 'alive:1',
        version: 'v-alive:1',
        expiresAt: T0 + 3_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    const sleep = clock.sleep.bind(clock);
    clock.sleep = async (ms: number) => {
      await sleep(ms);
      const before = holderNow;
      holderNow += ms;
      if (Math.floor(holderNow / 1_000) > Math.floor(before / 1_000)) {
        store.items.set('sandbox', {
          lease: {
            holder: 'alive:1',
            version: 'v-alive:1',
            expiresAt: holderNow + 3_000,
            durationMs: 3_000,
            countdown: 0,
          },
        });
      }
    };
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(60_000, Deadline.in(clock, 6_000)))
      .then(unexpected, caught);
    expect(error.message).toBe('Timed out waiting for another container to issue the token');
    expect(calls).toEqual([]);
  });

  it('says it timed out waiting for the holder, not that the store failed, when a read cannot answer by the deadline', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', {
      lease: {
        holder: 'alive:1',
        version: 'v-alive:1',
        expiresAt: T0 + 60_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    // A read sent at the deadline fails, as one bound to it does (see `#bounded`).
    const read = store.read.bind(store);
    store.read = async (name: string) => {
      if (clock.now() >= T0 + 2_000) throw new Error('no time left for the read');
      return read(name);
    };
    clock.draw = 0.99;
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(60_000, Deadline.in(clock, 2_000)))
      .then(unexpected, caught);
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(error.message).toBe('Timed out waiting for another container to issue the token');
    expect(calls).toEqual([]);
  });

  // I3: a wait for the holder that ends past the caller's deadline (the container was frozen
  // while it slept) answers with the timeout at once: no read is sent after the deadline.
  it('I3: answers with the timeout at once, reading nothing more, when its wait for the holder overran the deadline', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', {
      lease: {
        holder: 'alive:1',
        version: 'v-alive:1',
        expiresAt: T0 + 60_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    const sleep = clock.sleep.bind(clock);
    clock.sleep = (ms: number) => sleep(ms + 5_000); // frozen past the deadline
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(60_000, Deadline.in(clock, 2_000)))
      .then(unexpected, caught);
    expect(error.message).toBe('Timed out waiting for another container to issue the token');
    expect(store.calls.read).toBe(1);
    expect(calls).toEqual([]);
  });

  // A store that fails while the lease is taken answers the caller STORE_UNAVAILABLE (503,
  // retry), never an internal error; nothing is sent upstream.
  it('answers STORE_UNAVAILABLE when the store fails while the lease is taken', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.acquireLease = async () => {
      throw new Error('connection reset');
    };
    const { issuance, calls } = container(store, clock);
    const error = await issuance
      .obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000)))
      .then(unexpected, caught);
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect(error.message).toMatch(/take the lease/);
    expect(calls).toEqual([]);
  });

  it('takes over a lease nobody renews once it saw it unchanged for its duration, on its own clock', async () => {
    const clock = new ManualClock(T0 - 2_500); // this container runs 2.5 s behind
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', {
      lease: {
        holder: 'dead:1',
        version: 'v-dead:1',
        expiresAt: T0 + 3_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    const { issuance, calls } = container(store, clock);
    const served = await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 8_000)));
    expect(served.source).toBe('upstream');
    // First seen at T0 - 2.5 s (its clock): taken over 3 s later, whatever the lease's timestamp said.
    expect(calls).toHaveLength(1);
    expect(calls[0]).toBeGreaterThanOrEqual(T0 - 2_500 + 3_000);
    expect(calls[0]).toBeLessThan(T0 - 2_500 + 3_000 + 600);
  });
});

describe('Class: LeasedIssuance, store failing at the fence', () => {
  it('sends nothing and answers STORE_UNAVAILABLE when the lease cannot be confirmed', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let posts = 0;
    const { issuance } = container(store, clock, async (_c, options) => {
      store.failing = true; // DynamoDB refuses from here on
      await options.fence?.();
      posts += 1;
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).rejects.toBeInstanceOf(StoreUnavailableError);
    expect(posts).toBe(0);
  });
});

describe('Class: LeasedIssuance, taking the lease', () => {
  /** Records every lease request `store` is asked for, at the clock's instant. */
  const recordTakes = (store: InMemoryTokenStore, clock: ManualClock) => {
    const takes: { at: number; request: LeaseRequest }[] = [];
    const acquire = store.acquireLease.bind(store);
    store.acquireLease = async (name, request) => {
      takes.push({ at: clock.now(), request });
      return acquire(name, request);
    };
    return takes;
  };

  it('I1: takes a counting version when a countdown follows, a whole lease otherwise, its expiry on its own clock', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const takes = recordTakes(store, clock);
    const { issuance } = container(store, clock);
    // No token yet: no countdown, a whole lease.
    await issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 60_000)));
    // A revoking upstream's refresh counts down first: the first version is a counting one.
    const current = store.token('sandbox');
    if (!current) throw new Error('no token written');
    await clock.advance(1_000);
    const refresh = issuance.refresh(sandbox, current, Deadline.in(clock, 60_000));
    for (let ms = 0; ms < 20_000 && takes.length < 2; ms += 1) await clock.advance(1);
    await clock.advance(10_000);
    await refresh;
    const [first, second] = takes;
    expect(first?.request.countdown).toBe(0);
    expect(first?.request.durationMs).toBe(leaseMs);
    expect(first?.request.leaseExpiresAt).toBe((first?.at ?? 0) + leaseMs);
    expect(second?.request.countdown).toBeGreaterThan(1);
    expect(second?.request.durationMs).toBe(countingLeaseMs(DEFAULT_TIMING));
    expect(second?.request.leaseExpiresAt).toBe(
      (second?.at ?? 0) + countingLeaseMs(DEFAULT_TIMING),
    );
  });

  it('refuses every issuance while refused (a function timeout too short), counts it, and takes no lease', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const takes = recordTakes(store, clock);
    const { issuance, metrics, calls } = container(store, clock);
    issuance.refusal = 'the function timeout is too short';
    await expect(
      issuance.obtain(sandbox, asks(60_000, Deadline.in(clock, 5_000))),
    ).rejects.toBeInstanceOf(FunctionTimeoutTooShortError);
    expect(metrics.get(MetricName.IssuanceRefused)).toBe(1);
    expect([takes.length, calls.length]).toEqual([0, 0]);
  });

  it('logs why it refreshes, with the countdown it announces: ahead of expiry, or a reported token', async () => {
    for (const [cause, message] of [
      [IssuanceCause.RefreshAhead, 'Refreshing the token ahead of expiry'],
      [IssuanceCause.Invalidate, 'Replacing a reported token'],
    ] as const) {
      const clock = new ManualClock(T0);
      const store = new InMemoryTokenStore();
      const current = record('current', T0 + 200_000);
      store.setToken(current);
      const { issuance, logger } = container(store, clock);
      const refresh = issuance.refresh(sandbox, current, Deadline.in(clock, 60_000), 'c', cause);
      await clock.advance(20_000);
      expect((await refresh)?.record.accessToken).toBe('issued');
      const announced = logger.lines.filter(
        (line) => line.level === 'info' && line.message === message,
      );
      expect(announced).toHaveLength(1);
      expect(announced[0]?.attributes[0]).toEqual({
        connection: 'sandbox',
        countdown: issuance.refreshMs(sandbox, current).countdown,
      });
    }
  });
});
