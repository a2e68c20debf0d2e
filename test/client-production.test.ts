/**
 * The client where services run it (a service developer's review, 2026-11-26): a Lambda function
 * with the middy middleware, whose invocation has a deadline and whose environment freezes
 * between invocations, and a long-running service whose calls may fail mid-way. Scripted
 * transports and fake timers: each case fails on the behaviour before its fix.
 */
import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { createTokenClient } from '../client/src/index.js';
import { tokenBroker } from '../client/src/middy.js';
import { type Caught, caught } from './support/errors.js';
import { scripted } from './support/scripted-transport.js';

const T0 = new Date('2026-11-24T12:00:00Z').getTime();

let issued = 0;
const tokenAnswer = (maxAgeMs = 4_900) => {
  issued += 1;
  return {
    connection: 'sandbox',
    accessToken: `at_${issued}`,
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    expiresIn: 3600,
    maxAgeMs,
    staleIfErrorSeconds: 600,
  };
};
const settle = () => vi.advanceTimersByTimeAsync(0);

interface LambdaRequest {
  context: {
    getRemainingTimeInMillis: () => number;
    tokenRejected?: (key: 'openApiToken') => Promise<unknown>;
  };
  internal: Record<string, unknown>;
}
const invocation = (remaining: () => number): LambdaRequest => ({
  context: { getRemainingTimeInMillis: remaining },
  internal: {},
});

beforeEach(() => {
  vi.useFakeTimers().setSystemTime(T0);
});
afterEach(() => {
  vi.useRealTimers();
});

describe('The middy middleware within an invocation’s deadline', () => {
  it('ends tokenRejected before the invocation does: the report’s answer took part of the time, the new token request gets what is left', async () => {
    const { sent, transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    const lambdaDeadline = Date.now() + 5_000;
    const request = invocation(() => lambdaDeadline - Date.now());
    const before = middleware.before(request);
    await settle();
    sent[0]?.answer(tokenAnswer());
    await before;
    let settledAt = 0;
    const retry = (request.context.tokenRejected?.('openApiToken') ?? Promise.resolve())
      .then(caught, caught)
      .finally(() => {
        settledAt = Date.now();
      });
    await settle();
    await vi.advanceTimersByTimeAsync(3_900); // the report answers inside its share
    sent[1]?.answer({ invalidated: true });
    await settle(); // the new token request never answers
    await vi.advanceTimersByTimeAsync(10_000);
    const error = await retry;
    expect(error.code).toBe('TIMEOUT');
    // Before: the new request was given the whole budget read before the report (7.9 s in all).
    expect(settledAt).toBeLessThanOrEqual(lambdaDeadline - 1_000);
  });

  it('keeps the client’s 10 s limit on a long invocation, so that a hanging broker fails over within it, not at half the invocation', async () => {
    const hanging = scripted();
    const answering = scripted();
    const middleware = tokenBroker({
      brokers: [hanging.transport, answering.transport],
      fetchData: { openApiToken: 'sandbox' },
    });
    const before = middleware.before(invocation(() => 900_000)).then(() => 'served', caught);
    await settle();
    // The first broker's share of the 10 s (before: half of the 899 s budget, about 450 s).
    await vi.advanceTimersByTimeAsync(6_000);
    expect(hanging.sent[0]?.signal.aborted).toBe(true);
    expect(answering.sent).toHaveLength(1);
    answering.sent[0]?.answer(tokenAnswer());
    await settle();
    expect(await before).toBe('served');
  });

  it('gives up on one hanging broker after the client’s 10 s, with a typed error, on a 15-minute invocation', async () => {
    const { transport } = scripted();
    const middleware = tokenBroker({ transport, fetchData: { openApiToken: 'sandbox' } });
    let outcome: 'served' | Caught | undefined;
    const before = middleware.before(invocation(() => 900_000)).then(
      () => {
        outcome = 'served';
      },
      (error: unknown) => {
        outcome = caught(error);
      },
    );
    await settle();
    await vi.advanceTimersByTimeAsync(10_001);
    expect((outcome as Caught | undefined)?.code).toBe('TIMEOUT');
    await before;
  });

  it('refuses a reserveMs that is not a number of milliseconds, 0 or more', () => {
    for (const reserveMs of [Number.NaN, -1, Number.POSITIVE_INFINITY]) {
      expect(() =>
        tokenBroker({ transport: scripted().transport, fetchData: { t: 'sandbox' }, reserveMs }),
      ).toThrow('reserveMs must be a number of milliseconds, 0 or more');
    }
  });
});

describe('The client across a freeze and a failed report', () => {
  it('does not hand a new caller the answer to a request left pending across a freeze: it asks again', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    // Invocation 1 starts a request and ends without waiting for it (a race that another won).
    void client.getToken('sandbox').catch(() => undefined);
    await settle();
    // Frozen five minutes: the wall clock moves, the monotonic clock (and the timers) do not.
    vi.setSystemTime(T0 + 300_000);
    const second = client.getToken('sandbox');
    await settle();
    sent[0]?.answer(tokenAnswer()); // the broker's answer from before the freeze
    // Before: invocation 2 joined that request and got its token, 300 s past its 4.9 s grant.
    expect(sent).toHaveLength(2);
    sent[1]?.answer(tokenAnswer());
    expect((await second).accessToken).toBe(`at_${issued}`);
  });

  it('does not reuse a cached token across a freeze the monotonic clock missed (as before)', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    const first = client.getToken('sandbox');
    await settle();
    sent[0]?.answer(tokenAnswer());
    await first;
    vi.setSystemTime(T0 + 300_000);
    const again = client.getToken('sandbox');
    await settle();
    expect(sent).toHaveLength(2);
    sent[1]?.answer(tokenAnswer());
    await again;
  });

  it('withToken releases the rejected response when the report itself fails', async () => {
    const { sent, transport } = scripted();
    const client = createTokenClient({ transport });
    let cancelled = false;
    const rejected = new Response(
      new ReadableStream({
        pull() {},
        cancel() {
          cancelled = true;
        },
      }),
      { status: 401 },
    );
    const call = client.withToken('sandbox', async () => rejected).then(caught, caught);
    await settle();
    sent[0]?.answer(tokenAnswer());
    await settle();
    sent[1]?.fail(new Error('socket hang up'));
    const error = await call;
    expect(error.code).toBe('TRANSPORT_FAILED');
    expect(cancelled).toBe(true);
  });
});
