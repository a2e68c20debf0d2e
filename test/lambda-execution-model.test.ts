/**
 * The broker's bundle in Lambda's execution model (issue 17): execution environments of
 * local/lambda-env/ frozen as soon as they have answered and every extension is done, against
 * the local stack. What is checked here is what the broker's internal extension
 * (functions/broker/after-response.ts) changes: a refresh started by a request completes
 * although that environment is never invoked again; without the extension it does not; and an
 * environment shut down mid-countdown releases its lease. Waits are bounded loops; nothing
 * asserts speed.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DeleteItemCommand, type DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, afterEach, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { DynamoDBTokenStore, tokenKey } from '../lib/adapters/dynamodb-token-store.js';
import { localDynamoDBClient } from '../local/dynamodb-local.js';
import { EnvironmentPool } from '../local/lambda-env/pool.js';
import { type Stack, startStack } from '../local/stack.js';
import { type Build, sharedBuild } from './support/build.js';

/** 8 s tokens, a 4 s window, a 1 s re-check: a refresh's countdown is 5 steps (1.25 s). */
const LIFETIME_S = 8;

let build: Build;
let stack: Stack;
let store: DynamoDBTokenStore;
let client: DynamoDBClient;
beforeAll(async () => {
  build = sharedBuild();
  stack = await startStack({ expiresIn: LIFETIME_S }, ['sandbox']);
  client = localDynamoDBClient(stack.dynamodb.url);
  store = new DynamoDBTokenStore(client, stack.tableName);
}, 120_000);
afterAll(async () => {
  client?.destroy();
  await stack?.close();
});
// Each test starts from an empty item: its first request issues the first token.
beforeEach(async () => {
  await client.send(
    new DeleteItemCommand({ TableName: stack.tableName, Key: tokenKey('sandbox') }),
  );
});

const pools: EnvironmentPool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((pool) => pool.close()));
});

const poolWith = (env: Record<string, string> = {}) => {
  const pool = new EnvironmentPool({
    bundle: build.bundle,
    bootstrap: build.bootstrap,
    env: {
      ...stack.env,
      BROKER_REFRESH_WINDOW_SECONDS: '4',
      BROKER_MEMORY_RECHECK_SECONDS: '1',
      BROKER_DEFAULT_MIN_VALIDITY_SECONDS: '1',
      POWERTOOLS_LOG_LEVEL: 'WARN',
      POWERTOOLS_METRICS_DISABLED: 'true',
      ...env,
    },
    maxEnvironments: 1,
    timeoutMs: 6_000,
  });
  pools.push(pool);
  return pool;
};

const getToken = { action: 'getToken', connection: 'sandbox' };
const issued = () => stack.simulator.issuanceTimes().length;

/** Issues a first token, then asks again once it is due for refresh (in its window). */
const dueAndAsked = async (pool: EnvironmentPool) => {
  const before = issued();
  const first = await pool.invoke(getToken);
  expect(first.outcome.ok).toBe(true);
  expect(issued()).toBe(before + 1);
  const issuedAt = stack.simulator.issuanceTimes().at(-1) ?? Date.now();
  // Due from 4.75 s (the window's middle less the countdown); asked at 5.3 s.
  await sleep(Math.max(0, issuedAt + 5_300 - Date.now()));
  const second = await pool.invoke(getToken);
  expect(second.outcome.ok).toBe(true);
  return { before, second };
};

/** Polls `check` every 100 ms, up to `ms`. */
const within = async (ms: number, check: () => boolean | Promise<boolean>) => {
  for (let waited = 0; waited < ms; waited += 100) {
    if (await check()) return true;
    await sleep(100);
  }
  return check();
};

describe('Lambda execution model: work after the response', () => {
  it('completes a refresh started by a request although its environment is not invoked again', async () => {
    const pool = poolWith();
    const { before } = await dueAndAsked(pool);
    // No invocation from here on: the extension keeps the environment thawed until the
    // refresh has written its token, then lets it freeze.
    expect(await within(6_000, () => issued() === before + 2)).toBe(true);
    expect(await within(3_000, () => pool.environments().every((e) => e.state === 'frozen'))).toBe(
      true,
    );
    const { token, lease } = await store.read('sandbox');
    expect(lease).toBeUndefined();
    expect(token?.issuedAt).toBeGreaterThan((stack.simulator.issuanceTimes().at(-2) ?? 0) + 1);
  }, 30_000);

  it('without the extension, the refresh stops where the freeze caught it (the lease counting down)', async () => {
    const pool = poolWith({ BROKER_LAMBDA_EXTENSION: 'off' });
    const { before } = await dueAndAsked(pool);
    expect(await within(3_000, () => pool.environments().every((e) => e.state === 'frozen'))).toBe(
      true,
    );
    await sleep(3_000);
    expect(issued()).toBe(before + 1); // nothing issued while frozen
    expect((await store.read('sandbox')).lease?.countdown).toBeGreaterThan(0);
  }, 30_000);

  it('an environment shut down mid-countdown releases its lease, and sends nothing', async () => {
    const pool = poolWith();
    const { before } = await dueAndAsked(pool);
    expect((await store.read('sandbox')).lease?.countdown).toBeGreaterThan(1);
    await pool.close(); // SIGTERM: the broker gives the lease up and releases it
    const state = await store.read('sandbox');
    expect(state.lease).toBeUndefined();
    expect(state.token).toBeDefined();
    expect(issued()).toBe(before + 1);
  }, 30_000);
});
