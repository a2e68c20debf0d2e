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
    now,
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

  it('reads nothing for a connection that never had a token', async () => {
    expect(await store.read('nothing-here')).toEqual({ token: undefined, lease: undefined });
  });

  it('writes the token under the lease: pk, ttl = issuance + expiresIn, no secret, lease released', async () => {
    expect(await store.acquireLease('roundtrip', lease('a:1'))).toEqual({ acquired: true });
    expect((await store.read('roundtrip')).lease).toEqual({
      holder: 'a:1',
      expiresAt: now + 10_000,
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

  it('grants the lease to one holder at a time, however many race for it', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => store.acquireLease('race', lease(`c${i}:1`))),
    );
    expect(results.filter((r) => r.acquired)).toHaveLength(1);
  });

  it('lets a lease be taken over once it has expired', async () => {
    await store.acquireLease('takeover', lease('dead:1', now - 1));
    expect(await store.acquireLease('takeover', lease('alive:1'))).toEqual({ acquired: true });
    expect((await store.read('takeover')).lease?.holder).toBe('alive:1');
  });

  it('refuses the lease when the stored token already outlives the need', async () => {
    await store.acquireLease('fresh', lease('a:1'));
    await store.putToken(record('fresh-token', now + 3_600_000, 'fresh'), 'a:1');
    const attempt = await store.acquireLease('fresh', lease('b:1', now + 10_000, now + 60_000));
    expect(attempt.acquired).toBe(false);
    // Inside its last minute, the same token may be replaced.
    expect(await store.acquireLease('fresh', lease('b:2', now + 10_000, now + 3_600_001))).toEqual({
      acquired: true,
    });
  });

  it('refuses a write from a holder whose lease was taken over', async () => {
    await store.acquireLease('overrun', lease('slow:1', now - 1));
    await store.acquireLease('overrun', lease('fast:1'));
    expect(await store.putToken(record('late', now + 3_600_000, 'overrun'), 'slow:1')).toBe(false);
    expect(await store.putToken(record('current', now + 3_600_000, 'overrun'), 'fast:1')).toBe(
      true,
    );
    expect((await store.read('overrun')).token?.accessToken).toBe('current');
  });

  it('renews a lease only for its holder', async () => {
    await store.acquireLease('renew', lease('a:1'));
    expect(await store.renewLease('renew', 'b:1', now + 99_000)).toBe(false);
    expect(await store.renewLease('renew', 'a:1', now + 20_000)).toBe(true);
    expect((await store.read('renew')).lease).toEqual({ holder: 'a:1', expiresAt: now + 20_000 });
  });

  it('releases a lease only for its holder', async () => {
    await store.acquireLease('release', lease('a:1'));
    await store.releaseLease('release', 'b:1');
    expect((await store.read('release')).lease?.holder).toBe('a:1');
    await store.releaseLease('release', 'a:1');
    expect((await store.read('release')).lease).toBeUndefined();
  });

  it('deletes the token only when the digest matches, and leaves a lease in progress alone', async () => {
    await store.acquireLease('cad', lease('a:1'));
    await store.putToken(record('current', now + 3_600_000, 'cad'), 'a:1');
    expect(await store.deleteIfMatches('cad', tokenDigest('older'))).toBe(false);
    expect((await store.read('cad')).token?.accessToken).toBe('current');
    await store.acquireLease('cad', lease('b:1', now + 10_000, now + 3_600_001));
    expect(await store.deleteIfMatches('cad', tokenDigest('current'))).toBe(true);
    expect(await store.read('cad')).toEqual({
      token: undefined,
      lease: { holder: 'b:1', expiresAt: now + 10_000 },
    });
    expect(await store.deleteIfMatches('cad', tokenDigest('current'))).toBe(false);
  });

  it('surfaces an unreachable table as an error for the broker to translate', async () => {
    const broken = new DynamoDBTokenStore(client, 'no-such-table');
    await expect(broken.read('sandbox')).rejects.toThrow();
  });
});
