/**
 * The observer's loop (lib/broker/observer/obtain.ts), driven directly over an in-memory store:
 * the wait at an announced cut-over (liveness, I3), what each read logs and counts, and how a
 * store failure is told. The decision itself is observer.test.ts's.
 */
import { describe, expect, it } from 'vitest';
import { obtain, StoreReachability, storeFailure } from '../../../lib/broker/observer/obtain.js';
import {
  cutOverEstimate,
  DEFAULT_TIMING,
  readReserveMs,
} from '../../../lib/broker/timing/index.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import { ConnectionView } from '../../../lib/broker/view/index.js';
import { Deadline } from '../../../lib/clock.js';
import type { Lease, TokenRecord } from '../../../lib/ports.js';
import {
  asks,
  CountingMetrics,
  captureLogger,
  connection,
  InMemoryTokenStore,
  ManualClock,
} from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const HOUR = 3_600_000;
const settings = { refreshWindowMs: 600_000, memoryRecheckMs: 5_000, timing: DEFAULT_TIMING };
const sandbox = connection();
const { countdownStepMs, skewToleranceMs } = DEFAULT_TIMING;

const record = (accessToken: string): TokenRecord => ({
  connection: 'sandbox',
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: T0,
  expiresAt: T0 + HOUR,
});

/** Another container's lease, counting down from `countdown`. */
const theirs = (countdown: number, extra: Partial<Lease> = {}): Lease => ({
  holder: 'other:1',
  version: `v-${countdown}`,
  expiresAt: T0 + 3_000,
  durationMs: 3_000,
  countdown,
  ...extra,
});

/**
 * One container's loop over `store`: when each read was sent, and what it logged and counted.
 * `beforeRead(n)` runs before the n-th read (from 1): another container's writes. It never
 * needs a lease of its own here.
 */
const container = (
  store: InMemoryTokenStore,
  clock: ManualClock,
  beforeRead = (_n: number) => {},
) => {
  const view = new ConnectionView(clock, settings);
  const logger = captureLogger();
  const metrics = new CountingMetrics();
  const reads: number[] = [];
  const read = store.read.bind(store);
  store.read = async (name) => {
    reads.push(clock.now());
    beforeRead(reads.length);
    return read(name);
  };
  const deps = {
    store,
    view,
    clock,
    logger,
    metrics,
    settings,
    bounded: <T>(operation: Promise<T>) => operation,
    reachability: new StoreReachability(),
  };
  const run = (leftMs = 10_000) =>
    obtain(deps, sandbox, asks(60_000, Deadline.in(clock, leftMs)), {
      letGo: () => Promise.reject(new Error('no let-go expected')),
      acquire: () => Promise.reject(new Error('no lease expected')),
    });
  const lines = (message: string) => logger.lines.filter((line) => line.message === message);
  return { view, logger, metrics, reads, run, lines };
};

describe('Function: obtain (the observer’s loop)', () => {
  it('logs each read’s decision at DEBUG, and its first wait for a holder once at INFO, counted in LeaseWaits', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', { lease: theirs(1) });
    // The holder's token lands before the third read.
    const { reads, metrics, run, lines } = container(store, clock, (n) => {
      if (n === 3) store.items.set('sandbox', { token: record('issued') });
    });
    await expect(run()).resolves.toMatchObject({
      source: 'dynamodb',
      record: { accessToken: 'issued' },
    });
    expect(reads).toHaveLength(3);
    const [first = 0, second = 0, third = 0] = reads;
    expect(lines('Store read decided').map((line) => line.attributes[0])).toEqual([
      {
        connection: 'sandbox',
        decision: 'wait',
        waitMs: second - first,
        countdown: 1,
        readMs: 0,
        waits: 0,
      },
      {
        connection: 'sandbox',
        decision: 'wait',
        waitMs: third - second,
        countdown: 1,
        readMs: 0,
        waits: 1,
      },
      // No waitMs but for a wait.
      { connection: 'sandbox', decision: 'serve', countdown: undefined, readMs: 0, waits: 2 },
    ]);
    expect(lines('Store read decided')[2]?.attributes[0]).not.toHaveProperty('waitMs');
    expect(lines('Waiting for another container to issue the token')).toEqual([
      {
        level: 'info',
        message: 'Waiting for another container to issue the token',
        attributes: [{ connection: 'sandbox', leaseExpiresInMs: 3_000 }],
      },
    ]);
    expect(metrics.get('LeaseWaits')).toBe(1);
  });

  it('tells a store failure as a typed error, the SDK’s error as its cause when there is one', () => {
    const sdk = new Error('ECONNRESET');
    expect(storeFailure('read', sdk)).toMatchObject({
      name: 'StoreUnavailableError',
      message: 'The token store could not be read; retry shortly',
      cause: sdk,
    });
    expect(storeFailure('answer in time')).not.toHaveProperty('cause');
  });
});

