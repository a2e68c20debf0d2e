/**
 * Warm and cold cost of the broker, each against its reference measured in the same run:
 * - warm: a direct invoke answered from the container's memory, through the whole handler,
 *   against one loopback GetItem (the cheapest DynamoDB read a container could do instead);
 * - cold: import of the bundle plus the first token served from DynamoDB, against a bare
 *   bundle that does one GetItem and returns JSON. Each measured in fresh processes,
 *   alternating, median of `rounds`;
 * - cold in an execution environment (issue 17): the same, as Lambda runs it: init of an
 *   emulated environment (`local/lambda-env/`: the runtime process, the bundle's import and its
 *   extensions' registration, until all wait on `next`) plus the first invocation through the
 *   Runtime API, the broker with its extension registering and with BROKER_LAMBDA_EXTENSION=off
 *   next to the bare bundle.
 */
import { execFile } from 'node:child_process';
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';
import { promisify } from 'node:util';
import { DynamoDBClient, GetItemCommand } from '@aws-sdk/client-dynamodb';
import { EnvironmentPool } from '../local/lambda-env/pool.js';
import type { Stack } from '../local/stack.js';
import { percentile } from './measures.js';

export interface WarmCost {
  readonly memoryHitMeanUs: number;
  readonly getItemMeanUs: number;
  readonly ratio: number;
  readonly memoryHits: number;
  readonly getItems: number;
}

export interface ColdCost {
  readonly brokerMedianMs: number;
  readonly bareMedianMs: number;
  readonly ratio: number;
  readonly brokerInitMedianMs: number;
  readonly bareInitMedianMs: number;
  /** The broker with its source map loaded (NODE_OPTIONS=--enable-source-maps, as deployed). */
  readonly sourceMapsMedianMs: number;
  readonly rounds: number;
  readonly brokerBundleBytes: number;
  readonly bareBundleBytes: number;
}

type Handler = (event: unknown, context: unknown) => Promise<unknown>;

const context = () => {
  const deadline = Date.now() + 10_000;
  return {
    awsRequestId: 'bench',
    functionName: 'token-broker',
    functionVersion: '$LATEST',
    invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:token-broker',
    memoryLimitInMB: '512',
    getRemainingTimeInMillis: () => deadline - Date.now(),
  };
};

/** In this process: the broker bundle's handler on a warm container, and raw GetItem calls. */
export const measureWarm = async (
  stack: Stack,
  bundle: string,
  { memoryHits = 20_000, getItems = 1_000 } = {},
): Promise<WarmCost> => {
  for (const [key, value] of Object.entries(stack.env)) process.env[key] = value;
  const { handler } = (await import(pathToFileURL(bundle).href)) as { handler: Handler };
  const event = { action: 'getToken', connection: 'sandbox' };
  await handler(event, context()); // issues and fills memory
  for (let i = 0; i < 1_000; i += 1) await handler(event, context()); // JIT warm-up
  let started = performance.now();
  for (let i = 0; i < memoryHits; i += 1) await handler(event, context());
  const memoryHitMeanUs = ((performance.now() - started) * 1000) / memoryHits;

  const client = new DynamoDBClient({});
  const command = () =>
    new GetItemCommand({
      TableName: stack.tableName,
      Key: { pk: { S: 'token#sandbox' } },
      ConsistentRead: true,
    });
  for (let i = 0; i < 100; i += 1) await client.send(command());
  started = performance.now();
  for (let i = 0; i < getItems; i += 1) await client.send(command());
  const getItemMeanUs = ((performance.now() - started) * 1000) / getItems;
  client.destroy();
  return {
    memoryHitMeanUs,
    getItemMeanUs,
    ratio: memoryHitMeanUs / getItemMeanUs,
    memoryHits,
    getItems,
  };
};

const run = promisify(execFile);

/**
 * One cold start in a fresh process (`cold-runner`): import, then the first invocation.
 * Asynchronous on purpose: this process serves dynalite and the simulator to the child.
 */
export const coldOnce = async (
  runner: string,
  bundle: string,
  event: unknown,
  env: Record<string, string>,
) => {
  let output: string;
  try {
    ({ stdout: output } = await run(process.execPath, [runner, bundle, JSON.stringify(event)], {
      env: { PATH: process.env.PATH ?? '', ...env },
      encoding: 'utf8',
    }));
  } catch (error) {
    const stderr = String((error as { stderr?: unknown }).stderr ?? '');
    throw new Error(
      `cold start of ${bundle} failed: ${stderr
        .split('\n')
        .filter((l) => l.length < 300)
        .slice(-3)
        .join(' / ')}`,
    );
  }
  const last = output.trim().split('\n').pop() ?? '{}';
  const { initMs, firstInvokeMs } = JSON.parse(last) as { initMs: number; firstInvokeMs: number };
  return { initMs, totalMs: initMs + firstInvokeMs };
};

