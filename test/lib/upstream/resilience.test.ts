/**
 * The retry policy judges the caller's deadline on the monotonic clock (docs/protocol.md,
 * "Time"): a wall clock stepped between attempts neither grants a retry past the deadline nor
 * takes one away.
 */
import { describe, expect, it } from 'vitest';
import { Deadline } from '../../../lib/clock.js';
import { UpstreamUnavailableError } from '../../../lib/errors.js';
import { DEFAULT_RESILIENCE, UpstreamResilience } from '../../../lib/upstream/resilience.js';
import { caught, unexpected } from '../../support/errors.js';
import { ManualClock } from '../../support/fakes.js';

const resilience = () =>
  new UpstreamResilience({ ...DEFAULT_RESILIENCE, baseDelayMs: 1, maxDelayMs: 1, random: () => 0 });

/** An attempt that takes `ms` on `clock` (its wall clock stepped by `stepMs`) and fails transiently. */
const slowFailure = (clock: ManualClock, ms: number, stepMs: number) => async () => {
  await clock.advance(ms);
  clock.step(stepMs);
  throw new UpstreamUnavailableError('Open API authorize answered HTTP 503', {
    retryAfterSeconds: 1,
  });
};

describe('Class: UpstreamResilience', () => {
  it('retries no attempt past the deadline when the wall clock steps back 5 s during an attempt', async () => {
    const clock = new ManualClock(0);
    let attempts = 0;
    const failing = slowFailure(clock, 900, -5_000);
    const error = await resilience()
      .execute('sandbox', Deadline.in(clock, 1_000), () => {
        attempts += 1;
        return failing();
      })
      .then(unexpected, caught);
    // 100 ms are left on the monotonic clock, under the 200 ms an attempt needs; on the stepped
    // wall clock, 5.1 s would have been.
    expect(error).toBeInstanceOf(UpstreamUnavailableError);
    expect(attempts).toBe(1);
  });

  it('still retries when the wall clock steps forward 5 s during an attempt', async () => {
    const clock = new ManualClock(0);
    let attempts = 0;
    const failing = slowFailure(clock, 100, 5_000);
    await resilience()
      .execute('sandbox', Deadline.in(clock, 1_000), () => {
        attempts += 1;
        return failing();
      })
      .then(unexpected, caught);
    // Each attempt leaves 100 ms less of the 1 s; the third is the last the policy allows.
    expect(attempts).toBe(3);
  });
});
