/**
 * The hot-key bench counts the token item's reads on dynalite (its own counter) and on AWS's
 * DynamoDB Local (a counting proxy in front of it, bench/counted-dynamodb.ts). The two counts
 * must mean the same: every read operation counted once, nothing else counted as a read, each
 * stack's proxy counting its own requests only.
 */
import {
  ConditionalCheckFailedException,
  GetItemCommand,
  PutItemCommand,
  QueryCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { afterAll, describe, expect, it } from 'vitest';
import { sharedDynamoDBLocal } from '../bench/counted-dynamodb.js';
import {
  ensureTable,
  isRead,
  type LocalDynamoDB,
  localDynamoDBClient,
  startDynalite,
} from '../local/dynamodb-local.js';

const TABLE = 'tokens';
const key = { pk: { S: 'token#sandbox' } };

/**
 * CreateTable, PutItem, GetItem twice, a conditional UpdateItem that fails, a Query: 3 reads of
 * 6 requests. Returns what the failed write sent back (DynamoDB returns the item; dynalite not).
 */
const traffic = async (dynamodb: LocalDynamoDB) => {
  const client = localDynamoDBClient(dynamodb.url);
  try {
    await ensureTable(client, TABLE);
    await client.send(new PutItemCommand({ TableName: TABLE, Item: { ...key, v: { N: '1' } } }));
    await client.send(new GetItemCommand({ TableName: TABLE, Key: key, ConsistentRead: true }));
    await client.send(new GetItemCommand({ TableName: TABLE, Key: key }));
    const failed = await client
      .send(
        new UpdateItemCommand({
          TableName: TABLE,
          Key: key,
          UpdateExpression: 'SET v = :two',
          ConditionExpression: 'attribute_not_exists(pk)',
          ExpressionAttributeValues: { ':two': { N: '2' } },
          ReturnValuesOnConditionCheckFailure: 'ALL_OLD',
        }),
      )
      .then(
        () => undefined,
        (error: unknown) => error,
      );
    expect(failed).toBeInstanceOf(ConditionalCheckFailedException);
    await client.send(
      new QueryCommand({
        TableName: TABLE,
        KeyConditionExpression: 'pk = :pk',
        ExpressionAttributeValues: { ':pk': key.pk },
      }),
    );
    return (failed as ConditionalCheckFailedException).Item;
  } finally {
    client.destroy();
  }
};

describe('isRead', () => {
  it('is GetItem, BatchGetItem, Query and Scan, by the x-amz-target operation', () => {
    for (const read of ['GetItem', 'BatchGetItem', 'Query', 'Scan']) {
      expect(isRead(`DynamoDB_20120810.${read}`)).toBe(true);
    }
    for (const other of ['PutItem', 'UpdateItem', 'DeleteItem', 'CreateTable', 'ListTables']) {
      expect(isRead(`DynamoDB_20120810.${other}`)).toBe(false);
    }
    expect(isRead(undefined)).toBe(false);
    expect(isRead('GetItem')).toBe(false);
  });
});

describe('Counting the item’s reads: dynalite and DynamoDB Local behind the bench’s proxy', () => {
  const local = sharedDynamoDBLocal();
  afterAll(() => local.close());

  it('counts the same reads and requests on both; only DynamoDB Local returns the item on a failed condition', async () => {
    const dynalite = await startDynalite();
    const counted = await local.endpoint();
    try {
      const [onDynalite, onLocal] = [await traffic(dynalite), await traffic(counted)];
      expect([dynalite.reads(), dynalite.requests()]).toEqual([3, 6]);
      expect([counted.reads(), counted.requests()]).toEqual([3, 6]);
      // The hot key is one item's reads: both count the GetItems by the item's key.
      expect(Object.fromEntries(dynalite.readsByItem())).toEqual({ 'token#sandbox': 2 });
      expect(Object.fromEntries(counted.readsByItem())).toEqual({ 'token#sandbox': 2 });
      // Why the bench runs on both: on dynalite the adapter reads what the failed write lost to.
      expect(onDynalite).toBeUndefined();
      expect(onLocal).toMatchObject({ v: { N: '1' } });
    } finally {
      await Promise.all([dynalite.close(), counted.close()]);
    }
  });

  it('gives each stack a proxy of its own on the one DynamoDB Local, counting its own requests', async () => {
    const [first, second] = [await local.endpoint(), await local.endpoint()];
    try {
      expect(first.url).not.toBe(second.url);
      const client = localDynamoDBClient(second.url);
      await client.send(new GetItemCommand({ TableName: TABLE, Key: key }));
      client.destroy();
      expect([first.reads(), first.requests()]).toEqual([0, 0]);
      expect([second.reads(), second.requests()]).toEqual([1, 1]);
      // Closing a stack's endpoint leaves DynamoDB Local serving the others.
      await first.close();
      const again = localDynamoDBClient(second.url);
      await again.send(new GetItemCommand({ TableName: TABLE, Key: key }));
      again.destroy();
      expect(second.reads()).toBe(2);
    } finally {
      await Promise.all([first.close(), second.close()]);
    }
  });
});
