/**
 * The holder's flow (lib/broker/holder/issue-under-lease.ts) against a store and a manual clock:
 * what an operator reads of each way a flow ends (the log line names the connection and the
 * token's digest, never the token), what memory may vouch for after each, and the clean-up's
 * store calls (the release that restores a token only when it proves the lease, the grace
 * renewal's expiry). Written for the survivors of the mutation run of issue 36.
 */
import { describe, expect, it } from 'vitest';
import {
  cleanUp,
  type HolderDeps,
  issueUnderLease,
  type LeasedFlow,
  LOST,
} from '../../../lib/broker/holder/issue-under-lease.js';
import { IssuanceCause, type Issue, UNNAMED_CALLER } from '../../../lib/broker/issuance/index.js';
import { DEFAULT_TIMING, ownRecheckMs, proofMs } from '../../../lib/broker/timing/index.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import { ConnectionView } from '../../../lib/broker/view/index.js';
import { Deadline } from '../../../lib/clock.js';
import { UpstreamUnavailableError } from '../../../lib/errors.js';
import { MetricName } from '../../../lib/metrics.js';
import type { LeaseRef, LeaseTerms, StoreCall, TokenRecord } from '../../../lib/ports.js';
import { caught, unexpected } from '../../support/errors.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  InMemoryTokenStore,
  ManualClock,
} from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const HOUR = 3_600_000;
const { leaseMs, proofMarginMs } = DEFAULT_TIMING;
const SETTINGS = {
  refreshWindowMs: 600_000,
  // Long, so that what memory may vouch for is the confirmed lease's, not the re-check's.
  memoryRecheckMs: 30_000,
  upstreamTimeoutMs: 2_000,
  timing: DEFAULT_TIMING,
};
/** The token issued: a credential, which no log line may carry. */
const SECRET = 'issued-access-token-s3cr3t';
const sandbox = connection();
const HELD: LeaseRef = { holder: 'h:1', version: 'v0' };

/** HELD taken now for a whole lease, at countdown 0, replacing `replaced`. */
const takeLease = (store: InMemoryTokenStore, clock: ManualClock, replaced?: TokenRecord) =>
  store.acquireLease('sandbox', {
    ...HELD,
    leaseExpiresAt: clock.now() + leaseMs,
    durationMs: leaseMs,
    countdown: 0,
    replacesDigest: replaced?.tokenDigest,
  });

const stored = (accessToken: string, expiresAt: number): TokenRecord => ({
  connection: 'sandbox',
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - HOUR,
  expiresAt,
});

/** An upstream that passes the fence, takes `postMs` (its wall clock stepped by `stepMs`). */
const upstream =
  (
    clock: ManualClock,
    { postMs = 0, stepMs = 0, fail }: { postMs?: number; stepMs?: number; fail?: Error } = {},
  ): Issue =>
  async (_c, options) => {
    await options.fence?.();
    if (stepMs !== 0) clock.step(stepMs);
    await clock.sleep(postMs);
    if (fail) throw fail;
    return {
      accessToken: SECRET,
      expiresIn: 3600,
      upstreamTimestamp: undefined,
      requestedAt: clock.now(),
    };
  };

/**
 * A holder that has just taken the lease (countdown 0: it fences at once) on a store holding
 * `replaced`, if given; the clocks are 10 s in, so instants and durations differ.
 */
const holding = async (replaced?: TokenRecord) => {
  const clock = new ManualClock(T0);
  await clock.advance(10_000);
  const store = new InMemoryTokenStore();
  if (replaced) store.setToken(replaced);
  const logger = captureLogger();
  const metrics = new CountingMetrics();
  const view = new ConnectionView(clock, SETTINGS);
  const leasedAt = clock.monotonic();
  await takeLease(store, clock, replaced);
  const flow: LeasedFlow = {
    lease: HELD,
    deadline: Deadline.in(clock, 10_000),
    leasedAt,
    answeredAt: clock.monotonic(),
    countdown: 0,
    suspect: false,
    replaced,
    cause: replaced ? IssuanceCause.RefreshAhead : IssuanceCause.FirstToken,
    forced: false,
    caller: UNNAMED_CALLER,
    needMs: 60_000,
  };
  const held = new Set<{ abandon(reason: string): void }>();
  const run = (issue: Issue) => {
    const deps: HolderDeps = {
      store,
      clock,
      issue,
      view,
      settings: SETTINGS,
      logger,
      metrics,
      held,
      bounded: (operation) => operation,
    };
    return issueUnderLease(deps, sandbox, flow);
  };
  /** The log lines with `message`, and whether any line carries `token`. */
  const logged = (message: string) => logger.lines.filter((line) => line.message === message);
  const leaks = (token: string) => JSON.stringify(logger.lines).includes(token);
  return { clock, store, logger, metrics, view, flow, held, run, logged, leaks };
};

