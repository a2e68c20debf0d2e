/**
 * A token's expiry is an epoch the upstream stated: compared with the wall clock when it is
 * read, and judged on the monotonic clock from then on (docs/protocol.md, "Time"). A wall clock
 * stepped back (an NTP correction) must not serve a token past its expiry.
 */
import { describe, expect, it } from 'vitest';
import { ConnectionView } from '../../../lib/broker/view/connection-view.js';
import { TokenMemory } from '../../../lib/broker/view/token-memory.js';
import { ManualClock } from '../../support/fakes.js';
import { record, T0 } from './setup.js';

const settings = { refreshWindowMs: 60_000, memoryRecheckMs: 10_000 };

/** A token with 6 s left, kept at T0; then 8 s pass while the wall clock steps back 5 s. */
const steppedBack = async (keep: (clock: ManualClock) => void) => {
  const clock = new ManualClock(T0);
  keep(clock);
  await clock.advance(8_000);
  clock.step(-5_000);
  return clock;
};

describe('Class: TokenMemory', () => {
  it('rebases a kept token’s expiry on the monotonic clock: a wall clock stepped back 5 s does not make an expired token last good', async () => {
    let memory: TokenMemory | undefined;
    const clock = await steppedBack((c) => {
      memory = new TokenMemory(c);
      memory.set({
        record: record('t', T0 + 6_000),
        checkedAt: T0,
        checkedAtMonotonic: c.monotonic(),
        until: T0 + 10_000,
      });
    });
    // The wall clock says T0 + 3 s; the token expired 2 s ago. Before: served as last good.
    expect(memory?.lastGood('sandbox', clock.now())).toBeUndefined();
    // Its lifetime is unchanged: both its times moved by the 5 s the wall clock lost.
    const entry = memory?.get('sandbox');
    expect(entry?.record.expiresAt).toBe(T0 + 1_000);
    expect(entry?.record.issuedAt).toBe(T0 + 1_000 - 3_600_000);
  });

  it('serves nothing from memory past the expiry the monotonic clock counts', async () => {
    let view: ConnectionView | undefined;
    const clock = await steppedBack((c) => {
      view = new ConnectionView(c, settings);
      view.confirmed(record('t', T0 + 6_000), { sentAt: T0, sentAtMonotonic: c.monotonic() });
    });
    // Before: 3 s left on the stepped wall clock, so a caller needing 1 s got an expired token.
    expect(view?.fromMemory('sandbox', clock.now(), 1_000)).toBeUndefined();
  });

  it('leaves a kept token as it is while the two clocks agree', async () => {
    const clock = new ManualClock(T0);
    const view = new ConnectionView(clock, settings);
    view.confirmed(record('t', T0 + 6_000), { sentAt: T0, sentAtMonotonic: clock.monotonic() });
    await clock.advance(3_000);
    expect(view.fromMemory('sandbox', clock.now(), 1_000)?.expiresAt).toBe(T0 + 6_000);
  });
});
