/**
 * The handlers' deadline (I3, issue 27): made from the time the invocation has left, on the
 * broker's own monotonic clock, with no wall clock read; the core judges it as it is.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import { describe, expect, it } from 'vitest';
import { createInvokeHandler } from '../../functions/broker/invoke.js';
import { deadlineOf } from '../../functions/broker/shared.js';
import { DEFAULT_TIMING, storeReserveMs } from '../../lib/broker/timing/index.js';
import { noMetrics } from '../../lib/metrics.js';
import type { TokenIssuer } from '../../lib/ports.js';
import { InMemoryTokenStore, ManualClock } from '../support/fakes.js';
import { fleetBroker, issuerFor, Upstream } from '../support/fleet-model.js';

const T0 = 1_795_262_400_000;
const context = (remainingMs: number) =>
  ({ getRemainingTimeInMillis: () => remainingMs }) as unknown as Context;

describe('Function: the deadline a handler gives the broker', () => {
  it('is the time left less the answer margin, on the broker’s clock, whatever its wall clock says', async () => {
    const clock = new ManualClock(T0);
    const up = new Upstream();
    const issuer = issuerFor(up, clock);
    const left: number[] = [];
    const watching: TokenIssuer = {
      ...issuer,
      authorize: (connection, credentials, options) => {
        left.push(options.deadline.leftMs());
        return issuer.authorize(connection, credentials, options);
      },
    };
    const broker = fleetBroker(new InMemoryTokenStore(), clock, up, { issuer: watching });
    // The wall clock stepped back an hour (NTP, an operator): a deadline read from it, or
    // from another clock than the broker's, would be off by as much.
    clock.step(-3_600_000);
    const handler = createInvokeHandler(
      broker,
      new Logger({ serviceName: 'test', logLevel: 'SILENT' }),
      noMetrics,
    );
    const answer = await handler({ action: 'getToken', connection: 'sandbox' }, context(6_000));
    expect(answer).toMatchObject({ connection: 'sandbox' });
    // The flow keeps the time for its store write back (its deadline less that reserve).
    expect(left).toEqual([6_000 - DEFAULT_TIMING.answerMarginMs - storeReserveMs(DEFAULT_TIMING)]);
  });

  it('is made by the broker, and never negative', () => {
    const clock = new ManualClock(T0);
    const broker = fleetBroker(new InMemoryTokenStore(), clock, new Upstream());
    expect(deadlineOf(broker, context(2_000)).leftMs()).toBe(2_000 - DEFAULT_TIMING.answerMarginMs);
    expect(deadlineOf(broker, context(100)).leftMs()).toBe(0);
  });
});