/** Records when each lease write was sent (monotonic) and its terms, then lets it through. */
const recordRenewals = (store: InMemoryTokenStore, clock: ManualClock) => {
  const renewals: { sentAt: number; terms: LeaseTerms }[] = [];
  const renew = store.renewLease.bind(store);
  store.renewLease = async (name, lease, next, call) => {
    renewals.push({ sentAt: clock.monotonic(), terms: next });
    return renew(name, lease, next, call);
  };
  return renewals;
};

class StoreTimeout extends Error {
  override readonly name = 'TimeoutError';
}

describe('Function: issueUnderLease', () => {
  it('keeps a written token in memory for its re-check, under the caller’s deadline', async () => {
    const { clock, store, view, flow, held, run } = await holding();
    const sent: { wall: number; monotonic: number; call?: StoreCall }[] = [];
    const put = store.putToken.bind(store);
    store.putToken = async (record, lease, call) => {
      sent.push({ wall: clock.now(), monotonic: clock.monotonic(), call });
      return put(record, lease, call);
    };
    const served = await run(upstream(clock, { postMs: 300 }));
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: SECRET } });
    expect(store.token('sandbox')?.accessToken).toBe(SECRET);
    expect(sent).toHaveLength(1);
    expect(sent[0]?.call?.deadline).toBe(flow.deadline);
    const record = store.token('sandbox') as TokenRecord;
    expect(record.recheckMs).toBe(ownRecheckMs(record, SETTINGS));
    // Stored: memory vouches for it for a whole re-check from the write's send, not "unstored".
    expect(view.knowledge('sandbox')?.kept?.entry).toEqual({
      record,
      checkedAt: sent[0]?.wall,
      checkedAtMonotonic: sent[0]?.monotonic,
      until: (sent[0]?.wall ?? 0) + proofMs(record, undefined, SETTINGS),
    });
    expect(held.size).toBe(0);
  });

  it('logs a failed token write by connection and error name, never the token, and vouches for it only while the confirmed lease lasts, on the monotonic clock', async () => {
    const { clock, store, view, run, logged, leaks } = await holding();
    const renewals = recordRenewals(store, clock);
    const sent: { wall: number; monotonic: number }[] = [];
    store.putToken = async () => {
      sent.push({ wall: clock.now(), monotonic: clock.monotonic() });
      throw new StoreTimeout('DynamoDB request timed out');
    };
    // NTP steps the wall clock back 1 s during the POST: memory must not outlast the lease.
    const served = await run(upstream(clock, { postMs: 400, stepMs: -1_000 }));
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: SECRET } });
    expect(logged('Token store write failed; token kept in memory only')).toEqual([
      {
        level: 'error',
        message: expect.any(String),
        attributes: [{ connection: 'sandbox', error: { name: 'TimeoutError' } }],
      },
    ]);
    expect(leaks(SECRET)).toBe(false);
    const fence = renewals.find((renewal) => renewal.terms.countdown === 0);
    expect(fence).toBeDefined();
    expect(sent).toHaveLength(1);
    const [write] = sent as [{ wall: number; monotonic: number }];
    // The confirmation's term, counted on the monotonic clock from the write's send.
    const confirmedForMs = (fence?.sentAt ?? 0) + (fence?.terms.durationMs ?? 0) - write.monotonic;
    expect(confirmedForMs).toBe(5_000 - 400); // the fence: a send window (1 s) and 2 × 2 s
    expect(view.knowledge('sandbox')?.kept?.entry).toMatchObject({
      checkedAt: write.wall,
      checkedAtMonotonic: write.monotonic,
      until: write.wall + confirmedForMs - proofMarginMs,
      unstored: true,
    });
  });

  it('logs a token write the store rejected with nothing at all, and keeps the token in memory', async () => {
    const { store, view, clock, run, logged } = await holding();
    store.putToken = () => Promise.reject(undefined);
    const served = await run(upstream(clock));
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: SECRET } });
    expect(logged('Token store write failed; token kept in memory only')).toHaveLength(1);
    expect(logged('Token store write failed; token kept in memory only')[0]?.attributes).toEqual([
      { connection: 'sandbox', error: { name: undefined } },
    ]);
    expect(view.entry('sandbox')?.unstored).toBe(true);
  });

  it('counts and logs a POST of unknown outcome with the replaced token’s digest and the grace, never a token, and rethrows its error', async () => {
    const current = stored('current-access-token-s3cr3t', T0 + 200_000);
    const { clock, store, metrics, run, logged, leaks } = await holding(current);
    const lostAnswer = new UpstreamUnavailableError('access-token request timed out', {
      outcomeUnknown: true,
    });
    const error = await run(upstream(clock, { postMs: 700, fail: lostAnswer })).then(
      unexpected,
      caught,
    );
    expect(error).toBe(lostAnswer);
    expect(metrics.get(MetricName.UnknownOutcomes)).toBe(1);
    expect(logged('Access-token request outcome unknown; the current token is dropped')).toEqual([
      {
        level: 'error',
        message: expect.any(String),
        attributes: [{ connection: 'sandbox', tokenDigest: current.tokenDigest, graceMs: 2_000 }],
      },
    ]);
    expect(leaks(current.accessToken)).toBe(false);
    // The current token may be revoked: gone from the store.
    expect(store.token('sandbox')).toBeUndefined();
  });

  it('rethrows the error of a POST of unknown outcome that replaced no token, and logs it with no digest', async () => {
    const { clock, metrics, run, logged } = await holding();
    const lostAnswer = new UpstreamUnavailableError('connection reset', { outcomeUnknown: true });
    const error = await run(upstream(clock, { fail: lostAnswer })).then(unexpected, caught);
    expect(error).toBe(lostAnswer);
    expect(metrics.get(MetricName.UnknownOutcomes)).toBe(1);
    expect(
      logged('Access-token request outcome unknown; the current token is dropped')[0]?.attributes,
    ).toEqual([{ connection: 'sandbox', tokenDigest: undefined, graceMs: 2_000 }]);
  });

  it('rethrows a POST refused outright, frees the lease and keeps the replaced token, confirmed by the release', async () => {
    const current = stored('current-access-token-s3cr3t', T0 + 200_000);
    const { clock, store, view, metrics, logger, run } = await holding(current);
    view.confirmed(current, { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() });
    const refused = new UpstreamUnavailableError('invalid_grant', { upstreamStatus: 400 });
    const error = await run(upstream(clock, { postMs: 300, fail: refused })).then(
      unexpected,
      caught,
    );
    expect(error).toBe(refused);
    // Nothing was issued: the lease is freed, the current token stays (stored and in memory).
    expect(store.items.get('sandbox')?.lease).toBeUndefined();
    expect(store.token('sandbox')).toEqual(current);
    expect(view.knowledge('sandbox')?.kept?.entry).toMatchObject({
      record: current,
      checkedAt: clock.now(),
      checkedAtMonotonic: clock.monotonic(),
    });
    expect(metrics.get(MetricName.UnknownOutcomes)).toBe(0);
    expect(logger.lines.filter((line) => line.level !== 'info')).toEqual([]);
  });

  it('logs a lease lost before the POST with the reason, sends nothing, and answers LOST', async () => {
    const { clock, store, metrics, run, logged } = await holding();
    store.renewLease = async () => false; // the confirmation does not land: taken over
    let posts = 0;
    const answer = await run(async (_c, options) => {
      await options.fence?.();
      posts += 1;
      return {
        accessToken: SECRET,
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: clock.now(),
      };
    });
    expect(answer).toBe(LOST);
    expect(posts).toBe(0);
    expect(logged('Lease lost before the access-token request; nothing was sent')).toEqual([
      {
        level: 'warn',
        message: expect.any(String),
        attributes: [
          { connection: 'sandbox', reason: 'Lease not confirmed before the access-token request' },
        ],
      },
    ]);
    expect(metrics.get(MetricName.UnknownOutcomes)).toBe(0);
  });

  it('logs a token refused because the lease was taken over with the token’s digest, never the token, and answers LOST', async () => {
    const { clock, store, view, run, logged, leaks } = await holding();
    store.putToken = async () => false; // the lease went to another holder meanwhile
    const answer = await run(upstream(clock));
    expect(answer).toBe(LOST);
    expect(logged('Lease was taken over while issuing; using the new holder’s token')).toEqual([
      {
        level: 'warn',
        message: expect.any(String),
        attributes: [{ connection: 'sandbox', tokenDigest: tokenDigest(SECRET) }],
      },
    ]);
    expect(leaks(SECRET)).toBe(false);
    expect(view.entry('sandbox')).toBeUndefined();
  });
});

