/**
 * The local Lambda Invoke API (local/lambda-invoke.ts behind local/lambda-server.ts) as AWS's
 * own clients see it: `@aws-sdk/client-lambda`, and the AWS CLI where it is installed.
 */
import { execFile, execFileSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { promisify } from 'node:util';
import { InvokeCommand, LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DEFAULT_LAMBDA, type LambdaHandler } from '../local/lambda-events.js';
import { type LocalLambdaServer, startLambdaServer } from '../local/lambda-server.js';
import { caught, unexpected } from './support/errors.js';

const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };
let server: LocalLambdaServer;
let lambda: LambdaClient;
const runs: unknown[] = [];

/** Echoes its event, logs one line per call (`say` repeats it), fails on `fail`. */
const handler: LambdaHandler = async (event) => {
  runs.push(event);
  const { say = 'hello', times = 1, fail, waitMs } = (event ?? {}) as Record<string, never>;
  if (waitMs) await sleep(waitMs);
  // As a function's logs reach Lambda: written to stdout (vitest reroutes `console`).
  for (let i = 0; i < times; i += 1) process.stdout.write(`line ${i} ${say}\n`);
  if (fail) throw Object.assign(new Error('it failed'), { name: 'SomethingFailed' });
  return { echo: event };
};

const decoder = new TextDecoder();
const invoke = (
  payload: unknown,
  extra: Partial<ConstructorParameters<typeof InvokeCommand>[0]> = {},
) =>
  lambda.send(
    new InvokeCommand({
      FunctionName: 'token-broker',
      Payload: typeof payload === 'string' ? Buffer.from(payload) : JSON.stringify(payload),
      ...extra,
    }),
  );

beforeAll(async () => {
  server = await startLambdaServer(handler, { settings: { ...DEFAULT_LAMBDA, timeoutMs: 1000 } });
  lambda = new LambdaClient({ endpoint: server.url, region: 'us-east-1', credentials });
});
afterAll(async () => {
  lambda.destroy();
  await server.close();
});

describe('Local Invoke API: @aws-sdk/client-lambda', () => {
  it('answers RequestResponse with 200, the payload and X-Amz-Executed-Version', async () => {
    const response = await invoke({ say: 'hi' });
    expect(response.StatusCode).toBe(200);
    expect(response.ExecutedVersion).toBe('$LATEST');
    expect(response.FunctionError).toBeUndefined();
    expect(JSON.parse(decoder.decode(response.Payload))).toEqual({ echo: { say: 'hi' } });
  });

  it('accepts the name with $LATEST, and the full and partial ARN', async () => {
    for (const name of [
      'token-broker:$LATEST',
      'arn:aws:lambda:us-east-1:000000000000:function:token-broker',
      '000000000000:function:token-broker',
    ]) {
      expect((await invoke({}, { FunctionName: name })).StatusCode).toBe(200);
    }
  });

  it('answers 404 ResourceNotFoundException for another function, version or region, naming its ARN once', async () => {
    const arn = 'arn:aws:lambda:us-east-1:000000000000:function';
    for (const [extra, named] of [
      [{ FunctionName: 'another-function' }, `${arn}:another-function`],
      [{ FunctionName: 'token-broker', Qualifier: '3' }, `${arn}:token-broker:3`],
      // A qualifier in the name is not repeated (it read `…:live:live`).
      [{ FunctionName: 'token-broker:live' }, `${arn}:token-broker:live`],
      [{ FunctionName: '000000000000:function:token-broker:live' }, `${arn}:token-broker:live`],
      [
        { FunctionName: 'arn:aws:lambda:eu-west-1:000000000000:function:token-broker' },
        'arn:aws:lambda:eu-west-1:000000000000:function:token-broker',
      ],
      [{ FunctionName: `${arn}:token-broker`, Qualifier: '3' }, `${arn}:token-broker:3`],
    ] as const) {
      const before = runs.length;
      const error = await invoke({}, extra).then(unexpected, caught);
      expect(error.name).toBe('ResourceNotFoundException');
      expect((error as { $metadata?: { httpStatusCode?: number } }).$metadata?.httpStatusCode).toBe(
        404,
      );
      expect(error.message).toBe(`Function not found: ${named}`);
      expect(runs.length).toBe(before);
    }
  });

  it('reports a failed function with X-Amz-Function-Error and its errorType', async () => {
    const response = await invoke({ fail: true });
    expect(response.StatusCode).toBe(200);
    expect(response.FunctionError).toBe('Unhandled');
    expect(response.ExecutedVersion).toBe('$LATEST');
    expect(JSON.parse(decoder.decode(response.Payload))).toEqual({
      errorType: 'SomethingFailed',
      errorMessage: 'it failed',
    });
  });

  it('DryRun answers 204 and runs nothing; Event answers 202 and runs in the background', async () => {
    const before = runs.length;
    const dry = await invoke({ say: 'dry' }, { InvocationType: 'DryRun' });
    expect(dry.StatusCode).toBe(204);
    await sleep(50);
    expect(runs.length).toBe(before);

    const queued = await invoke({ say: 'event', waitMs: 100 }, { InvocationType: 'Event' });
    expect(queued.StatusCode).toBe(202);
    expect(queued.Payload?.length ?? 0).toBe(0);
    await expect.poll(() => runs.length).toBe(before + 1);
  });

  it('LogType Tail gives the base64 of the last 4 KB of that invocation’s log only', async () => {
    // Two invocations at once: each tail holds its own lines, never the other's.
    const [long, short] = await Promise.all([
      invoke({ say: 'x'.repeat(120), times: 40, waitMs: 20 }, { LogType: 'Tail' }),
      invoke({ say: 'short-one', waitMs: 10 }, { LogType: 'Tail' }),
    ]);
    const shortLog = Buffer.from(String(short.LogResult), 'base64').toString('utf8');
    expect(shortLog).toMatch(/^START RequestId: [0-9a-f-]{36} Version: \$LATEST\n/);
    expect(shortLog).toContain('line 0 short-one\n');
    expect(shortLog).not.toContain('xxx');
    expect(shortLog).toMatch(/END RequestId: [0-9a-f-]{36}\nREPORT RequestId: .*Duration: /);

    const longTail = Buffer.from(String(long.LogResult), 'base64');
    expect(longTail.length).toBe(4096);
    expect(longTail.toString('utf8')).toContain('line 39 xxx');
    expect(longTail.toString('utf8')).not.toContain('short-one');
    expect((await invoke({})).LogResult).toBeUndefined();
  });

  it('answers a payload that is not JSON with 400 InvalidRequestContentException, without running', async () => {
    const before = runs.length;
    const error = await invoke('{"action":').then(unexpected, caught);
    expect(error.name).toBe('InvalidRequestContentException');
    expect(runs.length).toBe(before);
    const raw = await fetch(`${server.url}/2015-03-31/functions/token-broker/invocations`, {
      method: 'POST',
      body: 'not json',
    });
    expect(raw.status).toBe(400);
    expect(raw.headers.get('x-amzn-errortype')).toBe('InvalidRequestContentException');
  });

  it('reports a handler that overruns its timeout as Sandbox.Timedout', async () => {
    const response = await invoke({ waitMs: 1200 });
    expect(response.FunctionError).toBe('Unhandled');
    expect(JSON.parse(decoder.decode(response.Payload)).errorType).toBe('Sandbox.Timedout');
  });
});

