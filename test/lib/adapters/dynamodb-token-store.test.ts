import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoDBTokenStore, tokenKey } from '../../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../../lib/broker.js';
import type { TokenRecord } from '../../../lib/ports.js';
import { applyEnv, type Stack, startStack } from '../../support/stack.js';

const record = (accessToken: string, expiresAt: number, connection = 'sandbox'): TokenRecord => ({
  connection,
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - 86_400_000,
  expiresAt,
});

describe('Class: DynamoDBTokenStore (dynalite)', () => {
  let stack: Stack;
  let client: DynamoDBClient;
  let store: DynamoDBTokenStore;

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

  it('round-trips a record and writes pk, ttl = issuance + expiresIn, and no secret', async () => {
    const issuedAt = 1_795_262_400_123;
    const stored = { ...record('tok-a', issuedAt + 86_400_000), issuedAt };
    await store.put(stored);
    expect(await store.get('sandbox')).toEqual(stored);
    const { Item } = await client.send(
      new GetItemCommand({
        TableName: stack.tableName,
        Key: tokenKey('sandbox'),
        ConsistentRead: true,
      }),
    );
    expect(Item?.pk).toEqual({ S: 'token#sandbox' });
    expect(Item?.ttl).toEqual({ N: String(Math.floor(issuedAt / 1000) + 86_400) });
    expect(Object.keys(Item ?? {}).sort()).toEqual(
      ['accessToken', 'connection', 'expiresAt', 'issuedAt', 'pk', 'tokenDigest', 'ttl'].sort(),
    );
  });

  it('returns undefined for a connection without a token', async () => {
    expect(await store.get('nothing-here')).toBeUndefined();
  });

  it('keeps the longer-lived token when a shorter-lived one is written after it', async () => {
    const longer = record('long', Date.now() + 7_200_000, 'race');
    const shorter = record('short', Date.now() + 3_600_000, 'race');
    expect(await store.put(longer)).toEqual(longer);
    expect(await store.put(shorter)).toEqual(longer);
    expect((await store.get('race'))?.accessToken).toBe('long');
    const newest = record('newest', Date.now() + 9_000_000, 'race');
    expect(await store.put(newest)).toEqual(newest);
  });

  it('deletes only when the digest matches', async () => {
    await store.put(record('current', Date.now() + 3_600_000, 'cad'));
    expect(await store.deleteIfMatches('cad', tokenDigest('older'))).toBe(false);
    expect((await store.get('cad'))?.accessToken).toBe('current');
    expect(await store.deleteIfMatches('cad', tokenDigest('current'))).toBe(true);
    expect(await store.get('cad')).toBeUndefined();
    expect(await store.deleteIfMatches('cad', tokenDigest('current'))).toBe(false);
  });

  it('surfaces an unreachable table as an error for the broker to translate', async () => {
    const broken = new DynamoDBTokenStore(client, 'no-such-table');
    await expect(broken.get('sandbox')).rejects.toThrow();
  });
});