/**
 * The clean-up of a flow replacing a token (kept in memory since 10 s in), or none; its deadline
 * 30 s, its lease taken.
 */
const cleaning = async (replacesToken = true) => {
  const replaced = replacesToken ? stored('current', T0 + HOUR) : undefined;
  const clock = new ManualClock(T0);
  await clock.advance(10_000);
  const store = new InMemoryTokenStore();
  const view = new ConnectionView(clock, SETTINGS);
  const keptAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
  if (replaced) {
    store.setToken(replaced);
    view.confirmed(replaced, keptAt);
  }
  await takeLease(store, clock, replaced);
  await clock.advance(1_000);
  const deadline = Deadline.in(clock, 30_000);
  const effects = cleanUp({ store, view, clock, bounded: (operation) => operation }, sandbox, {
    replaced,
    deadline,
  });
  return { clock, store, view, deadline, effects, keptAt };
};

describe('Function: cleanUp', () => {
  describe('release', () => {
    it('restores the replaced token as confirmed from the release’s send when the release proves the lease was still ours', async () => {
      const { clock, store, view, deadline, effects } = await cleaning();
      const release = store.releaseLease.bind(store);
      store.releaseLease = async (name, lease, call) => {
        await clock.sleep(40); // the answer comes 40 ms later
        return release(name, lease, call);
      };
      const sentAt = clock.now();
      const sentAtMonotonic = clock.monotonic();
      await effects.release(HELD, true);
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
      expect(store.deadlines.release).toBe(deadline);
      expect(view.knowledge('sandbox')?.kept?.entry).toMatchObject({
        checkedAt: sentAt,
        checkedAtMonotonic: sentAtMonotonic,
      });
    });

    it('drops the replaced token when the release proves nothing (the lease was no longer ours)', async () => {
      const { view, effects } = await cleaning();
      await effects.release({ holder: 'h:1', version: 'taken-over' }, true);
      expect(view.entry('sandbox')).toBeUndefined();
    });

    it('drops the replaced token when the store does not answer the release, and still resolves', async () => {
      const { store, view, effects } = await cleaning();
      store.failing = true;
      await expect(effects.release(HELD, true)).resolves.toBeUndefined();
      expect(view.entry('sandbox')).toBeUndefined();
    });

    it('leaves memory alone when not told to restore, whatever the release proves', async () => {
      for (const ref of [HELD, { holder: 'h:1', version: 'taken-over' }]) {
        const { view, effects, keptAt } = await cleaning();
        await effects.release(ref, false);
        expect(view.knowledge('sandbox')?.kept?.entry).toMatchObject({
          checkedAt: keptAt.sentAt,
          checkedAtMonotonic: keptAt.sentAtMonotonic,
        });
      }
    });

    it('leaves another token kept in memory meanwhile (the new holder’s) alone', async () => {
      const { clock, view, effects } = await cleaning();
      const theirs = stored('theirs', T0 + 2 * HOUR);
      view.confirmed(theirs, { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() });
      await effects.release({ holder: 'h:1', version: 'taken-over' }, true);
      expect(view.entry('sandbox')?.record.tokenDigest).toBe(theirs.tokenDigest);
    });

    it('resolves with nothing kept in memory, and when the flow replaced no token', async () => {
      const nothingKept = await cleaning();
      nothingKept.view.drop('sandbox');
      await expect(nothingKept.effects.release(HELD, true)).resolves.toBeUndefined();
      expect(nothingKept.view.entry('sandbox')).toBeUndefined();
      const noToken = await cleaning(false);
      await expect(noToken.effects.release(HELD, true)).resolves.toBeUndefined();
      expect(noToken.store.items.get('sandbox')?.lease).toBeUndefined();
    });
  });

  describe('dropReplaced', () => {
    it('forgets the replaced token and deletes it from the store as reported now, within the deadline', async () => {
      const { clock, store, view, deadline, effects } = await cleaning();
      await effects.dropReplaced();
      expect(view.entry('sandbox')).toBeUndefined();
      expect(store.token('sandbox')).toBeUndefined();
      expect(store.items.get('sandbox')?.invalidatedAt).toBe(clock.now());
      expect(store.deadlines.delete).toBe(deadline);
    });

    it('forgets it even when the store is down, and resolves', async () => {
      const { store, view, effects } = await cleaning();
      store.failing = true;
      await expect(effects.dropReplaced()).resolves.toBeUndefined();
      expect(view.entry('sandbox')).toBeUndefined();
    });
  });

  describe('holdForGrace', () => {
    /** The clean-up with its grace renewals recorded. */
    const graced = async () => {
      const cleaned = await cleaning();
      const renewals: { lease: LeaseRef; terms: LeaseTerms; call?: StoreCall }[] = [];
      cleaned.store.renewLease = async (_name, lease, terms, call) => {
        renewals.push({ lease, terms, call });
        return true;
      };
      return { ...cleaned, renewals };
    };

    it('holds the lease through the grace, counted on the monotonic clock from now, as a new version at countdown 0', async () => {
      const { clock, deadline, effects, renewals } = await graced();
      const until = clock.monotonic() + 4_000;
      clock.step(-1_000); // the wall clock stepped back: the grace left is still 4 s
      const now = clock.now();
      await effects.holdForGrace(HELD, now - 2_000, until);
      expect(renewals).toHaveLength(1);
      const [{ lease, terms, call }] = renewals as [(typeof renewals)[number]];
      expect(lease).toBe(HELD);
      expect(terms).toEqual({
        version: expect.any(String),
        leaseExpiresAt: now + 4_000,
        durationMs: 4_000,
        countdown: 0,
      });
      expect(terms.version).not.toBe(HELD.version);
      expect(call?.deadline).toBe(deadline);
    });

    it('with no confirmation, holds for the grace left', async () => {
      const { clock, effects, renewals } = await graced();
      const now = clock.now();
      await effects.holdForGrace(HELD, undefined, clock.monotonic() + 2_500);
      expect(renewals[0]?.terms).toMatchObject({ leaseExpiresAt: now + 2_500, durationMs: 2_500 });
    });

    it('never writes an expiry at or before the confirmation’s: 1 ms past it when the grace ends sooner', async () => {
      const { clock, effects, renewals } = await graced();
      const now = clock.now();
      await effects.holdForGrace(HELD, now + 6_000, clock.monotonic() + 4_000);
      expect(renewals[0]?.terms).toMatchObject({
        leaseExpiresAt: now + 6_001,
        durationMs: 6_001,
        countdown: 0,
      });
    });

    it('holds from now, never into the past, once the grace has run out', async () => {
      const { clock, effects, renewals } = await graced();
      const now = clock.now();
      await effects.holdForGrace(HELD, now - 2_000, clock.monotonic() - 500);
      expect(renewals[0]?.terms).toMatchObject({ leaseExpiresAt: now, durationMs: 0 });
    });

    it('resolves when the store does not answer', async () => {
      const { clock, store, effects } = await cleaning();
      store.failing = true;
      await expect(
        effects.holdForGrace(HELD, undefined, clock.monotonic() + 1_000),
      ).resolves.toBeUndefined();
    });
  });
});
