/**
 * I2 where a flow fails for sure, and where the clocks disagree about a freeze: the gaps the
 * mutation run of issue 18 left (docs/benchmarks.md, mutation testing). Each test kills the
 * mutant named above it.
 */

import { describe, expect, it } from 'vitest';
import { DEFAULT_TIMING } from '../../../../lib/broker/timing/index.js';
import { ConnectionView } from '../../../../lib/broker/view/connection-state.js';
import { Deadline } from '../../../../lib/clock.js';
import { UpstreamRejectedError, UpstreamUnavailableError } from '../../../../lib/errors.js';
import type { TokenIssuer } from '../../../../lib/ports.js';
import {
  connection as connectionOf,
  InMemoryTokenStore,
  ManualClock,
  primed,
} from '../../../support/fakes.js';
import { fleetBroker, seed, Upstream, wrap } from '../../../support/fleet-model.js';
import { issuance, record, T0 } from '../setup.js';

/** An issuer whose authorize fails for sure (a 400: nothing issued, not the credentials). */
const refusing: TokenIssuer = {
  authorize: async () => {
    throw new UpstreamRejectedError('Open API rejected the authorize request: HTTP 400', {
      upstreamStatus: 400,
    });
  },
  requestToken: () => Promise.reject(new Error('not reached')),
};

describe('I2: a flow that fails for sure puts back only a token it may vouch for', () => {
  // Mutant in the failed flow's clean-up (=== → !==): a suspect token put back in memory as confirmed.
  it('I2: after taking over a suspect token (a POST may be out), a failed flow does not serve it again', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 60_000, 1_200_000);
    // A holder died after its fence: countdown 0, expired long ago (stale at first sight); its
    // POST landed upstream and revoked t0.
    const item = store.items.get('sandbox');
    store.items.set('sandbox', {
      ...item,
      lease: {
        holder: 'dead:1',
        version: 'v-dead',
        expiresAt: T0 - 60_000,
        durationMs: 3_000,
        countdown: 0,
      },
    });
    up.post(T0 - 59_000, 1_200);
    expect(up.revoked.has(t0.accessToken)).toBe(true);
    const a = fleetBroker(store, clock, up, { issuer: refusing });
    const first = await a
      .getToken('sandbox', { deadline: Deadline.in(clock, 5_000) })
      .catch((e: Error) => e);
    expect(first).toBeInstanceOf(UpstreamRejectedError);
    // Asked again: neither from memory nor as the last good token.
    const again = await a
      .getToken('sandbox', { deadline: Deadline.in(clock, 5_000) })
      .catch((e: Error) => e);
    expect(again instanceof Error ? again.name : again.record.accessToken).not.toBe(t0.accessToken);
  });

  // Mutant in the failed flow's clean-up (.catch(() => false) → true): a release that failed taken for one
  // that proved the lease still held.
  it('I2: when the release after a failed flow fails too, the replaced token is dropped, not vouched for', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const up = new Upstream();
    const t0 = seed(store, up, T0 - 1_170_000, 1_200_000); // in its window
    let fail: ((error: Error) => void) | undefined;
    const slow: TokenIssuer = {
      authorize: () =>
        new Promise((_, reject) => {
          fail = reject;
        }),
      requestToken: () => Promise.reject(new Error('not reached')),
    };
    const cut = wrap(store, {
      releaseLease: async () => {
        throw new Error('socket hang up');
      },
    });
    const a = fleetBroker(cut, clock, up, { issuer: slow });
    await a.getToken('sandbox', { deadline: Deadline.in(clock, 5_000) }); // starts the refresh, serves t0
    await clock.advance(100);
    // Meanwhile another container replaced t0 (its lease after A's, say A was paused).
    up.post(clock.now(), 1_200);
    fail?.(
      new UpstreamRejectedError('Open API rejected the authorize request: HTTP 400', {
        upstreamStatus: 400,
      }),
    );
    await a.idle();
    const next = await a
      .getToken('sandbox', { deadline: Deadline.in(clock, 5_000) })
      .catch((e: Error) => e);
    if (!(next instanceof Error)) {
      // Whatever it serves, it is not the token it could not vouch for from memory.
      expect(next.source === 'memory' && next.record.accessToken === t0.accessToken).toBe(false);
    }
  });
});

describe('I1: after an unknown outcome, A1 counts from the give-up too', () => {
  // Survivor in the failed flow's clean-up (the grace renewal judged against the fence's reservation): a
  // container frozen during its POST past what its confirmation reserved. An attempt may have
  // left as late as the thaw (A2 broken: the abort timer fired late), and no attempt follows the
  // give-up, so the lease is held until now + A1's bound (twice the timeout), not only until the
  // reservation (which has passed); holding it only that long would let another POST start.
  it('I1: a holder frozen during its POST past the reservation holds the lease for A1’s bound from when it learns the outcome is unknown', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const current = record('current', T0 + 100_000);
    store.setToken(current);
    const a = issuance(
      store,
      clock,
      async (_c, options) => {
        await options.fence?.();
        // Frozen 7 s with the POST out: past its 2 s budget and the 4 s the fence reserved.
        clock.advanceNow(7_000);
        throw new UpstreamUnavailableError('Open API access-token request failed: socket hang up', {
          outcomeUnknown: true,
        });
      },
      { timeout: 2_000 },
    );
    const error = await a
      .refresh(connectionOf(), current, Deadline.in(clock, 20_000))
      .catch((e) => e);
    expect(error).toMatchObject({ outcomeUnknown: true });
    expect(store.items.get('sandbox')?.lease?.expiresAt).toBe(clock.now() + 4_000);
  });
});

describe('I2: a freeze the monotonic clock did not count', () => {
  // Mutant connection-state.ts `rebased` (the lag < 1 guard → false): an entry moved later when the
  // wall clock ran ahead of the monotonic one, stretching its proof by the freeze.
  it('I2: memory’s proof ends by the wall clock when the monotonic clock missed a freeze', () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, {
      refreshWindowMs: 600_000,
      memoryRecheckMs: 5_000,
      timing: DEFAULT_TIMING,
    });
    const record = {
      connection: 'sandbox',
      accessToken: 'held',
      tokenDigest: 'digest-held',
      issuedAt: T0 - 60_000,
      expiresAt: T0 + 3_600_000,
    };
    primed(view, clock, record, T0);
    expect(
      view.servable('sandbox', { minValidityMs: 0, explicit: false }).record?.accessToken,
    ).toBe('held');
    // Frozen 10 s: Lambda resynchronises the wall clock on thaw; this monotonic clock missed it.
    clock.step(10_000);
    expect(view.servable('sandbox', { minValidityMs: 0, explicit: false }).record).toBeUndefined();
    // Its proof (5.15 s from the read) is not moved by the 10 s the monotonic clock missed.
    expect(view.entry('sandbox')?.until).toBeLessThan(T0 + 6_000);
  });
});