/** Fresh processes, alternating broker and bare, so drift on a shared machine hits both. */
export const measureCold = async (
  stack: Stack,
  paths: { runner: string; broker: string; bare: string; brokerBytes: number; bareBytes: number },
  rounds = 15,
): Promise<ColdCost> => {
  const broker: { initMs: number; totalMs: number }[] = [];
  const mapped: { initMs: number; totalMs: number }[] = [];
  const bare: { initMs: number; totalMs: number }[] = [];
  const event = { action: 'getToken', connection: 'sandbox' };
  const issued = stack.simulator.stats().issuances;
  for (let i = 0; i < rounds; i += 1) {
    broker.push(await coldOnce(paths.runner, paths.broker, event, stack.env));
    mapped.push(
      await coldOnce(paths.runner, paths.broker, event, {
        ...stack.env,
        NODE_OPTIONS: '--enable-source-maps',
      }),
    );
    bare.push(await coldOnce(paths.runner, paths.bare, { connection: 'sandbox' }, stack.env));
  }
  if (stack.simulator.stats().issuances !== issued) {
    throw new Error('a cold start reached the upstream: the table should have served it');
  }
  const median = (values: number[]) => percentile(values, 50);
  const brokerMedianMs = median(broker.map((b) => b.totalMs));
  const bareMedianMs = median(bare.map((b) => b.totalMs));
  return {
    brokerMedianMs,
    bareMedianMs,
    ratio: brokerMedianMs / bareMedianMs,
    sourceMapsMedianMs: median(mapped.map((b) => b.totalMs)),
    brokerInitMedianMs: median(broker.map((b) => b.initMs)),
    bareInitMedianMs: median(bare.map((b) => b.initMs)),
    rounds,
    brokerBundleBytes: paths.brokerBytes,
    bareBundleBytes: paths.bareBytes,
  };
};

/** One variant's cold starts in an execution environment: medians (ms). */
export interface EnvironmentCold {
  /** `initMs` + `durationMs` of the invocation that started the environment. */
  readonly totalMedianMs: number;
  /** From the runtime process's spawn until it and every extension waited on `next`. */
  readonly initMedianMs: number;
  /** The first invocation, from delivery to the runtime's response. */
  readonly durationMedianMs: number;
  /** Extensions registered in the environment (the same in every round). */
  readonly extensions: number;
}

export interface EnvironmentColdCost {
  readonly rounds: number;
  readonly broker: EnvironmentCold;
  readonly brokerNoExtension: EnvironmentCold;
  readonly bare: EnvironmentCold;
  /** Broker (extension registering) over the bare bundle, medians of the totals. */
  readonly ratio: number;
  /** Broker with BROKER_LAMBDA_EXTENSION=off over the bare bundle. */
  readonly noExtensionRatio: number;
}

export interface EnvironmentColdSample {
  readonly initMs: number;
  readonly durationMs: number;
  readonly extensions: number;
}

/** One environment started for one invocation, then shut down. */
export const coldInEnvironment = async (
  bootstrap: string,
  bundle: string,
  event: unknown,
  env: Record<string, string>,
): Promise<EnvironmentColdSample> => {
  const pool = new EnvironmentPool({ bundle, bootstrap, env, maxEnvironments: 1 });
  try {
    const { outcome, coldStart, initMs, durationMs, billedMs } = await pool.invoke(event);
    if (!outcome.ok) {
      throw new Error(
        `cold start of ${bundle} failed: ${outcome.errorType}: ${outcome.errorMessage}`,
      );
    }
    if (!coldStart || initMs === undefined) throw new Error(`${bundle}: not a cold start`);
    await billedMs; // frozen again: the extension has asked for its next event
    const extensions = pool.environments()[0]?.extensions.length ?? 0;
    return { initMs, durationMs, extensions };
  } finally {
    await pool.close();
  }
};

/**
 * Cold starts in emulated execution environments, alternating the three bundles round by round;
 * the token is in the table already, so the broker serves it from DynamoDB.
 */
export const measureColdInEnvironment = async (
  stack: Stack,
  paths: { bootstrap: string; broker: string; bare: string },
  rounds = 15,
): Promise<EnvironmentColdCost> => {
  const samples = { broker: [], brokerNoExtension: [], bare: [] } as Record<
    'broker' | 'brokerNoExtension' | 'bare',
    EnvironmentColdSample[]
  >;
  const event = { action: 'getToken', connection: 'sandbox' };
  const issued = stack.simulator.stats().issuances;
  for (let i = 0; i < rounds; i += 1) {
    samples.broker.push(await coldInEnvironment(paths.bootstrap, paths.broker, event, stack.env));
    samples.brokerNoExtension.push(
      await coldInEnvironment(paths.bootstrap, paths.broker, event, {
        ...stack.env,
        BROKER_LAMBDA_EXTENSION: 'off',
      }),
    );
    samples.bare.push(
      await coldInEnvironment(paths.bootstrap, paths.bare, { connection: 'sandbox' }, stack.env),
    );
  }
  if (stack.simulator.stats().issuances !== issued) {
    throw new Error('a cold start reached the upstream: the table should have served it');
  }
  const median = (values: number[]) => percentile(values, 50);
  const summary = (list: EnvironmentColdSample[]): EnvironmentCold => ({
    totalMedianMs: median(list.map((s) => s.initMs + s.durationMs)),
    initMedianMs: median(list.map((s) => s.initMs)),
    durationMedianMs: median(list.map((s) => s.durationMs)),
    extensions: Math.max(0, ...list.map((s) => s.extensions)),
  });
  const broker = summary(samples.broker);
  const brokerNoExtension = summary(samples.brokerNoExtension);
  const bare = summary(samples.bare);
  // The comparison means something only if the extension did register, and only there.
  if (broker.extensions !== 1 || brokerNoExtension.extensions !== 0) {
    throw new Error(
      `extensions registered: ${broker.extensions} with, ${brokerNoExtension.extensions} without (expected 1 and 0)`,
    );
  }
  return {
    rounds,
    broker,
    brokerNoExtension,
    bare,
    ratio: broker.totalMedianMs / bare.totalMedianMs,
    noExtensionRatio: brokerNoExtension.totalMedianMs / bare.totalMedianMs,
  };
};
