/** DynamoDB for local runs and tests: dynalite in this process, plus the broker's table. */

import type { IncomingMessage, ServerResponse } from 'node:http';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  CreateTableCommand,
  DynamoDBClient,
  ResourceInUseException,
} from '@aws-sdk/client-dynamodb';
import dynalite from 'dynalite';
import { listen } from './loopback.js';

export interface LocalDynamoDB {
  readonly url: string;
  /** HTTP requests served so far (one per DynamoDB API call). */
  requests(): number;
  /** Of those, the reads (GetItem, BatchGetItem, Query, Scan). */
  reads(): number;
  /**
   * The GetItem reads so far by the item's key (`pk`): the hot key is one item's load
   * (DynamoDB serves 3,000 strongly consistent reads per second per item), so a table whose
   * readers spread over several items is judged by its busiest.
   */
  readsByItem(): ReadonlyMap<string, number>;
  close(): Promise<void>;
}

const READS = new Set(['GetItem', 'BatchGetItem', 'Query', 'Scan']);

/**
 * Whether a DynamoDB request, by its `x-amz-target` header (`DynamoDB_20120810.GetItem`), is a
 * read: how dynalite here and the counting proxy in front of DynamoDB Local count alike.
 */
export const isRead = (target: string | string[] | undefined): boolean =>
  READS.has(String(target ?? '').split('.')[1] ?? '');

/** The `pk` a GetItem request's JSON body names, if it is one. */
export const getItemKey = (target: unknown, body: string): string | undefined => {
  if (String(target ?? '').split('.')[1] !== 'GetItem') return undefined;
  try {
    const key = (JSON.parse(body) as { Key?: { pk?: { S?: unknown } } }).Key?.pk?.S;
    return typeof key === 'string' ? key : undefined;
  } catch {
    return undefined;
  }
};

/** Counts GetItem reads by item, for {@link LocalDynamoDB.readsByItem}. */
export const itemReadCounter = () => {
  const byItem = new Map<string, number>();
  return {
    count(target: unknown, body: string): void {
      const key = getItemKey(target, body);
      if (key !== undefined) byItem.set(key, (byItem.get(key) ?? 0) + 1);
    },
    readsByItem: (): ReadonlyMap<string, number> => new Map(byItem),
  };
};

/** How long `close()` lets the requests dynalite has taken finish before it cuts them off. */
const DRAIN_MS = 2_000;

export const startDynalite = async ({
  host = '127.0.0.1',
  port = 0,
} = {}): Promise<LocalDynamoDB> => {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  let requests = 0;
  let reads = 0;
  const items = itemReadCounter();
  // Requests whose handler is still running. dynalite goes on with a request after its client
  // has gone, and throws from a database callback if the database was closed under it, which
  // ends the whole process (a chaos run closes it right after cutting its containers off).
  const running = new Set<ServerResponse>();
  server.on('request', (request: IncomingMessage, response: ServerResponse) => {
    requests += 1;
    const target = request.headers['x-amz-target'];
    if (isRead(target)) {
      reads += 1;
      // A second reader of the body (dynalite reads it too): both get every chunk.
      const chunks: Buffer[] = [];
      request.on('data', (chunk: Buffer) => chunks.push(chunk));
      request.on('end', () => items.count(target, Buffer.concat(chunks).toString('utf8')));
    }
    running.add(response);
    // dynalite also throws when a client goes before its body has arrived ("aborted"): that
    // request is over, and its handler never runs.
    request.removeAllListeners('error');
    request.on('error', () => {
      running.delete(response);
      response.destroy();
    });
    response.once('finish', () => running.delete(response));
  });
  const bound = await listen(server, { host, port });
  const busy = () => {
    for (const response of running) if (response.writableEnded) running.delete(response);
    return running.size > 0;
  };
  const close = async () => {
    const until = Date.now() + DRAIN_MS;
    while (busy() && Date.now() < until) await sleep(5);
    await bound.close();
  };
  return {
    url: bound.url,
    requests: () => requests,
    reads: () => reads,
    readsByItem: items.readsByItem,
    close,
  };
};

/** Creates the broker's table as infra/ declares it (key `pk`), if it does not exist. */
export const ensureTable = async (client: DynamoDBClient, tableName: string): Promise<void> => {
  try {
    await client.send(
      new CreateTableCommand({
        TableName: tableName,
        AttributeDefinitions: [{ AttributeName: 'pk', AttributeType: 'S' }],
        KeySchema: [{ AttributeName: 'pk', KeyType: 'HASH' }],
        BillingMode: 'PAY_PER_REQUEST',
      }),
    );
  } catch (error) {
    if (!(error instanceof ResourceInUseException)) throw error;
  }
};

/** A client for a local endpoint, with the dummy credentials local endpoints accept. */
export const localDynamoDBClient = (endpoint: string) =>
  new DynamoDBClient({
    endpoint,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
