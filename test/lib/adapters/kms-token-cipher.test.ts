import { DynamoDBClient, GetItemCommand, PutItemCommand } from '@aws-sdk/client-dynamodb';
import { KMSClient } from '@aws-sdk/client-kms';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoDBTokenStore, tokenKey } from '../../../lib/adapters/dynamodb-token-store.js';
import { KmsTokenCipher } from '../../../lib/adapters/kms-token-cipher.js';
import { tokenDigest } from '../../../lib/broker/index.js';
import { applyEnv, type Stack, startStack } from '../../../local/stack.js';

const TOKEN = 'at_secret-token-value-0123456789';

describe('Class: KmsTokenCipher (loopback KMS, real SDK client)', () => {
  let stack: Stack;
  let kms: KMSClient;
  let dynamodb: DynamoDBClient;
  const cipher = () => new KmsTokenCipher(kms, stack.kms.keyArn);

  beforeAll(async () => {
    stack = await startStack({}, ['sandbox'], { encrypt: true });
    applyEnv(stack.env);
    // No endpoints given: AWS_ENDPOINT_URL_KMS / _DYNAMODB redirect the clients.
    kms = new KMSClient({ maxAttempts: 1 });
    dynamodb = new DynamoDBClient({});
  });
  afterAll(async () => {
    kms.destroy();
    dynamodb.destroy();
    await stack.close();
  });

  it('seals and opens a token; the ciphertext does not contain it; one data key serves many writes', async () => {
    const before = stack.kms.calls().GenerateDataKey ?? 0;
    const container = cipher();
    const sealed = await container.seal('sandbox', TOKEN);
    await container.seal('sandbox', `${TOKEN}-2`);
    expect(Buffer.from(sealed.ciphertext).includes(Buffer.from(TOKEN))).toBe(false);
    expect(await container.open('sandbox', sealed)).toBe(TOKEN);
    expect((stack.kms.calls().GenerateDataKey ?? 0) - before).toBe(1);
  });

  it('retires its data key after an hour on the monotonic clock, whatever the wall clock says', async () => {
    // An hour and a second pass; the wall clock, stepped back 5 s meanwhile, says 3,596 s.
    let wall = Date.now();
    let monotonic = 0;
    const clock = { now: () => wall, monotonic: () => monotonic };
    const container = new KmsTokenCipher(kms, stack.kms.keyArn, clock);
    const before = stack.kms.calls().GenerateDataKey ?? 0;
    const first = await container.seal('sandbox', TOKEN);
    wall += 3_601_000 - 5_000;
    monotonic += 3_601_000;
    const second = await container.seal('sandbox', TOKEN);
    // Before: judged on the wall clock, the key was 3,596 s old and kept 4 s past its hour.
    expect((stack.kms.calls().GenerateDataKey ?? 0) - before).toBe(2);
    expect(Buffer.from(second.encryptedKey)).not.toEqual(Buffer.from(first.encryptedKey));
  });

  it('binds the token to its connection: it does not open under another name', async () => {
    const sealed = await cipher().seal('sandbox', TOKEN);
    expect(await cipher().open('production', sealed)).toBeUndefined();
  });

  it('refuses a tampered ciphertext or data key', async () => {
    const container = cipher();
    const sealed = await container.seal('sandbox', TOKEN);
    const flipped = Buffer.from(sealed.ciphertext);
    flipped[20] = (flipped[20] ?? 0) ^ 1;
    expect(await container.open('sandbox', { ...sealed, ciphertext: flipped })).toBeUndefined();
    const forgedKey = Buffer.from(sealed.encryptedKey);
    forgedKey[5] = (forgedKey[5] ?? 0) ^ 1;
    expect(await container.open('sandbox', { ...sealed, encryptedKey: forgedKey })).toBeUndefined();
  });

  it('lets another container read with one Decrypt, then from its cache', async () => {
    const sealed = await cipher().seal('sandbox', TOKEN);
    const other = cipher();
    const before = stack.kms.calls().Decrypt ?? 0;
    expect(await other.open('sandbox', sealed)).toBe(TOKEN);
    expect(await other.open('sandbox', sealed)).toBe(TOKEN);
    expect((stack.kms.calls().Decrypt ?? 0) - before).toBe(1);
  });

  it('raises a KMS outage instead of treating the token as absent', async () => {
    const sealed = await cipher().seal('sandbox', TOKEN);
    stack.kms.failNext(1, 'KMSInternalException');
    await expect(cipher().open('sandbox', sealed)).rejects.toMatchObject({
      name: 'KMSInternalException',
    });
  });

  it('leaves a table reader nothing usable, and an item moved to another connection unreadable', async () => {
    const store = new DynamoDBTokenStore(dynamodb, stack.tableName, cipher());
    const now = Date.now();
    const record = {
      connection: 'sandbox',
      accessToken: TOKEN,
      tokenDigest: tokenDigest(TOKEN),
      issuedAt: now,
      expiresAt: now + 3_600_000,
    };
    await store.acquireLease('sandbox', {
      holder: 'a:1',
      version: 'v-a:1',
      leaseExpiresAt: now + 10_000,
      durationMs: 10_000,
      countdown: 0,
      replacesDigest: undefined,
    });
    expect(await store.putToken(record, { holder: 'a:1', version: 'v-a:1' })).toBe(true);
    expect((await store.read('sandbox')).token).toEqual(record);

    const { Item } = await dynamodb.send(
      new GetItemCommand({
        TableName: stack.tableName,
        Key: tokenKey('sandbox'),
        ConsistentRead: true,
      }),
    );
    expect(Item?.accessToken).toBeUndefined();
    expect(Item?.tokenCiphertext?.B).toBeDefined();
    expect(JSON.stringify(Item)).not.toContain(TOKEN);
    expect(Buffer.from(Item?.tokenCiphertext?.B ?? []).includes(Buffer.from(TOKEN))).toBe(false);

    await dynamodb.send(
      new PutItemCommand({
        TableName: stack.tableName,
        Item: { ...Item, ...tokenKey('production'), connection: { S: 'production' } },
      }),
    );
    expect((await store.read('production')).token).toBeUndefined();
    // Copied whole, naming its own connection still: not read as another connection's token.
    await dynamodb.send(
      new PutItemCommand({ TableName: stack.tableName, Item: { ...Item, ...tokenKey('staging') } }),
    );
    expect((await store.read('staging')).token).toBeUndefined();
  });
});
