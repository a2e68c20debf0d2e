/**
 * dynalite closed while requests are still in it. dynalite throws from a request's callbacks in
 * two cases, and a throw there ends the whole process (the chaos run in CI died of the first):
 * - the database closed between two reads of one request (`Database is closed`);
 * - the client gone before the request's body arrived (`aborted`).
 * `close()` has to let the requests it took finish, and a client that goes must end only its
 * own request. Vitest fails the run on an uncaught exception, so these tests fail without that.
 */

import { connect, type Socket } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { DescribeTableCommand } from '@aws-sdk/client-dynamodb';
import { describe, expect, it } from 'vitest';
import {
  ensureTable,
  type LocalDynamoDB,
  localDynamoDBClient,
  startDynalite,
} from '../local/dynamodb-local.js';

const BODY = JSON.stringify({ TableName: 'tokens', Key: { pk: { S: 'k' } } });

/** A GetItem written on a raw socket, whole or cut after 10 bytes of its body. */
const getItemOnSocket = (dynamodb: LocalDynamoDB, { partial }: { partial: boolean }) => {
  const socket = connect(Number(new URL(dynamodb.url).port), '127.0.0.1');
  const answer = new Promise<string>((resolve) => {
    let text = '';
    socket.on('data', (chunk: Buffer) => {
      text += chunk.toString();
    });
    socket.on('close', () => resolve(text));
    socket.on('error', () => resolve(text));
  });
  socket.write(
    [
      'POST / HTTP/1.1',
      'Host: 127.0.0.1',
      'Content-Type: application/x-amz-json-1.0',
      'X-Amz-Target: DynamoDB_20120810.GetItem',
      'X-Amz-Date: 20260101T000000Z',
      'Authorization: AWS4-HMAC-SHA256 Credential=local/20260101/us-east-1/dynamodb/aws4_request, SignedHeaders=host, Signature=00',
      `Content-Length: ${BODY.length}`,
      'Connection: close',
      '',
      partial ? BODY.slice(0, 10) : BODY,
    ].join('\r\n'),
  );
  return { socket, answer };
};

const withTable = async () => {
  const dynamodb = await startDynalite();
  const client = localDynamoDBClient(dynamodb.url);
  await ensureTable(client, 'tokens');
  // dynalite answers ResourceNotFound until the table it is creating turns ACTIVE.
  while (
    (await client.send(new DescribeTableCommand({ TableName: 'tokens' }))).Table?.TableStatus !==
    'ACTIVE'
  ) {
    await sleep(5);
  }
  client.destroy();
  return dynamodb;
};

/** Resolves after `n` turns of the event loop's check phase. */
const turns = (n: number) =>
  new Promise<void>((resolve) => {
    const next = (left: number) => (left === 0 ? resolve() : setImmediate(next, left - 1));
    next(n);
  });

describe('Local DynamoDB (dynalite): close()', () => {
  it('lets a request it has taken finish, whichever turn of the event loop close() comes in', async () => {
    // The request's two reads (table, then item) are a few turns apart: closing at each turn
    // from 0 to 39 lands between them in some of the rounds.
    let answered = 0;
    for (let turn = 0; turn < 40; turn += 1) {
      const dynamodb = await withTable();
      const { socket, answer } = getItemOnSocket(dynamodb, { partial: false });
      await new Promise((resolve) => socket.once('connect', resolve));
      await turns(turn);
      await dynamodb.close();
      const text = await answer;
      socket.destroy();
      // Answered in full, or cut off before dynalite took it: never a half-served request.
      if (text === '') continue;
      answered += 1;
      expect(text.startsWith('HTTP/1.1 200'), text.slice(0, 300)).toBe(true);
      const [head = '', body = ''] = text.split('\r\n\r\n');
      const length = Number(/content-length: (\d+)/i.exec(head)?.[1]);
      expect(Buffer.byteLength(body), head).toBe(length);
    }
    // Some rounds closed after the answer: an empty answer in every round would test nothing.
    expect(answered).toBeGreaterThan(0);
    // An uncaught throw from a late callback would surface in the turns after close().
    await sleep(100);
  });

  it('ends only its own request when a client goes before its body has arrived', async () => {
    const dynamodb = await withTable();
    const cut: Socket = getItemOnSocket(dynamodb, { partial: true }).socket;
    await sleep(50);
    cut.destroy();
    await sleep(50);
    // The server still answers others.
    const { answer } = getItemOnSocket(dynamodb, { partial: false });
    expect(await answer).toMatch(/^HTTP\/1\.1 200/);
    await dynamodb.close();
  });
});
