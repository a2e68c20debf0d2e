/**
 * The AWS clients' limits, against a loopback endpoint that accepts connections and reads
 * requests but never answers (a stalled link): every call must fail, not hang.
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundedClientConfig } from '../../../lib/adapters/aws.js';

let server: Server;
let endpoint: string;
let received = 0;

beforeAll(async () => {
  server = createServer((request) => {
    received += 1;
    request.resume(); // read it, answer nothing
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  endpoint = `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
});

afterAll(async () => {
  server.closeAllConnections();
  await new Promise<void>((resolve) => server.close(() => resolve()));
});

describe('Function: boundedClientConfig', () => {
  it('makes a call on a stalled connection fail after its attempts, instead of waiting for ever', async () => {
    const client = new DynamoDBClient({
      ...boundedClientConfig(300),
      endpoint,
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    });
    const before = received;
    const error = await client
      .send(new GetItemCommand({ TableName: 't', Key: { pk: { S: 'k' } } }))
      .then(
        () => undefined,
        (e: unknown) => e as Error,
      );
    client.destroy();
    expect(error?.name).toBe('TimeoutError');
    // Two attempts, each cut at its limit (the server, in this process, may read the second
    // only after the client gave up on it, on a loaded machine).
    await expect.poll(() => received - before).toBe(2);
  });
});
