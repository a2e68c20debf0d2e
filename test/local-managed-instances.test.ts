/**
 * The Lambda Managed Instances mode of the local runtime (issue 37: local/lambda-env/managed-*)
 * against real processes: the built runtime (`managed-bootstrap.mjs` of the process tier's one
 * build) running test/support/lambda-env/concurrent.mjs in worker threads. No speed is asserted:
 * concurrency shows in what the function counts, a freeze in /proc.
 */
import { readFileSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type LambdaContainer, startLambdaContainer } from '../local/lambda-container.js';
import {
  ManagedInstancesPool,
  type ManagedInstancesPoolOptions,
} from '../local/lambda-env/managed-pool.js';
import type { PoolInvocation } from '../local/lambda-env/pool.js';
import { startStack } from '../local/stack.js';
import { root, sharedBuild } from './support/build.js';
import { caught } from './support/errors.js';

let bootstrap = '';
beforeAll(() => {
  bootstrap = join(dirname(sharedBuild().bootstrap), 'managed-bootstrap.mjs');
});

const pools: ManagedInstancesPool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((pool) => pool.close()));
});

const poolOf = (options: Omit<ManagedInstancesPoolOptions, 'bundle' | 'bootstrap'> = {}) => {
  const pool = new ManagedInstancesPool({
    bundle: join(root, 'test/support/lambda-env/concurrent.mjs'),
    bootstrap,
    ...options,
  });
  pools.push(pool);
  return pool;
};

interface Report {
  readonly pid: number;
  readonly threadId: number;
  readonly ticks: number;
  readonly maxActive: number;
  readonly finishedLate: number;
  readonly requestId: string;
  readonly storeRequestId: string | undefined;
  readonly initializationType: string;
  readonly maxConcurrency: string;
  readonly traceEnv: string | undefined;
  readonly registrations: Record<'invoke' | 'shutdown', { status: number; body: unknown }>;
}

const reportOf = (invocation: PoolInvocation): Report => {
  if (!invocation.outcome.ok) {
    throw new Error(`${invocation.outcome.errorType}: ${invocation.outcome.errorMessage}`);
  }
  return invocation.outcome.result as Report;
};

/** The process state letter of `pid` (`T`: stopped). */
const procState = (pid: number) => readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1]?.[0];

