import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoDBTokenStore, tokenKey } from '../../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../../lib/broker/index.js';
import type { TokenRecord } from '../../../lib/ports.js';
import { applyEnv, type Stack, startStack } from '../../../local/stack.js';

const record = (accessToken: string, expiresAt: number, connection: string): TokenRecord => ({
  connection,
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - 86_400_000,
  expiresAt,
});

// The port's behaviour (leases, conditional writes, compare-and-delete) is checked on dynalite and
// on DynamoDB Local by test/lib/token-store.contract.test.ts; this file checks the DynamoDB side
// only: the item's shape, its TTL, and how SDK failures surface.
describe('Class: DynamoDBTokenStore (dynalite)', () => {
  let stack: Stack;
  let client: DynamoDBClient;
  let store: DynamoDBTokenStore;
  const now = Date.now();
  const lease = (
    holder: string,
    leaseExpiresAt = now + 10_000,
    replaceIfExpiresBefore = now + 1,
  ) => ({
    holder,
    leaseExpiresAt,
    durationMs: 10_000,
    countdown: 0,
    replaceIfExpiresBefore,
  });
  const rawItem = async (connection: string) =>
    (
      await client.send(
        new GetItemCommand({
          TableName: stack.tableName,
          Key: tokenKey(connection),
          ConsistentRead: true,
        }),
      )
    ).Item;

  beforeAll(async () => {
    stack = await startStack();
    applyEnv(stack.env);
    // No endpoint given: AWS_ENDPOINT_URL_DYNAMODB redirects the client, as in the contract.
    client = new DynamoDBClient({});
    store = new DynamoDBTokenStore(client, stack.tableName);
  });
  afterAll(async () => {
    client.destroy();
    await stack.close();
  });

  it('writes the token under the lease: pk, ttl = issuance + expiresIn, no secret, lease released', async () => {
    expect(await store.acquireLease('roundtrip', lease('a:1'))).toEqual({ acquired: true });
    expect((await store.read('roundtrip')).lease).toEqual({
      holder: 'a:1',
      expiresAt: now + 10_000,
      durationMs: 10_000,
      countdown: 0,
    });
    const issuedAt = 1_795_262_400_123;
    const token = { ...record('tok-a', issuedAt + 86_400_000, 'roundtrip'), issuedAt };
    expect(await store.putToken(token, 'a:1')).toBe(true);
    expect(await store.read('roundtrip')).toEqual({ token, lease: undefined });
    const item = await rawItem('roundtrip');
    expect(item?.pk).toEqual({ S: 'token#roundtrip' });
    expect(item?.ttl).toEqual({ N: String(Math.floor(issuedAt / 1000) + 86_400) });
    expect(Object.keys(item ?? {}).sort()).toEqual(
      ['accessToken', 'connection', 'expiresAt', 'issuedAt', 'pk', 'tokenDigest', 'ttl'].sort(),
    );
  });

  it('surfaces an unreachable table as an error for the broker to translate', async () => {
    const broken = new DynamoDBTokenStore(client, 'no-such-table');
    await expect(broken.read('sandbox')).rejects.toMatchObject({
      name: 'ResourceNotFoundException',
    });
  });
});
