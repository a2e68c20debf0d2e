/**
 * The observer's decision (lib/broker/observer/observer.ts), tested directly: table cases named by the
 * state read, and properties over every read, view and time that fast-check draws. Each
 * property cites the invariant of docs/protocol.md it checks.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import { type Decision, decide, type Observation } from '../../../lib/broker/observer/observer.js';
import { DEFAULT_TIMING, leaseNeedsMs, windowMs } from '../../../lib/broker/timing/index.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import type { Lease, TokenRecord } from '../../../lib/ports.js';
import { validTimings } from '../../support/timing-arbitraries.js';

const T0 = 1_795_262_400_000;
const LIFETIME = 1_200_000;
const settings = {
  refreshWindowMs: 60_000,
  memoryRecheckMs: 5_000,
  invalidateFloorMs: 2_000,
  timing: DEFAULT_TIMING,
};

const token = (name: string, expiresAt: number, extra: Partial<TokenRecord> = {}): TokenRecord => ({
  connection: 'sandbox',
  accessToken: name,
  tokenDigest: tokenDigest(name),
  issuedAt: expiresAt - LIFETIME,
  expiresAt,
  ...extra,
});

const lease = (countdown: number, extra: Partial<Lease> = {}): Lease => ({
  holder: 'h:1',
  version: 'v1',
  expiresAt: T0 + 3_000,
  durationMs: 3_000,
  countdown,
  ...extra,
});

/** The request's part of an observation, given flat: its `minValidityMs` (`need`), `mayForce`. */
type Given = Partial<Observation> &
  Pick<Observation, 'state'> & { need?: number | 'outside-window'; mayForce?: boolean };

/** An observation of `read` at T0 with plenty of time, no lease watched stale, proof 5 s. */
const observe = ({ need = 0, mayForce = true, ...o }: Given): Observation => {
  const valid =
    o.state.token && o.state.token.expiresAt > (o.now ?? T0) ? o.state.token : undefined;
  return {
    valid,
    suspect: false,
    proofMs: 5_000,
    leaseStale: false,
    request: { minValidityMs: need, mayForce },
    now: T0,
    sinceReadMs: 10,
    leftMs: 10_000,
    readReserveMs: 50,
    revokesOnReissue: true,
    knownForMs: 60_000,
    waits: 0,
    issuanceMs: 300,
    draw: 0.5,
    settings,
    ...o,
  };
};

