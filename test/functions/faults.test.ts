/**
 * AWS faults against the whole handler: DynamoDB stopped under a running container, KMS and
 * Secrets Manager failing. Every caller gets an answer (a token while one is valid in memory,
 * else a clear 503 or 500), and no credential reaches the logs on any of these paths.
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { httpEvent, httpResponse, type LambdaHandler } from '../../local/lambda-events.js';
import { invokeHandler } from '../../local/lambda-invoke.js';
import { applyEnv, type Stack, startStack } from '../../local/stack.js';
import { captureOutput, newContainer } from '../support/lambda.js';

let stack: Stack;
let output: ReturnType<typeof captureOutput>;

const get = async (handler: LambdaHandler, connection = 'sandbox') => {
  const response = httpResponse(
    await invokeHandler(handler, httpEvent({ method: 'GET', url: `/tokens/${connection}` })),
  );
  return { ...response, json: JSON.parse(response.body) };
};

beforeAll(async () => {
  stack = await startStack({}, ['sandbox', 'legacy'], { encrypt: true });
  applyEnv({ ...stack.env, POWERTOOLS_LOG_LEVEL: 'DEBUG', BROKER_MEMORY_RECHECK_SECONDS: '0' });
  output = captureOutput();
});
afterEach(() => {
  stack.secrets.clearFailures();
  stack.kms.clearFailures();
});
afterAll(async () => {
  output.stop();
  await stack.close();
});

describe('Faults: Secrets Manager', () => {
  it('answers 500 without internals when the secret cannot be read, and logs which and why', async () => {
    stack.secrets.failNext(10, 'InternalServiceError', 500);
    const response = await get(newContainer(), 'legacy');
    expect(response.status).toBe(500);
    expect(response.json.error.code).toBe('INTERNAL_ERROR');
    expect(output.text()).toContain("Secret 'open-api/legacy' could not be read");
  });
});

describe('Faults: a client secret rotated at the provider', () => {
  it('re-reads the secret bypassing the cache after the rejection, and issues with the new one', async () => {
    const container = newContainer();
    const first = await get(container, 'legacy'); // the old secret is now cached in this container
    expect(first.status).toBe(200);
    const rotated = {
      clientId: stack.legacyClient.clientId,
      clientSecret: 'rotated-secret-value-123',
    };
    stack.simulator.rotateSecret(rotated.clientId, rotated.clientSecret);
    stack.secrets.setSecret('open-api/legacy', JSON.stringify(rotated));
    await invokeHandler(container, {
      action: 'invalidate',
      connection: 'legacy',
      accessToken: first.json.accessToken,
    });
    const next = await get(container, 'legacy');
    expect(next.status).toBe(200);
    expect(stack.simulator.isValid(next.json.accessToken)).toBe(true);
    expect(output.text()).toContain(
      'Credentials rejected; the secret changed, retrying once with the new one',
    );
    expect(output.text()).not.toContain(rotated.clientSecret);
  });
});

describe('Faults: KMS', () => {
  it('reports KMS failing on a cold read as a 503, not as a missing token (no needless re-issue)', async () => {
    await get(newContainer()); // a token now sits encrypted in the table
    const issued = stack.simulator.stats().issuances;
    stack.kms.failNext(10, 'KMSInternalException');
    const response = await get(newContainer());
    expect(response.status).toBe(503);
    expect(response.json.error.code).toBe('STORE_UNAVAILABLE');
    expect(response.headers['retry-after']).toBe('1');
    expect(stack.simulator.stats().issuances).toBe(issued);
  });
});

describe('Faults: DynamoDB stopped', () => {
  it('keeps serving a warm container from memory, and answers a cold one with 503 before its deadline', async () => {
    const warm = newContainer();
    const before = await get(warm);
    expect(before.status).toBe(200);
    await stack.dynamodb.close();
    const during = await get(warm);
    expect(during.status).toBe(200);
    expect(during.json.accessToken).toBe(before.json.accessToken);
    const cold = await get(newContainer());
    expect(cold.status).toBe(503);
    expect(cold.json.error.code).toBe('STORE_UNAVAILABLE');
  });
});

describe('Faults: logs', () => {
  it('hold no credential on any fault path', () => {
    const logs = output.text();
    const secrets = stack.credentials();
    expect(secrets.length).toBeGreaterThanOrEqual(10);
    expect(secrets.filter((value) => logs.includes(value))).toEqual([]);
  });
});
