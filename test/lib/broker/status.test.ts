/**
 * The operator's status (RT5-STATUS, issue 37): it reads every connection's item from the store,
 * and each read is cut to the caller's deadline, as every other store call is (I3).
 */
import { describe, expect, it } from 'vitest';
import { StoreUnavailableError } from '../../../lib/errors.js';
import { InMemoryTokenStore, ManualClock } from '../../support/fakes.js';
import { fleetBroker, seed, Upstream, wrap } from '../../support/fleet-model.js';
import { T0 } from './setup.js';

describe('TokenBroker.status', () => {
  it('answers StoreUnavailableError by its deadline when the store does not answer', async () => {
    const clock = new ManualClock(T0);
    const up = new Upstream();
    const inner = new InMemoryTokenStore();
    seed(inner, up, T0 - 1_000, 1_200_000);
    const hanging = wrap(inner, { read: () => new Promise(() => undefined) });
    const broker = fleetBroker(hanging, clock, up);
    const answered = broker.status(broker.deadlineIn(1_000)).catch((error: unknown) => error);
    await clock.advance(999);
    let settled = false;
    void answered.then(() => {
      settled = true;
    });
    await clock.advance(0);
    expect(settled, 'answered before its deadline').toBe(false);
    await clock.advance(1);
    const error = await answered;
    expect(error).toBeInstanceOf(StoreUnavailableError);
    expect((error as Error).message).toMatch(/did not answer before the deadline/);
  });

  it('reads the token metadata (never the token) when the store answers', async () => {
    const clock = new ManualClock(T0);
    const up = new Upstream();
    const store = new InMemoryTokenStore();
    const token = seed(store, up, T0 - 1_000, 1_200_000);
    const broker = fleetBroker(store, clock, up);
    const [status] = await broker.status(broker.deadlineIn(1_000));
    expect(status).toMatchObject({
      connection: 'sandbox',
      token: { tokenDigest: token.tokenDigest, expiresIn: 1_199 },
      lease: null,
    });
    expect(JSON.stringify(status)).not.toContain(token.accessToken);
  });
});
