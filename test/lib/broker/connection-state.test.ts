/**
 * What a container knows about a connection (docs/protocol.md, "What a container knows:
 * ConnectionView"): one value per connection, changed only by `applyEvent`, table-tested here
 * by event and state; queries that write nothing.
 *
 * And time: a token's expiry is an epoch the upstream stated, compared with the wall clock when
 * it is read, and judged on the monotonic clock from then on ("Time"). A wall clock stepped back
 * (an NTP correction) must not serve a token past its expiry.
 */

import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMING } from '../../../lib/broker/timing/index.js';
import {
  applyEvent,
  type ConnectionEvent,
  ConnectionView,
  KNOWN_PER_CONNECTION,
  type Knowledge,
  NOTHING_KNOWN,
} from '../../../lib/broker/view/connection-state.js';
import type { MemoryEntry } from '../../../lib/broker/view/serving.js';
import {
  BadRequestError,
  StoreUnavailableError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import type { Lease, TokenRecord } from '../../../lib/ports.js';
import { connection, ManualClock } from '../../support/fakes.js';
import { record, T0 } from './setup.js';

const settings = { refreshWindowMs: 60_000, memoryRecheckMs: 10_000, timing: DEFAULT_TIMING };
/** What the serving rule reads of a request that needs `minValidityMs`. */
const need = (minValidityMs: number) => ({ minValidityMs, explicit: false });

/** A token with 6 s left, kept at T0; then 8 s pass while the wall clock steps back 5 s. */
const steppedBack = async (keep: (clock: ManualClock) => void) => {
  const clock = new ManualClock(T0);
  keep(clock);
  await clock.advance(8_000);
  clock.step(-5_000);
  return clock;
};

const nowOf = (clock: ManualClock) => ({ wall: clock.now(), monotonic: clock.monotonic() });

describe('Class: ConnectionView, on a wall clock stepped back', () => {
  it('rebases a kept token’s expiry on the monotonic clock: a wall clock stepped back 5 s does not make an expired token last good', async () => {
    let view: ConnectionView | undefined;
    const clock = await steppedBack((c) => {
      view = new ConnectionView(c, settings);
      view.apply('sandbox', {
        type: 'token-kept',
        entry: {
          record: record('t', T0 + 6_000),
          checkedAt: T0,
          checkedAtMonotonic: c.monotonic(),
          until: T0 + 10_000,
        },
        at: nowOf(c),
      });
    });
    // The wall clock says T0 + 3 s; the token expired 2 s ago. Before: served as last good.
    const entry = view?.entry('sandbox');
    expect(entry && entry.record.expiresAt > clock.now()).toBe(false);
    // Its lifetime is unchanged: both its times moved by the 5 s the wall clock lost.
    expect(entry?.record.expiresAt).toBe(T0 + 1_000);
    expect(entry?.record.issuedAt).toBe(T0 + 1_000 - 3_600_000);
    // So did what the read proves (I2): when it was sent, and until when it vouches.
    expect(entry?.checkedAt).toBe(T0 - 5_000);
    expect(entry?.until).toBe(T0 + 5_000);
  });

  it('serves nothing from memory past the expiry the monotonic clock counts', async () => {
    let view: ConnectionView | undefined;
    await steppedBack((c) => {
      view = new ConnectionView(c, settings);
      view.confirmed(record('t', T0 + 6_000), { sentAt: T0, sentAtMonotonic: c.monotonic() });
    });
    // Before: 3 s left on the stepped wall clock, so a caller needing 1 s got an expired token.
    expect(view?.servable('sandbox', need(1_000)).record).toBeUndefined();
    const failed = { failed: new UpstreamUnavailableError('down') };
    expect(view?.servable('sandbox', need(0), failed).record).toBeUndefined();
  });

  it('leaves a kept token as it is while the two clocks agree', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(record('t', T0 + 6_000), { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    await clock.advance(3_000);
    expect(view.servable('sandbox', need(1_000)).record?.expiresAt).toBe(T0 + 6_000);
  });
});

const held = record('held', T0 + 3_600_000);
const other = record('other', T0 + 3_600_000);
const entryOf = (token = held, extra: Partial<MemoryEntry> = {}): MemoryEntry => ({
  record: token,
  checkedAt: T0,
  checkedAtMonotonic: 100,
  until: T0 + 5_000,
  ...extra,
});
const keptOf = (token = held, extra: Partial<MemoryEntry> = {}) => ({
  entry: entryOf(token, extra),
  asOf: { wall: T0, monotonic: 100 },
});
const lease: Lease = {
  holder: 'b:1',
  version: 'v1',
  expiresAt: T0 + 3_000,
  durationMs: 3_000,
  countdown: 0,
};
const holding: Knowledge = {
  ...NOTHING_KNOWN,
  kept: keptOf(),
  known: [{ digest: held.tokenDigest, since: 100 }],
};
const at = { wall: T0 + 1_000, monotonic: 1_100 };

/** Event × state → state: every row is one transition of `applyEvent`. */
const table: readonly [string, Knowledge, ConnectionEvent, Knowledge][] = [
  [
    'a token read (with its proof) into nothing known: kept, and learned now',
    NOTHING_KNOWN,
    { type: 'token-kept', entry: entryOf(), at },
    { ...NOTHING_KNOWN, kept: keptOf(), known: [{ digest: held.tokenDigest, since: 1_100 }] },
  ],
  [
    'an entry with no monotonic reading: rebased from when it is kept',
    NOTHING_KNOWN,
    { type: 'token-kept', entry: entryOf(held, { checkedAtMonotonic: undefined }), at },
    {
      ...NOTHING_KNOWN,
      kept: {
        entry: entryOf(held, { checkedAtMonotonic: undefined }),
        asOf: { wall: T0 + 1_000, monotonic: 1_100 },
      },
      known: [{ digest: held.tokenDigest, since: 1_100 }],
    },
  ],
  [
    'the same token kept again: replaces the entry, keeps its first sight',
    holding,
    { type: 'token-kept', entry: entryOf(held, { until: T0 + 9_000 }), at },
    { ...holding, kept: keptOf(held, { until: T0 + 9_000 }) },
  ],
  [
    'another token kept (issued here): replaces the entry, learned now beside the first',
    holding,
    { type: 'token-kept', entry: entryOf(other), at },
    {
      ...holding,
      kept: keptOf(other),
      known: [...holding.known, { digest: other.tokenDigest, since: 1_100 }],
    },
  ],
  [
    'a suspect token read: learned, not kept',
    NOTHING_KNOWN,
    { type: 'token-learned', digest: held.tokenDigest, at: 1_100 },
    { ...NOTHING_KNOWN, known: [{ digest: held.tokenDigest, since: 1_100 }] },
  ],
  [
    'a token learned again: its first sight stays',
    holding,
    { type: 'token-learned', digest: held.tokenDigest, at: 9_000 },
    holding,
  ],
  [
    'a token learned past the limit: the oldest sighting goes',
    {
      ...NOTHING_KNOWN,
      known: Array.from({ length: KNOWN_PER_CONNECTION }, (_, i) => ({
        digest: `d${i}`,
        since: i,
      })),
    },
    { type: 'token-learned', digest: 'new', at: 1_100 },
    {
      ...NOTHING_KNOWN,
      known: [
        ...Array.from({ length: KNOWN_PER_CONNECTION - 1 }, (_, i) => ({
          digest: `d${i + 1}`,
          since: i + 1,
        })),
        { digest: 'new', since: 1_100 },
      ],
    },
  ],
  [
    'dropped: nothing kept, its first sight stays',
    holding,
    { type: 'token-dropped' },
    { ...holding, kept: undefined },
  ],
  [
    'dropped as that token (compare-and-drop): nothing kept',
    holding,
    { type: 'token-dropped', digest: held.tokenDigest },
    { ...holding, kept: undefined },
  ],
  [
    'dropped as another token (a late report): the entry stays',
    holding,
    { type: 'token-dropped', digest: other.tokenDigest },
    holding,
  ],
  [
    'dropped with nothing kept: nothing changes',
    NOTHING_KNOWN,
    { type: 'token-dropped' },
    NOTHING_KNOWN,
  ],
  [
    'reported, the kept token: marked',
    holding,
    { type: 'token-reported', digest: held.tokenDigest },
    { ...holding, kept: keptOf(held, { reported: true }) },
  ],
  [
    'reported, another token: nothing changes',
    holding,
    { type: 'token-reported', digest: other.tokenDigest },
    holding,
  ],
  [
    'reported with nothing kept: nothing changes',
    NOTHING_KNOWN,
    { type: 'token-reported', digest: held.tokenDigest },
    NOTHING_KNOWN,
  ],
  [
    'a lease version seen first: recorded on both clocks',
    NOTHING_KNOWN,
    { type: 'lease-seen', lease, at },
    {
      ...NOTHING_KNOWN,
      lease: { key: `v1|b:1|${T0 + 3_000}`, since: { wall: T0 + 1_000, monotonic: 1_100 } },
    },
  ],
  [
    'the same lease version seen again: its first sight stays (I1)',
    { ...NOTHING_KNOWN, lease: { key: `v1|b:1|${T0 + 3_000}`, since: { wall: T0, monotonic: 0 } } },
    { type: 'lease-seen', lease, at },
    { ...NOTHING_KNOWN, lease: { key: `v1|b:1|${T0 + 3_000}`, since: { wall: T0, monotonic: 0 } } },
  ],
  [
    'a lease renewed under the same version (expiry moved): a new sight',
    { ...NOTHING_KNOWN, lease: { key: `v1|b:1|${T0}`, since: { wall: T0, monotonic: 0 } } },
    { type: 'lease-seen', lease, at },
    {
      ...NOTHING_KNOWN,
      lease: { key: `v1|b:1|${T0 + 3_000}`, since: { wall: T0 + 1_000, monotonic: 1_100 } },
    },
  ],
  [
    'a probe verdict: kept until its interval ends; verdicts past theirs go',
    {
      ...NOTHING_KNOWN,
      verdicts: [{ digest: 'old', verdict: { verdict: 'revoked' }, until: 1_000 }],
    },
    {
      type: 'probe-settled',
      digest: held.tokenDigest,
      verdict: { verdict: 'valid' },
      until: 61_100,
      at: 1_100,
    },
    {
      ...NOTHING_KNOWN,
      verdicts: [{ digest: held.tokenDigest, verdict: { verdict: 'valid' }, until: 61_100 }],
    },
  ],
  [
    // The probe is asked at most once per interval per token (reports.ts): a verdict on
    // one token leaves those on others that are still reused, and one whose interval ends now goes.
    'a probe verdict on one token: verdicts on others still reused stay; one ending now goes',
    {
      ...NOTHING_KNOWN,
      verdicts: [
        { digest: 'ends-now', verdict: { verdict: 'valid' }, until: 1_100 },
        { digest: 'other', verdict: { verdict: 'revoked' }, until: 1_101 },
        { digest: held.tokenDigest, verdict: { verdict: 'revoked' }, until: 9_000 },
      ],
    },
    {
      type: 'probe-settled',
      digest: held.tokenDigest,
      verdict: { verdict: 'valid' },
      until: 61_100,
      at: 1_100,
    },
    {
      ...NOTHING_KNOWN,
      verdicts: [
        { digest: 'other', verdict: { verdict: 'revoked' }, until: 1_101 },
        { digest: held.tokenDigest, verdict: { verdict: 'valid' }, until: 61_100 },
      ],
    },
  ],
  [
    'a probe that proved nothing: not kept, and what was said of that token before goes',
    {
      ...NOTHING_KNOWN,
      verdicts: [{ digest: held.tokenDigest, verdict: { verdict: 'valid' }, until: 61_000 }],
    },
    {
      type: 'probe-settled',
      digest: held.tokenDigest,
      verdict: { verdict: 'unknown', reason: 'timeout' },
      until: 61_100,
      at: 1_100,
    },
    NOTHING_KNOWN,
  ],
  [
    'an issuance measured: the last one counts',
    { ...NOTHING_KNOWN, issuanceMs: 900 },
    { type: 'measured', what: 'issuance', ms: 1_200 },
    { ...NOTHING_KNOWN, issuanceMs: 1_200 },
  ],
  [
    'a read measured: the last one counts',
    { ...NOTHING_KNOWN, readMs: 40 },
    { type: 'measured', what: 'read', ms: 25 },
    { ...NOTHING_KNOWN, readMs: 25 },
  ],
];

describe('Function: applyEvent (event × state → state)', () => {
  it.each(table)('%s', (_name, before, event, after) => {
    const frozen = structuredClone(before);
    expect(applyEvent(before, event)).toEqual(after);
    // Pure: the state it was given is left as it was.
    expect(before).toEqual(frozen);
  });

  it('covers every kind of event', () => {
    const kinds = new Set(table.map(([, , event]) => event.type));
    expect([...kinds].sort()).toEqual(
      [
        'lease-seen',
        'measured',
        'probe-settled',
        'token-dropped',
        'token-kept',
        'token-learned',
        'token-reported',
      ].sort(),
    );
  });
});

describe('Class: ConnectionView: queries write nothing', () => {
  // Before: `knownFor` of a token never learned recorded "first seen now" and returned 0, so
  // the same query 5 s later said 5 s: a query made a token older (I4 counts on these ages).
  it('I4: asking how long a token is known does not make it known', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    expect(view.knownFor('sandbox', held.tokenDigest)).toBe(0);
    await clock.advance(5_000);
    expect(view.knownFor('sandbox', held.tokenDigest)).toBe(0);
    expect(view.knowledge('sandbox')).toBeUndefined();
  });

  it('I4: a token’s age counts from the read that learned it, kept or suspect', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    const read = { sentAt: T0, sentAtMonotonic: clock.monotonic() };
    // A countdown ended on it: suspect, neither served nor kept, but learned.
    const countdownEnded = { ...lease, countdown: 1, expiresAt: T0 - 1 };
    const seen = view.observe(
      connection({ revokesOnReissue: true }),
      { token: held, lease: countdownEnded },
      read,
      T0,
    );
    expect(seen.suspect).toBe(true);
    expect(view.entry('sandbox')).toBeUndefined();
    await clock.advance(5_000);
    expect(view.knownFor('sandbox', held.tokenDigest)).toBe(5_000);
  });

  // A probe's verdict is about one token (I4: a report on a token the probe found valid is not
  // acted on), and a lease's first sight about one version (the cut-over wait, I1's staleness):
  // neither query answers for another.
  it('answers a query only about the token or lease version asked for', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    const verdicts = [
      [other.tokenDigest, { verdict: 'revoked' }],
      [held.tokenDigest, { verdict: 'valid' }],
    ] as const;
    for (const [digest, verdict] of verdicts) {
      view.apply('sandbox', { type: 'probe-settled', digest, verdict, until: 10_000, at: 0 });
    }
    view.apply('sandbox', { type: 'lease-seen', lease, at: { wall: T0, monotonic: 0 } });
    clock.advanceNow(5_000);
    expect(view.verdict('sandbox', held.tokenDigest)).toEqual({ verdict: 'valid' });
    expect(view.verdict('sandbox', 'never-probed')).toBeUndefined();
    expect(view.leaseFirstSeen('sandbox', lease)).toBe(T0);
    expect(view.leaseFirstSeen('sandbox', { ...lease, version: 'v2' })).toBeUndefined();
    expect(view.leaseFirstSeen('elsewhere', lease)).toBeUndefined();
    clock.advanceNow(5_000);
    expect(view.verdict('sandbox', held.tokenDigest)).toBeUndefined();
  });

  // I2 in callers' caches: memory grants the reuse of a token it vouches for; a token it no
  // longer holds (replaced or dropped since it was served) may have been revoked, so the caller
  // may neither reuse it nor use it stale.
  it('I2: grants no reuse, nor any stale use, of a token memory no longer holds', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(held, { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    const reuse = (token: TokenRecord) =>
      view.servable('sandbox', need(0), undefined, token.tokenDigest);
    expect(reuse(held).reusableUntil).toBeGreaterThan(T0);
    const none = { until: T0, reusableUntil: T0, staleIfErrorMs: 0 };
    expect(reuse(other)).toEqual(none);
    view.drop('sandbox');
    expect(reuse(held)).toEqual(none);
  });

  // I2: the last good token stands in only after a failure that says nothing against it: not
  // after a wait that saw a replacement under way, nor after a token request whose outcome is
  // unknown (either may have revoked it), nor after a failure that is not the upstream's or the
  // store's (a caller's bad request is answered as such).
  it('I2: serves the last good token only after a failure that says nothing against it', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(held, { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    clock.advanceNow(1_000);
    const lastGood = (error: unknown) =>
      view.servable('sandbox', need(0), { failed: error }).record;
    expect(lastGood(new UpstreamUnavailableError('down'))).toBe(held);
    expect(lastGood(new StoreUnavailableError('down'))).toBe(held);
    expect(lastGood(new UpstreamUnavailableError('wait', { refreshInProgress: true }))).toBe(
      undefined,
    );
    expect(lastGood(new UpstreamUnavailableError('timeout', { outcomeUnknown: true }))).toBe(
      undefined,
    );
    expect(lastGood(new BadRequestError('bad'))).toBeUndefined();
    expect(lastGood(new Error('any'))).toBeUndefined();
    // An unknown connection has nothing to say.
    expect(view.verdict('unknown', held.tokenDigest)).toBeUndefined();
    expect(view.leaseFirstSeen('unknown', lease)).toBeUndefined();
  });

  // I2 through an outage: memory serves a token for a need only with more than it left (as the
  // fast path does: served when left > need).
  it('I2: serves through an outage only a token with more validity left than the need', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(held, { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    const left = held.expiresAt - T0;
    expect(view.servable('sandbox', need(left - 1), 'store-down').record).toBe(held);
    expect(view.servable('sandbox', need(left), 'store-down').record).toBeUndefined();
  });

  // I1: a lease is stale (taken over) once this container has seen the same version unchanged
  // for its duration, on its own clock, or at first sight when its own expiry is further past
  // than any plausible skew; not a moment before either.
  it('I1: judges a lease stale once seen unchanged for its duration, or at first sight past the skew tolerance', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    const sandbox = connection();
    const read = () => ({ sentAt: clock.now(), sentAtMonotonic: clock.monotonic() });
    const seen = (l: Lease) =>
      view.observe(sandbox, { token: undefined, lease: l }, read(), clock.now()).leaseStale;
    expect(seen(lease)).toBe(false);
    await clock.advance(lease.durationMs - 1);
    expect(seen(lease)).toBe(false);
    await clock.advance(1);
    expect(seen(lease)).toBe(true);
    const skew = view.timing.skewToleranceMs;
    const old = (ago: number) => ({
      ...lease,
      version: `old-${ago}`,
      expiresAt: clock.now() - ago,
    });
    expect(seen(old(skew))).toBe(false);
    expect(seen(old(skew + 1))).toBe(true);
  });

  // I2 in callers' caches (docs/adr/0017): a token served confirmed may be used stale for a
  // while if the broker cannot be reached; one served unconfirmed (the last good one) may not.
  it('I2: grants stale use only of a token served confirmed', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(held, { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    expect(view.servable('sandbox', need(0)).staleIfErrorMs).toBeGreaterThan(0);
    const failed = { failed: new UpstreamUnavailableError('down') };
    expect(view.servable('sandbox', need(0), failed)).toMatchObject({
      record: held,
      why: 'last-good',
      staleIfErrorMs: 0,
    });
  });

  it('queries leave the state as it was', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(held, { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    view.apply('sandbox', { type: 'lease-seen', lease, at: nowOf(clock) });
    const before = view.knowledge('sandbox');
    await clock.advance(2_000);
    view.entry('sandbox');
    view.servable('sandbox', need(0));
    view.servable('sandbox', need(0), 'store-down');
    view.servable('sandbox', need(0), { failed: new UpstreamUnavailableError('down') });
    view.servable('sandbox', need(0), undefined, held.tokenDigest);
    view.knownFor('sandbox', other.tokenDigest);
    view.leaseFirstSeen('sandbox', { ...lease, version: 'v2' });
    view.verdict('sandbox', held.tokenDigest);
    expect(view.knowledge('sandbox')).toBe(before);
  });
});

describe('ConnectionView: when a lease turns stale (I1), and when a waiter reads to find it (liveness)', () => {
  it('counts a version’s duration from this container’s first sight of it: stale at exactly its duration, with the time left until then', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    const counting = { ...lease, countdown: 12, durationMs: 1_050, expiresAt: T0 + 1_050 };
    const look = () =>
      view.observe(
        connection({ revokesOnReissue: true }),
        { token: held, lease: counting },
        { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() },
        clock.now(),
      );
    expect(look()).toMatchObject({ leaseStale: false, staleInMs: 1_050 });
    await clock.advance(800);
    expect(look()).toMatchObject({ leaseStale: false, staleInMs: 250 });
    await clock.advance(250);
    expect(look()).toMatchObject({ leaseStale: true, staleInMs: 0 });
    // A new version starts its own count.
    const next = { ...counting, version: 'v-next', countdown: 11 };
    const seen = view.observe(
      connection({ revokesOnReissue: true }),
      { token: held, lease: next },
      { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() },
      clock.now(),
    );
    expect(seen).toMatchObject({ leaseStale: false, staleInMs: 1_050 });
  });

  it('tells a waiter when a version turns stale by its own expiry (past the skew tolerance), when that comes before its duration runs here', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    // A long version (an unknown outcome's grace) that expired 9,950 ms ago on its holder's
    // clock: stale at first sight 50 ms from now, long before 10 s seen unchanged here.
    const grace = { ...lease, countdown: 0, durationMs: 10_000, expiresAt: T0 - 9_950 };
    const look = () =>
      view.observe(
        connection({ revokesOnReissue: true }),
        { token: undefined, lease: grace },
        { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() },
        clock.now(),
      );
    expect(look()).toMatchObject({ leaseStale: false, staleInMs: 51 });
    await clock.advance(50);
    expect(look()).toMatchObject({ leaseStale: false, staleInMs: 1 });
    await clock.advance(1);
    expect(look()).toMatchObject({ leaseStale: true, staleInMs: 0 });
  });

  it('finds a version of duration 0 stale at its second sight, not at its first', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    const zero = { ...lease, durationMs: 0, expiresAt: T0 };
    const look = () =>
      view.observe(
        connection({ revokesOnReissue: true }),
        { token: held, lease: zero },
        { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() },
        clock.now(),
      );
    expect(look().leaseStale).toBe(false);
    expect(look().leaseStale).toBe(true);
  });
});
