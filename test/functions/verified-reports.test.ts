/**
 * Verified reports through the whole handler, wired as in Lambda (`createAwsBroker`: one lazily
 * built Open API client issues and probes), against the simulator, DynamoDB on dynalite and the
 * loopback KMS. The probe sends the broker's token to the Open API: what the handler logged, at
 * DEBUG with events logged, is searched for every credential the stack handed out.
 */
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { issueWith } from '../../lib/broker/issuance/issue-flow.js';
import { Deadline, systemClock } from '../../lib/clock.js';
import { OpenApiClient } from '../../lib/upstream/open-api.js';
import { httpEvent, httpResponse, type LambdaHandler } from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { applyEnv, type Stack, startStack } from '../../local/stack.js';
import { connection } from '../support/fakes.js';
import { captureOutput, newContainer } from '../support/lambda.js';

let stack: Stack;
let output: ReturnType<typeof captureOutput>;

beforeAll(async () => {
  stack = await startStack({}, ['sandbox'], { encrypt: true, probe: true });
  applyEnv({
    ...stack.env,
    POWERTOOLS_LOG_LEVEL: 'DEBUG',
    POWERTOOLS_LOGGER_LOG_EVENT: 'true',
    // A report waits a minute on age alone: only the probe replaces at once.
    BROKER_INVALIDATE_MIN_AGE_SECONDS: '60',
  });
  output = captureOutput();
});
afterAll(async () => {
  output.stop();
  await stack.close();
});

const http = async (handler: LambdaHandler, method: string, url: string, body?: unknown) => {
  const response = httpResponse(
    await invokeHandler(
      handler,
      httpEvent({
        method,
        url,
        ...(body === undefined
          ? {}
          : { body: JSON.stringify(body), headers: { 'content-type': 'application/json' } }),
      }),
    ),
  );
  return { ...response, json: response.body ? JSON.parse(response.body) : undefined };
};

describe('Handler: verified reports', () => {
  it('answers verified valid for a live token and replaces a revoked one at once, logging no token', async () => {
    const handler = newContainer();
    const first = (await http(handler, 'GET', '/tokens/sandbox')).json.accessToken as string;
    const report = () =>
      http(handler, 'POST', '/tokens/sandbox/invalidate', { accessToken: first });
    expect(await report()).toMatchObject({
      status: 200,
      json: { invalidated: false, verified: 'valid' },
    });
    // Another system issues on the same client ID.
    const other = new OpenApiClient({ timeoutMs: 2_000, limits: { maxLifetimeSeconds: 86_400 } });
    await issueWith(other, connection({ baseUrl: stack.simulator.url }), stack.v3Client, {
      deadline: Deadline.in(systemClock, 5_000),
    });
    await new Promise((done) => setTimeout(done, 5_100)); // past the probe's 5 s
    expect(await report()).toMatchObject({
      status: 200,
      json: { invalidated: true, verified: 'revoked' },
    });
    const next = (await http(handler, 'GET', '/tokens/sandbox')).json.accessToken as string;
    expect(stack.simulator.isValid(next)).toBe(true);
    expect(output.text()).toContain('Another system may be issuing tokens for this client ID');
    const credentials = stack.credentials();
    expect(credentials).toContain(first);
    const text = output.text();
    expect(credentials.filter((value) => text.includes(value))).toEqual([]);
  }, 30_000);
});