describe('Function: decide (the observer)', () => {
  const fresh = token('fresh', T0 + 600_000);
  it('wakes a waiter when the lease it waits on would turn stale, not at the jitter or the countdown’s end (a holder whose region was cut off is found at once; liveness)', () => {
    // A suspect token under a countdown of 12 (2.75 s left of it), a version seen 800 ms ago
    // that lasts 1,050: the read that finds it stale is due in 250 ms.
    const waiting = observe({
      state: { token: undefined, lease: lease(12, { durationMs: 1_050 }) },
      staleInMs: 250,
    });
    expect(decide(waiting)).toMatchObject({ do: 'wait', ms: 251 });
    // Without a lease watched, the jitter and the countdown decide as before.
    const unwatched = decide({ ...waiting, staleInMs: undefined });
    expect(unwatched).toMatchObject({ do: 'wait' });
    expect(unwatched.do === 'wait' && unwatched.ms).toBeGreaterThan(2_000);
  });

  it('waits for a token it does not have until the holder’s token is due, from when the holder sent the lease version read, plus its own jitter (a cold start reads about twice; liveness)', () => {
    // The version read was sent 100 ms ago (its expiry less its duration, on the holder's
    // clock); an issuance takes 300 ms, and the holder's lease write and token write 10 ms each
    // (this read's round trip, next test); the jitter is up to a quarter of the issuance.
    const cold = (draw: number, sentAgo = 100) =>
      decide(
        observe({
          state: { token: undefined, lease: lease(0, { expiresAt: T0 - sentAgo + 3_000 }) },
          draw,
        }),
      );
    expect(cold(0)).toMatchObject({ do: 'wait', ms: 200 + 20 });
    expect(cold(0.5)).toMatchObject({ do: 'wait', ms: 237.5 + 20 });
    // A version from a clock far ahead or behind moves the read by no more than an issuance.
    expect(cold(0, -60_000)).toMatchObject({ do: 'wait', ms: 300 + 20 });
    expect(cold(0, 60_000)).toMatchObject({ do: 'wait', ms: 20 });
    // A countdown announced on an expired token: its steps come first.
    const counting = observe({
      state: { token: undefined, lease: lease(4, { expiresAt: T0 + 3_000 }) },
      draw: 0,
    });
    expect(decide(counting)).toMatchObject({ do: 'wait', ms: 4 * 250 + 300 + 20 });
    // A token being replaced (valid, or suspect at the cut-over) is polled as before.
    const replacing = observe({ state: { token: fresh, lease: lease(1) }, suspect: true, draw: 0 });
    expect(decide(replacing)).toMatchObject({ do: 'wait', ms: 1 });
  });

  it('counts the holder’s two store round trips before its token is due: its lease write as long as the call that found that lease, its token write as this container’s last read, at most half an issuance each (fewer reads at a cold start; liveness)', () => {
    // The holder's token is stored a lease write's answer, an issuance and a token write after
    // it sent the lease version read. Its version was sent 200 ms ago, on an item eight cold
    // containers raced for: this container's own lease write, refused, took 140 ms; its read
    // before it, 20 ms.
    const lost = (sinceReadMs: number, lastReadMs: number | undefined, draw = 0) =>
      decide(
        observe({
          state: { token: undefined, lease: lease(0, { expiresAt: T0 - 200 + 3_000 }) },
          sinceReadMs,
          lastReadMs,
          draw,
        }),
      );
    expect(lost(140, 20)).toMatchObject({ do: 'wait', ms: 140 + 300 + 20 - 200 });
    // With no read measured, the token write is guessed as the lease write.
    expect(lost(140, undefined)).toMatchObject({ do: 'wait', ms: 140 + 300 + 140 - 200 });
    // A slow call (a cold connection's handshake) counts for half an issuance at most.
    expect(lost(400, 400)).toMatchObject({ do: 'wait', ms: 150 + 300 + 150 - 200 });
    // A region-local table's few milliseconds add next to nothing; the jitter still follows.
    expect(lost(4, 4)).toMatchObject({ do: 'wait', ms: 4 + 300 + 4 - 200 });
    expect(lost(4, 4, 0.5)).toMatchObject({ do: 'wait', ms: 4 + 300 + 4 - 200 + 37.5 });
  });

  it.each<[string, Observation, Decision['do']]>([
    [
      'serves a valid token with no lease, read in time',
      observe({ state: { token: fresh, lease: undefined } }),
      'serve',
    ],
    [
      'serves a valid token whose countdown still runs',
      observe({ state: { token: fresh, lease: lease(12) } }),
      'serve',
    ],
    [
      'reads again when the answer came after what it proves',
      observe({ state: { token: fresh, lease: undefined }, sinceReadMs: 6_000 }),
      'reread',
    ],
    [
      'lets go a stale lease on a valid token',
      observe({ state: { token: fresh, lease: lease(12) }, leaseStale: true }),
      'let-go',
    ],
    [
      'acquires from an empty item',
      observe({ state: { token: undefined, lease: undefined } }),
      'acquire',
    ],
    [
      'acquires from an expired token',
      observe({ state: { token: token('old', T0 - 1), lease: undefined } }),
      'acquire',
    ],
    [
      'takes over a stale lease on a suspect token',
      observe({ state: { token: fresh, lease: lease(0) }, suspect: true, leaseStale: true }),
      'acquire',
    ],
    [
      'waits for a live lease elsewhere',
      observe({ state: { token: undefined, lease: lease(0) } }),
      'wait',
    ],
    [
      'refuses a minValidity longer than any token lives',
      observe({ state: { token: fresh, lease: undefined }, need: LIFETIME }),
      'refuse',
    ],
    [
      'refuses a caller’s word too soon after the token was first seen (I4)',
      observe({ state: { token: fresh, lease: undefined }, need: 700_000, knownForMs: 10 }),
      'refuse',
    ],
  ])('%s', (_title, observation, expected) => {
    expect(decide(observation).do).toBe(expected);
  });

  it('never marks forced a replacement of a token inside its window, whatever the need (issue 24)', () => {
    // A window (30 s) shorter than the validity callers ask for (60 s): the token entered its
    // window, so replacing it is routine, not a caller's word (I4 bounds only the latter).
    const short = { ...settings, refreshWindowMs: 30_000 };
    const inWindow = token('due', T0 + 20_000);
    expect(
      decide(
        observe({ state: { token: inWindow, lease: undefined }, need: 60_000, settings: short }),
      ),
    ).toMatchObject({ do: 'acquire', cause: 'refresh-ahead', forced: false });
    // Outside its window (40 s left, a 30 s window), a caller asking 60 s does force it.
    const early = token('early', T0 + 40_000);
    expect(
      decide(observe({ state: { token: early, lease: undefined }, need: 60_000, settings: short })),
    ).toMatchObject({ do: 'acquire', cause: 'min-validity', forced: true });
    // At the window's very edge (30 s left) the token is in it, as the caller bounds judge it:
    // routine, not forced.
    const edge = token('edge', T0 + 30_000);
    expect(
      decide(observe({ state: { token: edge, lease: undefined }, need: 60_000, settings: short })),
    ).toMatchObject({ do: 'acquire', cause: 'refresh-ahead', forced: false });
  });

  it('takes over exactly the stale version seen, going on from its countdown, and replaces exactly the token read (I1, I2)', () => {
    const stale = lease(7);
    const decision = decide(
      observe({
        state: { token: fresh, lease: stale },
        suspect: false,
        leaseStale: true,
        need: 700_000,
      }),
    );
    // A valid servable token with a stale lease is let go, not replaced: the caller's need is
    // met by the token once the lease is gone.
    expect(decision.do).toBe('let-go');
    const suspect = decide(
      observe({ state: { token: fresh, lease: stale }, suspect: true, leaseStale: true }),
    );
    expect(suspect).toMatchObject({
      do: 'acquire',
      takeOver: stale,
      countdown: 7,
      replacesDigest: fresh.tokenDigest,
    });
  });

  it('takes over a stale lease on a token inside its window for a caller the token does not satisfy, going on from the countdown seen, instead of letting it go and counting down afresh (I1, I2; the late refresh of the three-region bench, 2026-11-26)', () => {
    // 30 s left of a 60 s window: the replacement is due. Its holder stopped at countdown 3.
    const due = token('due', T0 + 30_000);
    const stale = lease(3);
    const taken = { do: 'acquire', takeOver: stale, countdown: 3, replacesDigest: due.tokenDigest };
    // The warm-up (its need is the window) takes it over, and so does a caller needing 31 s.
    expect(
      decide(
        observe({
          state: { token: due, lease: stale },
          leaseStale: true,
          need: 'outside-window',
        }),
      ),
    ).toMatchObject({ ...taken, suspect: false, cause: 'takeover' });
    expect(
      decide(observe({ state: { token: due, lease: stale }, leaseStale: true, need: 31_000 })),
    ).toMatchObject(taken);
    // A caller the token satisfies lets it go and is served at once, as before.
    expect(
      decide(observe({ state: { token: due, lease: stale }, leaseStale: true, need: 1_000 })),
    ).toMatchObject({ do: 'let-go' });
    // Without time for the rest of that countdown and the POST, it is let go as before (I3).
    const short = leaseNeedsMs(3, DEFAULT_TIMING);
    expect(
      decide(
        observe({
          state: { token: due, lease: stale },
          leaseStale: true,
          need: 'outside-window',
          leftMs: short,
        }),
      ),
    ).toMatchObject({ do: 'let-go' });
    // Outside its window (a caller's replacement whose holder stopped), it is let go as before.
    expect(
      decide(observe({ state: { token: fresh, lease: stale }, leaseStale: true, need: 700_000 })),
    ).toMatchObject({ do: 'let-go' });
  });

  const arbitrary = {
    token: fc.option(
      fc.record({
        expiresIn: fc.integer({ min: -DEFAULT_TIMING.skewToleranceMs * 2, max: LIFETIME }),
        forced: fc.boolean(),
        reported: fc.boolean(),
      }),
      { nil: undefined },
    ),
    lease: fc.option(
      fc.record({ countdown: fc.integer({ min: 0, max: 30 }), forced: fc.boolean() }),
      {
        nil: undefined,
      },
    ),
    view: fc.record({
      suspect: fc.boolean(),
      leaseStale: fc.boolean(),
      proofMs: fc.integer({ min: 0, max: 6_000 }),
      sinceReadMs: fc.integer({ min: 0, max: 8_000 }),
      leftMs: fc.integer({ min: -100, max: 20_000 }),
      readReserveMs: fc.integer({ min: 50, max: 400 }),
      need: fc.oneof(
        fc.integer({ min: 0, max: LIFETIME + 1_000 }),
        fc.constant('outside-window' as const),
      ),
      knownForMs: fc.integer({ min: 0, max: 600_000 }),
      mayForce: fc.boolean(),
      revokesOnReissue: fc.boolean(),
      waits: fc.integer({ min: 0, max: 10 }),
      draw: fc.double({ min: 0, max: 1, maxExcluded: true, noNaN: true }),
    }),
  };
  // Each observation at a drawn protocol timing: the default, a scaled one, or any valid one.
  const drawn = fc
    .tuple(arbitrary.token, arbitrary.lease, arbitrary.view, validTimings)
    .map(([t, l, v, timing]): Observation => {
      const record = t && token('t', T0 + t.expiresIn, t.forced ? { forced: true } : {});
      const state = {
        token: record,
        lease: l && lease(l.countdown, l.forced ? { forced: true } : {}),
      };
      const valid = record && record.expiresAt > T0 ? record : undefined;
      return observe({
        ...v,
        state,
        valid,
        suspect: valid !== undefined && v.suspect,
        settings: { ...settings, timing },
      });
    });

  it('I2: serves only a valid, unsuspected token, inside what its read proves, with the validity asked for', () => {
    fc.assert(
      fc.property(drawn, (o) => {
        const d = decide(o);
        if (d.do !== 'serve') return;
        expect(o.suspect).toBe(false);
        expect(d.record).toBe(o.state.token);
        expect(d.record.expiresAt).toBeGreaterThan(o.now);
        expect(o.sinceReadMs).toBeLessThan(o.proofMs);
        const need = o.request.minValidityMs;
        if (typeof need === 'number') expect(d.record.expiresAt - o.now).toBeGreaterThan(need);
      }),
      { numRuns: 3_000 },
    );
  });

  it('I1: acquires only without a live lease, naming the token read, and taking over only the version seen', () => {
    fc.assert(
      fc.property(drawn, (o) => {
        const d = decide(o);
        if (d.do !== 'acquire') return;
        expect(o.state.lease === undefined || o.leaseStale).toBe(true);
        expect(d.takeOver).toBe(o.state.lease);
        expect(d.replacesDigest).toBe(o.state.token?.tokenDigest);
      }),
      { numRuns: 3_000 },
    );
  });

  it('I3: takes no lease without time for its countdown and POST, and waits no longer than leaves a read’s time', () => {
    fc.assert(
      fc.property(drawn, (o) => {
        const d = decide(o);
        if (d.do === 'acquire')
          expect(leaseNeedsMs(d.countdown, o.settings.timing)).toBeLessThan(o.leftMs);
        if (d.do === 'wait') {
          expect(d.ms).toBeGreaterThan(0);
          expect(d.ms).toBeLessThanOrEqual(o.leftMs - o.readReserveMs);
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it('I2: announces a countdown that outlasts the re-check whenever it replaces a token some container may serve', () => {
    fc.assert(
      fc.property(drawn, (o) => {
        const d = decide(o);
        if (d.do !== 'acquire' || d.takeOver || !o.revokesOnReissue) return;
        const t = o.state.token;
        const timing = o.settings.timing;
        if (t && t.expiresAt + timing.skewToleranceMs > o.now) {
          // Its steps outlast the longest re-check a reader applies (5 s here) plus the margin:
          // the POST leaves only after every proof of a read sent before the lease was written.
          expect(d.countdown * timing.countdownStepMs).toBeGreaterThanOrEqual(
            5_000 + timing.proofMarginMs,
          );
          // At the default timing, by a whole step more.
          if (timing === DEFAULT_TIMING)
            expect((d.countdown - 1) * 250).toBeGreaterThanOrEqual(5_000);
        }
      }),
      { numRuns: 3_000 },
    );
  });

  it('I4: replaces a servable token outside its window on a caller’s word only when the caller may force and the token is old enough', () => {
    fc.assert(
      fc.property(drawn, (o) => {
        const d = decide(o);
        const warmUp = o.request.minValidityMs === 'outside-window';
        if (d.do !== 'acquire' || !d.replaced || o.suspect || warmUp) {
          return;
        }
        // Inside its window a token is due for replacement anyway: asking forces nothing.
        if (d.replaced.expiresAt - o.now <= windowMs(d.replaced, settings)) return;
        expect(o.request.mayForce).toBe(true);
        expect(o.knownForMs).toBeGreaterThanOrEqual(settings.invalidateFloorMs);
      }),
      { numRuns: 3_000 },
    );
  });
});

describe('Function: decide, at its edges', () => {
  const fresh = token('fresh', T0 + 600_000);

  // I2 and I3: an answer older than its proof may predate a replacement that revoked the token;
  // with no time left for another read, the caller is refused, never served it.
  it('I2, I3: refuses (store too slow) a token read longer ago than its proof when no time is left for another read', () => {
    const late = { state: { token: fresh, lease: undefined }, sinceReadMs: 6_000 };
    const refused = decide(observe({ ...late, leftMs: 0 }));
    expect(refused).toMatchObject({ do: 'refuse', error: { code: 'STORE_UNAVAILABLE' } });
    expect(refused.do === 'refuse' && refused.error.message).toBe(
      'The token store answered too slowly; retry shortly',
    );
    expect(decide(observe({ ...late, leftMs: 1 })).do).toBe('reread');
  });

  // I3, and I2 for the refusal: with no time left, no lease is taken; a refusal over a suspect
  // token says a replacement may be under way, so that it is not served as the last good one.
  it('I3: takes no lease with no time left, and says a replacement may be under way over a suspect token', () => {
    for (const suspect of [false, true]) {
      const state = { token: suspect ? fresh : undefined, lease: undefined };
      const d = decide(observe({ state, suspect, leftMs: 0 }));
      expect(d).toMatchObject({
        do: 'refuse',
        error: {
          message: 'No time left to issue a token',
          retryAfterSeconds: 1,
          refreshInProgress: suspect,
        },
      });
    }
  });

  // I3, and I2 for the refusal: without time for its countdown and POST no lease is taken; the
  // refusal says nothing against the token held (no replacement is under way), and names what
  // there was no time for.
  it('I3: takes no lease without time for its countdown and POST, and says no replacement is under way', () => {
    const first = decide(observe({ state: { token: undefined, lease: undefined }, leftMs: 1 }));
    expect(first).toMatchObject({
      do: 'refuse',
      error: {
        message: 'Not enough time left to issue a token; retry shortly',
        retryAfterSeconds: 1,
        refreshInProgress: false,
      },
    });
    const replacement = decide(
      observe({ state: { token: fresh, lease: undefined }, need: 700_000, leftMs: 1_000 }),
    );
    expect(replacement).toMatchObject({
      do: 'refuse',
      error: {
        message: 'Not enough time left to replace the token safely; retry shortly',
        refreshInProgress: false,
      },
    });
  });

  // I3, and I2 for the refusal: a wait for another holder that must end for the deadline says,
  // over a suspect token, that a replacement is under way (the token may be revoked already).
  it('I3: a wait that cannot end before the deadline is refused, saying whether a replacement may have revoked the token', () => {
    for (const suspect of [false, true]) {
      const state = { token: suspect ? fresh : undefined, lease: lease(0) };
      const d = decide(observe({ state, suspect, leftMs: 50, readReserveMs: 50 }));
      expect(d).toMatchObject({
        do: 'refuse',
        error: {
          message: 'Timed out waiting for another container to issue the token',
          retryAfterSeconds: 1,
          refreshInProgress: suspect,
        },
      });
    }
  });

  // I2 (and I1.5): a token expired less than the skew tolerance ago may still be served on a
  // slower clock, so its replacement is counted down; one expired longer ago is served nowhere,
  // and is replaced at once, like a first token.
  it('I2: counts down the replacement of a token expired less than the skew tolerance ago, and of no older one', () => {
    const countdownAfter = (expiredMsAgo: number) => {
      const d = decide(
        observe({ state: { token: token('old', T0 - expiredMsAgo), lease: undefined } }),
      );
      return d.do === 'acquire' ? d.countdown : undefined;
    };
    expect(countdownAfter(DEFAULT_TIMING.skewToleranceMs - 1)).toBeGreaterThan(1);
    expect(countdownAfter(DEFAULT_TIMING.skewToleranceMs)).toBe(0);
    expect(countdownAfter(10 * DEFAULT_TIMING.skewToleranceMs)).toBe(0);
    expect(decide(observe({ state: { token: undefined, lease: undefined } }))).toMatchObject({
      do: 'acquire',
      countdown: 0,
    });
  });

  it('takes a stale countdown over for a caller needing exactly the validity left, and finishes a forced lease as forced (I1, I4)', () => {
    // 30 s left, inside the 60 s window; the caller needs those 30 s, which the token does not
    // give with time to spare.
    const due = token('due', T0 + 30_000);
    const over = (stale: Lease) =>
      decide(observe({ state: { token: due, lease: stale }, leaseStale: true, need: 30_000 }));
    expect(over(lease(3))).toMatchObject({ do: 'acquire', takeOver: lease(3), forced: false });
    // A caller's replacement taken over is one too (I4), whatever the taker's cause.
    expect(over(lease(3, { forced: true }))).toMatchObject({
      do: 'acquire',
      cause: 'takeover',
      forced: true,
    });
  });

  it('I3: names an issuance, not a replacement, when it has no time to take over a countdown at 1', () => {
    const gone = token('gone', T0 - 1_000);
    const d = decide(
      observe({ state: { token: gone, lease: lease(1) }, leaseStale: true, leftMs: 1 }),
    );
    expect(d).toMatchObject({
      do: 'refuse',
      error: { message: 'Not enough time left to issue a token; retry shortly' },
    });
  });

  it('reads again, past the first wait for a holder’s token, in a doubling step with half of it jitter (liveness)', () => {
    // A quarter of the 300 ms issuance, doubled per wait, capped at two steps (500 ms).
    const later = (waits: number, draw: number) =>
      decide(observe({ state: { token: undefined, lease: lease(1) }, waits, draw }));
    expect(later(2, 0)).toMatchObject({ do: 'wait', ms: 150 });
    expect(later(2, 0.5)).toMatchObject({ do: 'wait', ms: 225 });
    expect(later(2, 1)).toMatchObject({ do: 'wait', ms: 300 });
    expect(later(4, 1)).toMatchObject({ do: 'wait', ms: 500 });
  });
});
