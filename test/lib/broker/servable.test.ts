/**
 * The one serving rule (lib/broker/view/serving.ts, `servable`), table-tested by state × rule:
 * memory's entry and what became of the request (first, the store unreadable, a failure) give
 * until when its token may be served and why (I2), and how long its caller may reuse it and
 * then use it stale (I2 in callers' caches). Each row's figures are worked out by hand from
 * docs/protocol.md, so that a change of its rule fails it.
 *
 * At the default timing with a 5 s re-check, a 10 min window and a token expiring at T0 + 50 min:
 * a read sent at T0 with no lease proves it until T0 + 5,150 (21 steps of 250 ms, less 100 ms),
 * memory reads again at T0 + 5,000, a caller reuses it until T0 + 4,900 (less the 100 ms margin)
 * and then stale until its expiry less a minute.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMING, type RefreshSettings } from '../../../lib/broker/timing/index.js';
import {
  type Asked,
  type MemoryEntry,
  type Servable,
  type ServingRequest,
  servable,
  suspectToken,
} from '../../../lib/broker/view/serving.js';
import {
  BadRequestError,
  StoreUnavailableError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import type { TokenState } from '../../../lib/ports.js';
import { record, T0 } from './setup.js';

const settings: RefreshSettings = {
  refreshWindowMs: 600_000,
  memoryRecheckMs: 5_000,
  timing: DEFAULT_TIMING,
};
const token = record('held', T0 + 3_000_000, T0 - 600_000);
/** Its stale use ends a minute before its expiry. */
const STALE_END = T0 + 3_000_000 - 60_000;
const countdown = {
  holder: 'h:1',
  version: 'v1',
  expiresAt: T0 + 3_000,
  durationMs: 3_000,
  countdown: 21,
};
/** A read sent at T0 that found no lease. */
const read: MemoryEntry = { record: token, checkedAt: T0, until: T0 + 5_150 };

interface Row {
  readonly state: string;
  readonly entry?: MemoryEntry | undefined;
  readonly asked?: Asked;
  readonly need?: ServingRequest['minValidityMs'];
  readonly explicit?: boolean;
  readonly graceMs?: number;
  /** ms after T0. */
  readonly at: number;
  readonly expected: Omit<Servable, 'record'>;
}

const down = 'store-down' as const;
const failed = (error: unknown) => ({ failed: error });
const unavailable = failed(new UpstreamUnavailableError('down'));
const nothing = (at: number) => ({ until: T0 + at, reusableUntil: T0 + at, staleIfErrorMs: 0 });

