/**
 * Issue 24: a re-check whose countdown and POST cannot fit the function's timeout made every
 * warm-up fail ("Not enough time left…") with nothing to say why. The function learns its
 * timeout at its first invocation (the time left then) and, when the settings cannot fit it,
 * refuses every invocation with a typed error naming both settings.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHandler } from '../../functions/broker/handler.js';
import type { TokenBroker } from '../../lib/broker/index.js';
import { DEFAULT_TIMING } from '../../lib/broker/timing/index.js';
import { Deadline, systemClock } from '../../lib/clock.js';
import {
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type LambdaHandler,
  scheduledEvent,
} from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { captureOutput } from '../support/lambda.js';

let output: ReturnType<typeof captureOutput>;
beforeAll(() => {
  output = captureOutput();
});
afterAll(() => output.stop());

/** A broker that only answers the warm-up: enough to tell a refused invocation from one run. */
const broker = {
  deadlineIn: (ms: number) => Deadline.in(systemClock, ms),
  timing: DEFAULT_TIMING,
  warmUp: async () => ({ issued: 0, failed: 0, connections: [] }),
} as unknown as TokenBroker;

const handlerWith = (memoryRecheckSeconds: number) =>
  createHandler({
    broker,
    logger: new Logger({ serviceName: 'test' }),
    timeoutSettings: { memoryRecheckSeconds, refreshWindowSeconds: 600 },
  }) as LambdaHandler;

describe('Function: createHandler, with timeoutSettings', () => {
  it('refuses every invocation when a 10 s re-check cannot fit a 10 s timeout, naming both settings', async () => {
    const handler = handlerWith(10);
    const outcome = await invokeHandler(handler, scheduledEvent());
    expect(outcome).toMatchObject({
      ok: false,
      errorType: 'FunctionTimeoutTooShortError',
      errorMessage: expect.stringContaining(
        'BROKER_MEMORY_RECHECK_SECONDS (10) needs a function timeout of at least 14 s',
      ),
    });
    expect(JSON.stringify(outcome)).toContain("the function's timeout (serverless.yml `timeout`)");
    // Every later invocation too, whatever its kind: HTTP callers get a 500 with a request id.
    const response = httpResponse(
      await invokeHandler(handler, httpEvent({ method: 'POST', url: '/warm' })),
    );
    expect(response.status).toBe(500);
    expect(response.body).toContain('INTERNAL_ERROR');
    expect(output.text()).toContain('FUNCTION_TIMEOUT_TOO_SHORT');
  });

  it('runs as usual when the re-check fits, and checks the first invocation only', async () => {
    const handler = handlerWith(5);
    expect(await invokeHandler(handler, scheduledEvent())).toMatchObject({ ok: true });
    // A later invocation with little time left is not a shorter timeout.
    expect(
      await invokeHandler(handler, scheduledEvent(), { ...DEFAULT_LAMBDA, timeoutMs: 2_000 }),
    ).toMatchObject({ ok: true });
  });

  it('judges again at the next invocation when the first read less time left (an init counted against it): the environment is not condemned for good (review of issue 24)', async () => {
    const handler = handlerWith(5);
    const late = await invokeHandler(handler, scheduledEvent(), {
      ...DEFAULT_LAMBDA,
      timeoutMs: 6_000,
    });
    expect(late).toMatchObject({ ok: false, errorType: 'FunctionTimeoutTooShortError' });
    expect(await invokeHandler(handler, scheduledEvent())).toMatchObject({ ok: true });
  });

  it('asks no countdown of connections whose reissue revokes nothing (review of issue 24)', async () => {
    const handler = createHandler({
      broker,
      logger: new Logger({ serviceName: 'test' }),
      timeoutSettings: {
        memoryRecheckSeconds: 10,
        refreshWindowSeconds: 600,
        connections: new Map([['partner', { revokesOnReissue: false }]]),
      },
    }) as LambdaHandler;
    expect(await invokeHandler(handler, scheduledEvent())).toMatchObject({ ok: true });
  });

  it('takes the timeout from the first invocation: 5 s re-checks do not fit 6 s', async () => {
    const outcome = await invokeHandler(handlerWith(5), scheduledEvent(), {
      ...DEFAULT_LAMBDA,
      timeoutMs: 6_000,
    });
    expect(outcome).toMatchObject({ ok: false, errorType: 'FunctionTimeoutTooShortError' });
  });
});