/** The AWS CLI (v1 or v2) where this machine has it. */
const awsCli = (() => {
  try {
    return execFileSync('aws', ['--version'], { encoding: 'utf8', stdio: 'pipe' }).trim();
  } catch {
    return undefined;
  }
})();

describe('Local Invoke API: the AWS CLI', () => {
  it('invokes with a raw JSON payload and --log-type Tail (where aws is installed)', async () => {
    if (!awsCli) {
      // Not a failure of the project: the SDK tests above cover the protocol.
      console.warn('AWS CLI not installed: the CLI check did not run');
      expect(awsCli).toBeUndefined();
      return;
    }
    const dir = mkdtempSync(join(tmpdir(), 'aws-cli-'));
    try {
      const out = join(dir, 'out.json');
      const { stdout } = await promisify(execFile)(
        'aws',
        [
          'lambda',
          'invoke',
          '--endpoint-url',
          server.url,
          '--function-name',
          'token-broker',
          // v2 reads --payload as base64 unless told otherwise; v1 has no such option.
          ...(awsCli.startsWith('aws-cli/1.') ? [] : ['--cli-binary-format', 'raw-in-base64-out']),
          '--payload',
          '{"say":"from-the-cli"}',
          '--log-type',
          'Tail',
          out,
        ],
        {
          env: {
            PATH: process.env.PATH ?? '',
            HOME: dir,
            AWS_ACCESS_KEY_ID: 'local',
            AWS_SECRET_ACCESS_KEY: 'local',
            AWS_DEFAULT_REGION: 'us-east-1',
          },
        },
      );
      const result = JSON.parse(stdout) as {
        StatusCode: number;
        ExecutedVersion: string;
        LogResult: string;
      };
      expect(result.StatusCode).toBe(200);
      expect(result.ExecutedVersion).toBe('$LATEST');
      expect(Buffer.from(result.LogResult, 'base64').toString()).toContain('line 0 from-the-cli');
      expect(JSON.parse(readFileSync(out, 'utf8'))).toEqual({ echo: { say: 'from-the-cli' } });
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