const rows: Row[] = [
  // Memory first (`proved`): the shortest of the proof, the re-check, the need, a re-read.
  {
    state: 'proved: read 1 s ago, the re-check ends before the proof',
    at: 1_000,
    expected: {
      why: 'proved',
      until: T0 + 5_000,
      reusableUntil: T0 + 4_900,
      staleIfErrorMs: STALE_END - (T0 + 4_900),
    },
  },
  {
    state: 'proved: a proof shorter than the re-check ends it',
    entry: { ...read, until: T0 + 3_000 },
    at: 1_000,
    expected: {
      why: 'proved',
      until: T0 + 3_000,
      reusableUntil: T0 + 2_900,
      staleIfErrorMs: STALE_END - (T0 + 2_900),
    },
  },
  {
    state: 'proved: the need ends it, and the reuse',
    need: 2_998_000,
    at: 1_000,
    expected: {
      why: 'proved',
      until: T0 + 2_000,
      reusableUntil: T0 + 2_000,
      staleIfErrorMs: STALE_END - (T0 + 2_000),
    },
  },
  {
    state: 'proved: a countdown read long before its end is read again a second before it',
    entry: { ...read, lease: countdown },
    at: 1_000,
    expected: { why: 'proved', until: T0 + 4_150, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a second before the end of a countdown read long before it',
    entry: { ...read, lease: countdown },
    at: 4_150,
    expected: { until: T0 + 4_150, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'proved: a countdown read less than 2 s before its end is not read again',
    entry: { ...read, until: T0 + 2_000, lease: countdown },
    at: 1_500,
    expected: { why: 'proved', until: T0 + 2_000, reusableUntil: T0 + 1_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a re-check after the read, inside its proof',
    at: 5_000,
    expected: { until: T0 + 5_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'proved, no stale use: a reported token',
    entry: { ...read, reported: true },
    at: 1_000,
    expected: { why: 'proved', until: T0 + 5_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'proved, no stale use: a token held in memory only (its write failed)',
    entry: { ...read, unstored: true },
    at: 1_000,
    expected: { why: 'proved', until: T0 + 5_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  // The store unreadable (`store-down`): inside the proof, with the validity asked for.
  {
    state: 'store-down: past the re-check, inside the proof',
    asked: down,
    at: 5_050,
    expected: {
      why: 'store-down',
      until: T0 + 5_150,
      reusableUntil: T0 + 4_900,
      staleIfErrorMs: 0,
    },
  },
  {
    state: 'store-down: the need ends it',
    asked: down,
    need: 2_998_000,
    at: 1_000,
    expected: {
      why: 'store-down',
      until: T0 + 2_000,
      reusableUntil: T0 + 2_000,
      staleIfErrorMs: STALE_END - (T0 + 2_000),
    },
  },
  {
    state: 'none: the store unreadable, less validity left than the need',
    asked: down,
    need: 2_999_000,
    at: 1_000,
    expected: { until: T0 + 1_000, reusableUntil: T0 + 1_000, staleIfErrorMs: 0 },
  },
  {
    state: 'none: the store unreadable past the proof, no grace',
    asked: down,
    at: 5_150,
    expected: { until: T0 + 5_150, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'outage-grace: the store unreadable past the proof, inside a 30 s grace',
    asked: down,
    graceMs: 30_000,
    at: 6_000,
    expected: {
      why: 'outage-grace',
      until: T0 + 35_150,
      reusableUntil: T0 + 4_900,
      staleIfErrorMs: 0,
    },
  },
  {
    state: 'outage-grace: the store unreadable as the proof ends, with a grace',
    asked: down,
    graceMs: 30_000,
    at: 5_150,
    expected: {
      why: 'outage-grace',
      until: T0 + 35_150,
      reusableUntil: T0 + 4_900,
      staleIfErrorMs: 0,
    },
  },
  // A failure (`last-good`): one that says nothing against the token, a validity not named.
  {
    state: 'last-good: after the upstream was unavailable',
    asked: unavailable,
    at: 1_000,
    expected: { why: 'last-good', until: T0 + 5_150, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'last-good: after the store was unavailable, past the re-check',
    asked: failed(new StoreUnavailableError('down')),
    at: 5_100,
    expected: { why: 'last-good', until: T0 + 5_150, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'last-good: after a rejection, with less validity left than the need',
    asked: failed(new UpstreamRejectedError('no')),
    need: 2_999_500,
    at: 1_000,
    expected: { why: 'last-good', until: T0 + 5_150, reusableUntil: T0 + 500, staleIfErrorMs: 0 },
  },
  {
    state: 'outage-grace: a failure past the proof, inside a 30 s grace',
    asked: unavailable,
    graceMs: 30_000,
    at: 6_000,
    expected: {
      why: 'outage-grace',
      until: T0 + 35_150,
      reusableUntil: T0 + 4_900,
      staleIfErrorMs: 0,
    },
  },
  {
    state: 'none: a failure for a caller that named its validity',
    asked: unavailable,
    explicit: true,
    at: 1_000,
    expected: { until: T0 + 1_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a wait that saw a replacement under way (it may be revoked)',
    asked: failed(new UpstreamUnavailableError('wait', { refreshInProgress: true })),
    at: 1_000,
    expected: { until: T0 + 1_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a token request of unknown outcome (it may be revoked)',
    asked: failed(new UpstreamUnavailableError('timeout', { outcomeUnknown: true })),
    at: 1_000,
    expected: { until: T0 + 1_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a failure that is not the upstream’s or the store’s',
    asked: failed(new BadRequestError('bad')),
    at: 1_000,
    expected: { until: T0 + 1_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  {
    state: 'none: a failure once the token expired, inside a grace',
    entry: { ...read, until: T0 + 3_000_000 },
    asked: unavailable,
    graceMs: 30_000,
    at: 3_000_000,
    expected: { until: T0 + 3_000_000, reusableUntil: T0 + 4_900, staleIfErrorMs: 0 },
  },
  // Never: the warm-up, or nothing in memory.
  {
    state: 'none: the warm-up, first',
    need: 'outside-window',
    at: 1_000,
    expected: nothing(1_000),
  },
  {
    state: 'none: the warm-up, the store unreadable',
    need: 'outside-window',
    asked: down,
    at: 1_000,
    expected: nothing(1_000),
  },
  { state: 'none: nothing in memory', entry: undefined, at: 1_000, expected: nothing(1_000) },
  {
    state: 'none: nothing in memory, after a failure',
    entry: undefined,
    asked: unavailable,
    at: 1_000,
    expected: nothing(1_000),
  },
];

describe('Function: servable (I2), by state × rule', () => {
  it.each(rows)('$state', (row) => {
    const entry = 'entry' in row ? row.entry : read;
    const request = { minValidityMs: row.need ?? 60_000, explicit: row.explicit ?? false };
    const ruled = { ...settings, storeOutageGraceMs: row.graceMs ?? 0 };
    const got = servable(entry, request, T0 + row.at, ruled, row.asked);
    expect(got).toEqual({
      ...row.expected,
      ...(row.expected.why ? { record: entry?.record } : {}),
    });
  });

  // I2 through a store outage (docs/adr/0017): the operator's grace lets memory serve a token
  // past what its last read proved, but never once the token has expired.
  it('I2: serves an unconfirmed token through an outage only inside its proof plus the grace, and never once expired', () => {
    const request = { minValidityMs: 0, explicit: false };
    fc.assert(
      fc.property(
        fc.integer({ min: 0, max: 600_000 }),
        fc.integer({ min: -600_000, max: 600_000 }),
        fc.integer({ min: -600_000, max: 600_000 }),
        (graceMs, untilIn, expiresIn) => {
          const entry = {
            record: { ...token, expiresAt: T0 + expiresIn },
            checkedAt: T0 - 600_000,
            until: T0 + untilIn,
          };
          const ruled = { ...settings, storeOutageGraceMs: graceMs };
          const served = servable(entry, request, T0, ruled, 'store-down').record !== undefined;
          expect(served).toBe(expiresIn > 0 && untilIn + graceMs > 0);
        },
      ),
    );
    // At the edges: expiring now, or the proof and grace ending now, is not servable.
    const ruled = { ...settings, storeOutageGraceMs: 1_000 };
    const late = { record: token, checkedAt: T0, until: token.expiresAt + 10 };
    const at = (entry: MemoryEntry, now: number) =>
      servable(entry, request, now, ruled, 'store-down').record !== undefined;
    expect(at(late, token.expiresAt)).toBe(false);
    expect(at(late, token.expiresAt - 1)).toBe(true);
    expect(at({ ...read, until: T0 - 1_000 }, T0)).toBe(false);
    expect(at({ ...read, until: T0 - 999 }, T0)).toBe(true);
  });
});

describe('Function: suspectToken (I2), by what a read found', () => {
  const skew = DEFAULT_TIMING.skewToleranceMs;
  const lease = (left: number) => ({ ...countdown, countdown: left });
  const { accessToken: _, ...sealed } = token;
  // What was read, whether the upstream revokes on re-issue, now (ms after the token's expiry),
  // and whether the token found is suspect.
  const cases: [string, TokenState, boolean, number, boolean][] = [
    ['a valid token, its countdown at 1', { token, lease: lease(1) }, true, -1_000, true],
    ['a valid token, its countdown at 0', { token, lease: lease(0) }, true, -1_000, true],
    ['a valid token, its countdown still at 2', { token, lease: lease(2) }, true, -1_000, false],
    ['a valid token, no lease', { token, lease: undefined }, true, -1_000, false],
    [
      'an upstream that does not revoke on re-issue',
      { token, lease: lease(0) },
      false,
      -1_000,
      false,
    ],
    [
      'expired here by less than the skew allowed',
      { token, lease: lease(0) },
      true,
      skew - 1,
      true,
    ],
    ['expired here by the skew allowed', { token, lease: lease(0) }, true, skew, false],
    [
      'a token this container cannot read',
      { token: undefined, unreadable: sealed, lease: lease(0) },
      true,
      -1_000,
      true,
    ],
    ['no token', { token: undefined, lease: lease(0) }, true, -1_000, false],
  ];
  it.each(cases)('%s', (_name, state, revokes, afterExpiry, suspect) => {
    const found = suspectToken(state, revokes, token.expiresAt + afterExpiry, DEFAULT_TIMING);
    expect(found).toBe(suspect ? (state.token ?? state.unreadable) : undefined);
  });
});
