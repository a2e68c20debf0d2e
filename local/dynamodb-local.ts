/** DynamoDB for local runs and tests: dynalite in this process, plus the broker's table. */
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
  close(): Promise<void>;
}

const READS = new Set(['GetItem', 'BatchGetItem', 'Query', 'Scan']);

export const startDynalite = async ({
  host = '127.0.0.1',
  port = 0,
} = {}): Promise<LocalDynamoDB> => {
  const server = dynalite({ createTableMs: 0, deleteTableMs: 0, updateTableMs: 0 });
  let requests = 0;
  let reads = 0;
  server.on('request', (request: { headers: Record<string, string | string[] | undefined> }) => {
    requests += 1;
    const operation = String(request.headers['x-amz-target'] ?? '').split('.')[1] ?? '';
    if (READS.has(operation)) reads += 1;
  });
  const { url, close } = await listen(server, { host, port });
  return { url, requests: () => requests, reads: () => reads, close };
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
