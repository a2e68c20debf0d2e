/**
 * The grace renewal after a POST whose outcome is unknown, as a watcher of the previous release
 * (0.1.0) sees it: found by an adversarial review of the failed flows (2026-11-26, review 4);
 * failed before its fix. 0.1.0 tells lease writes apart by holder and expiry alone (its
 * `LeaseWatch`: stale once the same holder and expiry were seen for the duration read now), and
 * its takeover names exactly those two. Its own grace renewal wrote the confirmation's expiry
 * plus 1 ms for that reason; the version per write (ADR 0011) dropped the 1 ms, so a renewal
 * that keeps the confirmation's reservation wrote the very same expiry, with a shorter duration.
 */
import { describe, expect, it } from 'vitest';
import { cleanUp } from '../../../lib/broker/holder/issue-under-lease.js';
import type { ConnectionView } from '../../../lib/broker/view/index.js';
import { Deadline } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import type { LeaseRef, LeaseTerms, TokenStore } from '../../../lib/ports.js';
import { ManualClock } from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const GRACE_MS = 10_000;

/** 0.1.0's rule (lib/broker/lease-watch.ts at a5f1bf2): when it takes the lease over. */
const olderReleaseStaleAt = (
  seen: { holder: string; expiresAt: number; seenAt: number },
  now: { holder: string; expiresAt: number; durationMs: number },
): number | undefined =>
  seen.holder === now.holder && seen.expiresAt === now.expiresAt
    ? seen.seenAt + now.durationMs
    : undefined; // another write: watched afresh from when it is first seen

describe('I1: the grace renewal in a fleet with the previous release (0.1.0)', () => {
  it('I1: an older release’s watcher does not take the lease over while a POST of unknown outcome may still land', async () => {
    const clock = new ManualClock(T0);
    const renewals: LeaseTerms[] = [];
    const store = {
      renewLease: async (_c: string, _l: LeaseRef, next: LeaseTerms) => {
        renewals.push(next);
        return true;
      },
    } as unknown as TokenStore;
    const connection = { name: 'sandbox' } as ConnectionConfig;
    const effects = cleanUp(
      {
        store,
        view: {} as ConnectionView,
        clock,
        bounded: (operation) => operation,
      },
      connection,
      { replaced: undefined, deadline: Deadline.in(clock, 30_000) },
    );
    // The fence at T0: the POST's budget (10 s) and a grace after it (10 s). A 0.1.0 watcher
    // waiting on the lease sees that confirmation at once.
    const fence = { holder: 'h:1', expiresAt: T0 + 2 * GRACE_MS, durationMs: 2 * GRACE_MS };
    const seen = { holder: fence.holder, expiresAt: fence.expiresAt, seenAt: T0 };
    // The POST answers 502 after 8 s (outcome unknown): it may land until 18 s.
    await clock.advance(8_000);
    const answeredAt = clock.now();
    // The holder's reducer says until when the POST may land (here: a grace from the answer).
    await effects.holdForGrace(
      { holder: 'h:1', version: 'fence' },
      fence.expiresAt,
      clock.monotonic() + GRACE_MS,
    );
    const grace = renewals.at(-1) as LeaseTerms;
    expect(grace.leaseExpiresAt).toBeGreaterThanOrEqual(answeredAt + GRACE_MS);
    const takenOverAt = olderReleaseStaleAt(seen, {
      holder: 'h:1',
      expiresAt: grace.leaseExpiresAt,
      durationMs: grace.durationMs,
    });
    // On main: the same expiry, 12 s left, so 0.1.0 takes over (and POSTs) at 12 s, not 18 s.
    expect(takenOverAt ?? Number.POSITIVE_INFINITY).toBeGreaterThanOrEqual(answeredAt + GRACE_MS);
  });
});