describe('Function: obtain, at an announced cut-over (liveness, I3)', () => {
  // A token read at T0 under another holder's countdown of 12, its step announced (300 ms) or
  // not. Memory's proof ends at `until`; `far` is two steps and the POST before the successor's
  // estimate, `successorAt`. The store already holds the successor: only when it is read moves.
  const scene = async ({
    stepMs,
    startAt,
    leftMs = 10_000,
    firstSeenAt = T0,
    expiresAt = T0 + 3_000,
  }: {
    stepMs?: number;
    startAt: (at: { until: number; far: number; successorAt: number }) => number;
    leftMs?: number;
    firstSeenAt?: number;
    expiresAt?: number;
  }) => {
    const clock = new ManualClock(firstSeenAt);
    const store = new InMemoryTokenStore();
    const c = container(store, clock);
    const lease = theirs(12, { expiresAt, ...(stepMs === undefined ? {} : { stepMs }) });
    const state = { token: record('current'), lease };
    c.view.observe(
      sandbox,
      state,
      { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() },
      clock.now(),
    );
    if (firstSeenAt < T0) {
      await clock.advance(T0 - firstSeenAt);
      c.view.observe(sandbox, state, { sentAt: T0, sentAtMonotonic: clock.monotonic() }, T0);
    }
    const until = c.view.entry('sandbox')?.until ?? 0;
    const estimate = cutOverEstimate(T0, lease, DEFAULT_TIMING.defaultIssuanceMs, DEFAULT_TIMING);
    const far = T0 + (12 - 2) * estimate.stepMs;
    const at = { until, far, successorAt: estimate.successorAt };
    const start = startAt(at);
    await clock.advance(start - T0);
    store.items.set('sandbox', { token: record('successor') });
    await expect(c.run(leftMs)).resolves.toMatchObject({ record: { accessToken: 'successor' } });
    const waited = c.lines('Waited for the announced cut-over').map((l) => l.attributes[0]);
    return { ...at, start, read: c.reads[0], waited };
  };

  it('waits from two steps before the successor’s estimate, once memory’s proof has run out, until the estimate', async () => {
    // Announced at 300 ms: the proof (counted at the 250 ms floor) ends before `far`.
    const s = await scene({ stepMs: 300, startAt: ({ far }) => far });
    expect(s.until).toBeLessThan(s.far);
    expect(s.read).toBe(s.successorAt);
    expect(s.waited).toEqual([{ connection: 'sandbox', cutOverMs: s.successorAt - s.far }]);
    const early = await scene({ stepMs: 300, startAt: ({ far }) => far - 1 });
    expect([early.read, early.waited]).toEqual([early.start, []]);
  });

  it('reads at once while memory’s proof holds, and waits from its end', async () => {
    // At the floor step the proof outlasts `far`.
    const held = await scene({ startAt: ({ until }) => until - 1 });
    expect(held.until).toBeGreaterThan(held.far);
    expect([held.read, held.waited]).toEqual([held.start, []]);
    const over = await scene({ startAt: ({ until }) => until });
    expect(over.read).toBe(over.successorAt);
    expect(over.waited).toEqual([
      { connection: 'sandbox', cutOverMs: over.successorAt - over.until },
    ]);
  });

  it('reads at once from the estimate on, and wakes a millisecond before it', async () => {
    const due = await scene({ stepMs: 300, startAt: ({ successorAt }) => successorAt });
    expect([due.read, due.waited]).toEqual([due.start, []]);
    const almost = await scene({ stepMs: 300, startAt: ({ successorAt }) => successorAt - 1 });
    expect([almost.read, almost.waited]).toEqual([
      almost.successorAt,
      [{ connection: 'sandbox', cutOverMs: 1 }],
    ]);
  });

  it('I3: wakes with time left for the read, and does not wait without it', async () => {
    const reserve = readReserveMs(undefined, DEFAULT_TIMING);
    const cut = await scene({ stepMs: 300, startAt: ({ far }) => far, leftMs: reserve + 100 });
    expect([cut.read, cut.waited]).toEqual([
      cut.start + 100,
      [{ connection: 'sandbox', cutOverMs: 100 }],
    ]);
    const none = await scene({ stepMs: 300, startAt: ({ far }) => far, leftMs: reserve });
    expect([none.read, none.waited]).toEqual([none.start, []]);
  });

  it('waits only on a countdown seen to move: its version first seen at most a step before the read', async () => {
    const moving = await scene({
      stepMs: 300,
      startAt: ({ far }) => far,
      firstSeenAt: T0 - countdownStepMs,
    });
    expect(moving.read).toBe(moving.successorAt);
    const still = await scene({
      stepMs: 300,
      startAt: ({ far }) => far,
      firstSeenAt: T0 - countdownStepMs - 1,
    });
    expect([still.read, still.waited]).toEqual([still.start, []]);
    // A version never recorded here (its expiry past any skew at the read) announces nothing.
    const unseen = await scene({
      stepMs: 300,
      startAt: ({ far }) => far,
      expiresAt: T0 - skewToleranceMs - 1,
    });
    expect([unseen.read, unseen.waited]).toEqual([unseen.start, []]);
  });
});
