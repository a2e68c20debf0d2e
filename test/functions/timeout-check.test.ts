/**
 * A function timeout too short for a refresh (issue 24, then issue 37). The function learns its
 * timeout at its first invocation (the time left then). When a refresh's countdown and POST
 * cannot fit it, issue 24 refused every invocation, so one setting changed in the console took
 * every caller down. Now callers keep being served what the store and memory prove, and only
 * an issuance is refused, with its own code (`FUNCTION_TIMEOUT_TOO_SHORT`, 503), counted as
 * `IssuanceRefused` for its alarm, and logged once naming both settings.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createHandler } from '../../functions/broker/handler.js';
import { TokenBroker } from '../../lib/broker/index.js';
import { DEFAULT_TIMING } from '../../lib/broker/timing/index.js';
import { systemClock } from '../../lib/clock.js';
import { MetricName } from '../../lib/metrics.js';
import {
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type LambdaHandler,
  scheduledEvent,
} from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  FakeSecretSource,
  InMemoryTokenStore,
} from '../support/fakes.js';
import { issuerFor, seed, Upstream } from '../support/fleet-model.js';
import { captureOutput } from '../support/lambda.js';

let output: ReturnType<typeof captureOutput>;
beforeAll(() => {
  output = captureOutput();
});
afterAll(() => output.stop());

/** A container whose store holds a valid `sandbox` token, or none. */
const containerWith = (
  memoryRecheckSeconds: number,
  o: { token?: boolean; connections?: ReadonlyMap<string, { revokesOnReissue: boolean }> } = {},
) => {
  const store = new InMemoryTokenStore();
  const up = new Upstream();
  const clock = { ...systemClock, now: () => Date.now() };
  const token = o.token ? seed(store, up, Date.now() - 1_000, 3_600_000) : undefined;
  const metrics = new CountingMetrics();
  const broker = new TokenBroker({
    config: {
      connections: new Map([['sandbox', connection()]]),
      defaultMinValiditySeconds: 1,
      refreshWindowSeconds: 600,
      memoryRecheckSeconds: 5,
      maxTokenLifetimeSeconds: 86_400,
      upstreamTimeoutMs: 2_000,
      invalidateMinAgeSeconds: 2,
    },
    timing: DEFAULT_TIMING,
    store,
    secrets: new FakeSecretSource(),
    issuer: issuerFor(up, clock, 3_600),
    logger: captureLogger(),
    metrics,
    clock,
  });
  const handler = createHandler({
    broker,
    logger: new Logger({ serviceName: 'test' }),
    timeoutSettings: {
      memoryRecheckSeconds,
      refreshWindowSeconds: 600,
      timing: DEFAULT_TIMING,
      ...(o.connections ? { connections: o.connections } : {}),
    },
  }) as LambdaHandler;
  return { handler, up, token, metrics };
};

const getToken = { action: 'getToken', connection: 'sandbox' };

describe('Function: createHandler, with timeoutSettings', () => {
  it('serves the token it holds, and refuses an issuance with its own code, when a 10 s re-check cannot fit a 10 s timeout', async () => {
    const held = containerWith(10, { token: true });
    // Readers are served, by direct invoke and over HTTP.
    expect(await invokeHandler(held.handler, getToken)).toMatchObject({
      ok: true,
      result: { accessToken: held.token?.accessToken },
    });
    const overHttp = httpResponse(
      await invokeHandler(held.handler, httpEvent({ method: 'GET', url: '/tokens/sandbox' })),
    );
    expect(overHttp.status).toBe(200);
    expect(held.up.n).toBe(1); // the seeded token only

    // Nothing to serve: the issuance is refused with its own code, naming both settings.
    const empty = containerWith(10);
    const refused = await invokeHandler(empty.handler, getToken);
    expect(refused).toMatchObject({
      ok: false,
      errorType: 'FunctionTimeoutTooShortError',
      errorMessage: expect.stringContaining(
        'BROKER_MEMORY_RECHECK_SECONDS (10) needs a function timeout of at least 14 s',
      ),
    });
    const http = httpResponse(
      await invokeHandler(empty.handler, httpEvent({ method: 'GET', url: '/tokens/sandbox' })),
    );
    expect(http.status).toBe(503);
    expect(JSON.parse(http.body ?? '{}').error.code).toBe('FUNCTION_TIMEOUT_TOO_SHORT');
    // The warm-up reports it for the connection, and nothing reached the upstream.
    const warm = await invokeHandler(empty.handler, scheduledEvent());
    expect(JSON.stringify(warm)).toContain('FUNCTION_TIMEOUT_TOO_SHORT');
    expect(empty.up.n).toBe(0);
    expect(empty.metrics.get(MetricName.IssuanceRefused)).toBe(3);
    expect(output.text()).toContain('The function timeout is too short for a refresh');
  });

  it('runs as usual when the re-check fits, and checks the first invocation only', async () => {
    const { handler, up } = containerWith(5);
    expect(await invokeHandler(handler, scheduledEvent())).toMatchObject({ ok: true });
    expect(up.n).toBe(1);
    // A later invocation with little time left is not a shorter timeout.
    expect(
      await invokeHandler(handler, getToken, { ...DEFAULT_LAMBDA, timeoutMs: 2_000 }),
    ).toMatchObject({ ok: true });
  });

  it('judges again at the next invocation when the first read less time left (an init counted against it): the environment is not condemned for good (review of issue 24)', async () => {
    const { handler, up } = containerWith(5);
    const late = await invokeHandler(handler, getToken, { ...DEFAULT_LAMBDA, timeoutMs: 6_000 });
    expect(late).toMatchObject({ ok: false, errorType: 'FunctionTimeoutTooShortError' });
    expect(up.n).toBe(0);
    expect(await invokeHandler(handler, getToken)).toMatchObject({ ok: true });
    expect(up.n).toBe(1);
  });

  it('asks no countdown of connections whose reissue revokes nothing (review of issue 24)', async () => {
    const { handler, up } = containerWith(10, {
      connections: new Map([['partner', { revokesOnReissue: false }]]),
    });
    expect(await invokeHandler(handler, getToken)).toMatchObject({ ok: true });
    expect(up.n).toBe(1);
  });
});
