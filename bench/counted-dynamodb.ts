/**
 * AWS's DynamoDB Local, counted as dynalite counts itself (local/dynamodb-local.ts `reads()`):
 * the hot-key bench measures the item's reads on both. DynamoDB Local is a Java process that
 * counts nothing, so each stack reaches it through a loopback proxy of its own (the chaos
 * suite's fault proxy, always passing) that counts the requests it forwards by their
 * `x-amz-target` operation. DynamoDB Local takes seconds to start: one serves every stack of a
 * run, each on a table of its own (local/stack.ts names them apart), and closing a stack
 * closes only its proxy.
 *
 * Why both: dynalite does not return the item on a failed conditional write
 * (`ReturnValuesOnConditionCheckFailure`), so the store adapter reads it, a read DynamoDB does
 * not make; DynamoDB Local returns it, as DynamoDB does.
 */
import { startFaultProxy } from '../chaos/proxy.js';
import {
  type AmazonDynamoDBLocal,
  startAmazonDynamoDBLocal,
} from '../local/amazon-dynamodb-local.js';
import { isRead, itemReadCounter, type LocalDynamoDB } from '../local/dynamodb-local.js';

/** A counting proxy in front of a DynamoDB endpoint: its `reads()` are dynalite's. */
export const countedDynamoDB = async (target: string): Promise<LocalDynamoDB> => {
  let requests = 0;
  let reads = 0;
  const items = itemReadCounter();
  const proxy = await startFaultProxy({
    target,
    label: 'dynamodb',
    hooks: {
      onRequest: ({ headers, body }) => {
        requests += 1;
        if (isRead(headers['x-amz-target'])) {
          reads += 1;
          items.count(headers['x-amz-target'], body.toString('utf8'));
        }
      },
    },
  });
  return {
    url: proxy.url,
    requests: () => requests,
    reads: () => reads,
    readsByItem: items.readsByItem,
    close: () => proxy.close(),
  };
};

/** Where a hot-key run's stacks keep the token item. */
export type StoreKind = 'dynalite' | 'dynamodb-local';

export const STORE_KINDS: readonly StoreKind[] = ['dynalite', 'dynamodb-local'];

export const STORE_NAMES: Readonly<Record<StoreKind, string>> = {
  dynalite: 'dynalite',
  'dynamodb-local': 'DynamoDB Local',
};

/**
 * One DynamoDB Local for a run, started on first use: `endpoint()` gives a stack its counted
 * endpoint, `close()` stops the Java process.
 */
export const sharedDynamoDBLocal = () => {
  let started: Promise<AmazonDynamoDBLocal> | undefined;
  return {
    endpoint: async (): Promise<LocalDynamoDB> => {
      started ??= startAmazonDynamoDBLocal();
      return countedDynamoDB((await started).url);
    },
    close: async () => {
      await started?.then(
        (dynamodb) => dynamodb.close(),
        () => undefined,
      );
    },
  };
};
