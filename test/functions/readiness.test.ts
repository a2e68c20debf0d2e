/**
 * Readiness, through the whole handler: `GET /ready` and `{ "action": "ready" }` check each
 * connection's secret and token against the loopback Secrets Manager, dynalite and the
 * simulator, and name every misconfigured connection. `/health` stays liveness.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { httpEvent, httpResponse, type LambdaHandler } from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { applyEnv, type Stack, startStack } from '../../local/stack.js';
import { captureOutput, newContainer } from '../support/lambda.js';

let stack: Stack;
let output: ReturnType<typeof captureOutput>;
let handler: LambdaHandler;

beforeAll(async () => {
  stack = await startStack();
  const url = stack.simulator.url;
  stack.secrets.setSecret('open-api/not-json', 'clientId=abc');
  stack.secrets.setSecret(
    'open-api/wrong',
    JSON.stringify({ clientId: stack.v3Client.clientId, clientSecret: 'not-the-secret' }),
  );
  applyEnv({
    ...stack.env,
    BROKER_CONNECTIONS: JSON.stringify({
      good: { variant: 'v3', baseUrl: url, secretId: 'open-api/v3' },
      missing: { variant: 'v3', baseUrl: url, secretId: 'open-api/missing' },
      malformed: { variant: 'v3', baseUrl: url, secretId: 'open-api/not-json' },
      // Well-formed, but the upstream refuses it: only a token request can tell.
      wrong: { variant: 'legacy', baseUrl: url, secretId: 'open-api/wrong' },
    }),
    BROKER_UPSTREAM_TIMEOUT_MS: '1000',
  });
  output = captureOutput();
  handler = newContainer();
});
afterAll(async () => {
  output.stop();
  await stack.close();
});

const readyOver = async (how: 'http' | 'invoke') => {
  if (how === 'invoke') {
    const outcome = await invokeHandler(handler, { action: 'ready' });
    if (!outcome.ok) throw new Error(`ready failed: ${outcome.errorType}`);
    return { status: 200, report: outcome.result as Record<string, unknown> };
  }
  const response = httpResponse(
    await invokeHandler(handler, httpEvent({ method: 'GET', url: '/ready' })),
  );
  return {
    status: response.status,
    headers: response.headers,
    report: JSON.parse(response.body ?? '{}') as Record<string, unknown>,
  };
};

describe('Readiness: GET /ready and { "action": "ready" }', () => {
  it('reports each misconfigured connection by name, with the check that failed, and 503', async () => {
    const { status, headers, report } = await readyOver('http');
    expect(status).toBe(503);
    expect(headers?.['cache-control']).toBe('no-store');
    expect(report).toMatchObject({
      ready: false,
      connections: {
        good: { ready: true, secret: { status: 'ok' }, token: { status: 'ok' } },
        missing: {
          ready: false,
          secret: {
            status: 'failed',
            error: {
              code: 'SECRET_UNAVAILABLE',
              message: "Secret 'open-api/missing' does not exist",
            },
          },
          token: { status: 'skipped' },
        },
        malformed: {
          ready: false,
          secret: {
            status: 'failed',
            error: {
              code: 'SECRET_UNAVAILABLE',
              message: expect.stringContaining("Secret 'open-api/not-json' is not JSON"),
            },
          },
        },
        wrong: {
          ready: false,
          secret: { status: 'ok' },
          token: { status: 'failed', error: { code: 'UPSTREAM_REJECTED' } },
        },
      },
    });
    // What it says never carries a credential.
    const body = JSON.stringify(report);
    for (const credential of [...stack.credentials(), 'not-the-secret', 'clientId=abc']) {
      expect(body).not.toContain(credential);
    }
  });

  it('says the same over direct invoke, answered rather than thrown', async () => {
    const { report } = await readyOver('invoke');
    expect(report.ready).toBe(false);
    expect(Object.keys(report.connections as object).sort()).toEqual([
      'good',
      'malformed',
      'missing',
      'wrong',
    ]);
  });

  it('is ready, 200, once every connection is', async () => {
    applyEnv({
      BROKER_CONNECTIONS: JSON.stringify({
        good: { variant: 'v3', baseUrl: stack.simulator.url, secretId: 'open-api/v3' },
      }),
    });
    handler = newContainer();
    const { status, report } = await readyOver('http');
    expect(status).toBe(200);
    expect(report).toMatchObject({ ready: true, connections: { good: { ready: true } } });
  });

  it('leaves /health as liveness: ok whatever the secrets', async () => {
    applyEnv({
      BROKER_CONNECTIONS: JSON.stringify({
        missing: { variant: 'v3', baseUrl: stack.simulator.url, secretId: 'open-api/missing' },
      }),
    });
    handler = newContainer();
    const response = httpResponse(
      await invokeHandler(handler, httpEvent({ method: 'GET', url: '/health' })),
    );
    expect(response.status).toBe(200);
  });
});