describe('Local runtime: Lambda Managed Instances mode (issue 37)', () => {
  it('runs many invocations at once in one environment and one worker, each in an InvokeStore context of its own', async () => {
    const pool = poolOf({ maxEnvironments: 1 });
    // The environment's init first (one cold start), then ten at once.
    reportOf(await pool.invoke({}));
    const reports = (
      await Promise.all(Array.from({ length: 10 }, () => pool.invoke({ sleepMs: 300 })))
    ).map(reportOf);
    expect(new Set(reports.map((r) => r.pid)).size).toBe(1);
    expect(new Set(reports.map((r) => r.threadId)).size).toBe(1);
    expect(Math.max(...reports.map((r) => r.maxActive))).toBeGreaterThan(1);
    for (const report of reports) expect(report.storeRequestId).toBe(report.requestId);
    // Nothing writes the trace header into the process's environment: it would be every one's.
    expect(reports.every((r) => r.traceEnv === undefined)).toBe(true);
  });

  it('sets what Lambda sets there, refuses an INVOKE registration and takes a SHUTDOWN one', async () => {
    const pool = poolOf({ maxEnvironments: 1 });
    const report = reportOf(await pool.invoke({}));
    expect(report.initializationType).toBe('lambda-managed-instances');
    expect(report.maxConcurrency).toBe('64');
    expect(report.registrations.invoke).toEqual({
      status: 403,
      body: {
        errorType: 'Extension.InvalidEventType',
        errorMessage: 'INVOKE: not supported on Lambda Managed Instances (only SHUTDOWN)',
      },
      id: null,
    });
    expect(report.registrations.shutdown.status).toBe(200);
    expect(pool.environments()[0]?.extensions).toEqual([`shutdown-${report.threadId}`]);
  });

  it('never freezes: its timers run between invocations', async () => {
    const pool = poolOf({ maxEnvironments: 1 });
    const first = reportOf(await pool.invoke({}));
    expect(procState(first.pid)).not.toBe('T');
    await sleep(500);
    expect(procState(first.pid)).not.toBe('T');
    const second = reportOf(await pool.invoke({}));
    expect(second.pid).toBe(first.pid);
    // A 10 ms timer over half a second: dozens of ticks (a frozen one would show a handful).
    expect(second.ticks - first.ticks).toBeGreaterThan(20);
    expect(pool.environments()[0]?.stats.freezes).toBe(0);
  });

  it('reports a timeout to its caller, and leaves the function and its environment running', async () => {
    const pool = poolOf({ maxEnvironments: 1, timeoutMs: 1_000 });
    const first = reportOf(await pool.invoke({}));
    const late = await pool.invoke({ sleepMs: 1_500 });
    expect(late.outcome).toEqual({
      ok: false,
      errorType: 'Sandbox.Timedout',
      errorMessage: 'Task timed out after 1.00 seconds',
    });
    // The late invocation ran to its end, past its deadline, in the same environment.
    await sleep(800);
    const after = reportOf(await pool.invoke({}));
    expect(after.pid).toBe(first.pid);
    expect(after.finishedLate).toBe(1);
    expect(pool.environments()).toMatchObject([{ state: 'idle', stats: { timeouts: 1 } }]);
  });

  it('runs AWS_LAMBDA_NODEJS_WORKER_COUNT worker threads, each with its own init', async () => {
    const pool = poolOf({ maxEnvironments: 1, env: { AWS_LAMBDA_NODEJS_WORKER_COUNT: '2' } });
    reportOf(await pool.invoke({}));
    // Give the second worker its init (its `next` joins the first's).
    await sleep(500);
    const reports = (
      await Promise.all(Array.from({ length: 12 }, () => pool.invoke({ sleepMs: 100 })))
    ).map(reportOf);
    expect(new Set(reports.map((r) => r.pid)).size).toBe(1);
    expect(new Set(reports.map((r) => r.threadId)).size).toBe(2);
  });

  it('waits for a slot past its concurrency, then throttles', async () => {
    const pool = poolOf({ maxEnvironments: 1, maxConcurrency: 2, maxWaitMs: 200 });
    reportOf(await pool.invoke({}));
    const runs = [1, 2, 3].map(() => pool.invoke({ sleepMs: 800 }));
    const outcomes = await Promise.allSettled(runs);
    expect(outcomes.filter((o) => o.status === 'fulfilled')).toHaveLength(2);
    const [refused] = outcomes.filter((o) => o.status === 'rejected');
    expect(caught((refused as PromiseRejectedResult).reason).name).toBe('TooManyRequestsException');
  });
});

describe('Local runtime: the broker on Lambda Managed Instances (issue 37)', () => {
  it('serves concurrent callers from one environment, with no extension and nothing said of one', async () => {
    const stack = await startStack({}, ['sandbox']);
    let container: LambdaContainer | undefined;
    try {
      const build = sharedBuild();
      container = await startLambdaContainer({
        execution: 'managed-instances',
        bundle: build.bundle,
        bootstrap: build.bootstrap,
        env: stack.env,
        maxEnvironments: 1,
      });
      const answers = await Promise.all(
        Array.from({ length: 10 }, () =>
          container?.invoke({ action: 'getToken', connection: 'sandbox' }),
        ),
      );
      const tokens = answers.map((a) => (a?.ok ? (a.result as { accessToken: string }) : a));
      expect(new Set(tokens.map((t) => (t as { accessToken?: string }).accessToken)).size).toBe(1);
      expect(stack.simulator.issuanceTimes()).toHaveLength(1);
      expect(container.environments()).toMatchObject([{ extensions: [], stats: { freezes: 0 } }]);
      expect(container.output()).not.toContain('Extension not registered');
      expect(container.output()).not.toContain('No context available');
      expect(container.output()).toContain('"message":"Token served"');
    } finally {
      await container?.close();
      await stack.close();
    }
  });
});
