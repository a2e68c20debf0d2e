/**
 * The emulated execution environments of local/lambda-env/ against real processes: the built
 * runtime (`local/lambda-env/bootstrap.mjs` of the process tier's one build) running the small
 * functions of test/support/lambda-env/. A process's run state is read from /proc (`T`:
 * stopped). Nothing here asserts speed: waits are bounded loops, and the few time comparisons
 * are lower bounds that follow from the order of events.
 */
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, beforeAll, describe, expect, it } from 'vitest';
import {
  EnvironmentPool,
  type EnvironmentPoolOptions,
  type PoolInvocation,
} from '../local/lambda-env/pool.js';
import { DEFAULT_LAMBDA } from '../local/lambda-events.js';
import { startLambdaServer } from '../local/lambda-server.js';
import { root, sharedBuild } from './support/build.js';
import { caught, unexpected } from './support/errors.js';

let bootstrap = '';
beforeAll(() => {
  bootstrap = sharedBuild().bootstrap;
});

const pools: EnvironmentPool[] = [];
afterEach(async () => {
  await Promise.all(pools.splice(0).map((pool) => pool.close()));
});

const poolOf = (
  fn: 'counter' | 'extension' | 'sigterm' | 'broken',
  options: Omit<EnvironmentPoolOptions, 'bundle' | 'bootstrap'> = {},
) => {
  const pool = new EnvironmentPool({
    bundle: join(root, 'test/support/lambda-env', `${fn}.mjs`),
    bootstrap,
    ...options,
  });
  pools.push(pool);
  return pool;
};

/** The result of a successful invocation. */
const resultOf = <T = Record<string, unknown>>(invocation: PoolInvocation): T => {
  if (!invocation.outcome.ok) {
    throw new Error(`${invocation.outcome.errorType}: ${invocation.outcome.errorMessage}`);
  }
  return invocation.outcome.result as T;
};

/**
 * The invocation once its environment waits again (frozen, or idle): an environment still
 * busy after its answer is not free, and the next invocation would start another one.
 */
const settled = async (invocation: PoolInvocation): Promise<PoolInvocation> => {
  await invocation.billedMs;
  return invocation;
};

/** The run state of a process (`S`, `R`, `T` for stopped, …), or undefined once it is gone. */
const runState = (pid: number): string | undefined => {
  try {
    const stat = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return stat.slice(stat.lastIndexOf(')') + 2).split(' ')[0];
  } catch {
    return undefined;
  }
};

/** Polls until `check` holds, at most `tries` times `every` ms apart. */
const until = async (check: () => boolean, what: string, tries = 100, every = 50) => {
  for (let i = 0; i < tries; i += 1) {
    if (check()) return;
    await sleep(every);
  }
  throw new Error(`still not true after ${tries * every} ms: ${what}`);
};

interface Counter {
  readonly ticks: number;
  readonly pid: number;
}

describe('Class: EnvironmentPool, freezing', () => {
  it('stops an environment between invocations (T in /proc) and its timers do not run until the next invocation', async () => {
    // Prepare
    const lambda = poolOf('counter');
    const first = await lambda.invoke({});
    const { pid, ticks: atFirst } = resultOf<Counter>(first);
    await first.billedMs;

    // Act: leave it frozen for a second (the module's timer would fire about 100 times)
    expect(lambda.environments()[0]?.state).toBe('frozen');
    // SIGSTOP takes effect when the kernel next handles the process: a moment after kill().
    await until(() => runState(pid) === 'T', 'the runtime process is stopped', 50, 10);
    await sleep(1000);
    expect(runState(pid)).toBe('T');
    const second = await settled(await lambda.invoke({}));
    const { ticks: atSecond } = resultOf<Counter>(second);
    const third = await settled(await lambda.invoke({ sleepMs: 200 }));
    const { ticks: atThird } = resultOf<Counter>(third);

    // Assess: a missed interval fires once on thaw, plus the few ms around each freeze
    expect(second.coldStart).toBe(false);
    expect(second.environmentId).toBe(first.environmentId);
    expect(atSecond - atFirst).toBeLessThan(10);
    expect(atThird).toBeGreaterThan(atSecond);
    expect(lambda.environments()[0]?.stats).toMatchObject({ invocations: 3, thaws: 3 });
  });

  it('freeze: false never stops the process, and its timers run between invocations', async () => {
    // Prepare
    const lambda = poolOf('counter', { freeze: false });
    const first = await lambda.invoke({});
    const { pid, ticks: atFirst } = resultOf<Counter>(first);
    await first.billedMs;

    // Act: watch it for a second between invocations
    const states: (string | undefined)[] = [];
    for (let i = 0; i < 20; i += 1) {
      states.push(runState(pid));
      await sleep(50);
    }
    const { ticks: atSecond } = resultOf<Counter>(await settled(await lambda.invoke({})));

    // Assess
    expect(lambda.environments()[0]?.state).toBe('idle');
    expect(states).not.toContain('T');
    expect(states).not.toContain(undefined);
    expect(atSecond - atFirst).toBeGreaterThan(10);
    expect(lambda.environments()[0]?.stats).toMatchObject({ freezes: 0, thaws: 0 });
  });
});

describe('Class: EnvironmentPool, the Runtime and Extensions APIs', () => {
  it('hands the handler its event and a Context from the Runtime API headers', async () => {
    // Prepare
    const lambda = poolOf('counter', { timeoutMs: 3000, functionName: 'my-function' });

    // Act
    const invocation = await lambda.invoke({});
    const result = resultOf<Record<string, unknown>>(invocation);

    // Assess
    expect(result.requestId).toBe(invocation.requestId);
    expect(result.functionName).toBe('my-function');
    expect(result.remainingMs).toBeGreaterThan(0);
    expect(result.remainingMs).toBeLessThanOrEqual(3000);
    expect(result.traceId).toMatch(
      /^Root=1-[0-9a-f]{8}-[0-9a-f]{24};Parent=[0-9a-f]{16};Sampled=0$/,
    );
    expect(result.runtimeApi).toMatch(/^127\.0\.0\.1:\d+$/);
  });

  it('answers as soon as the runtime responds while an internal extension works after the response, freezes when it calls next, and bills that work', async () => {
    // Prepare
    const WORK_MS = 300;
    const lambda = poolOf('extension', { env: { WORK_MS: String(WORK_MS) } });

    // Act
    const first = await lambda.invoke({});
    const answeredAt = Date.now();
    const [atAnswer] = lambda.environments();
    const billed = await first.billedMs;
    const [afterWork] = lambda.environments();
    const second = await lambda.invoke({});

    // Assess: at the answer the extension was still working, and the environment thawed
    expect(atAnswer?.state).toBe('after-response');
    expect(runState(atAnswer?.pid ?? 0)).not.toBe('T');
    // The work starts as the handler returns, a few ms before its response reaches the API:
    // billing runs to the freeze, so it covers the response and nearly all of the work.
    expect(billed).toBeGreaterThanOrEqual(first.durationMs + WORK_MS - 50);
    expect(billed).toBeGreaterThanOrEqual(WORK_MS);
    expect(afterWork?.state).toBe('frozen');
    // The extension's own record: its work for the first invocation ended after the answer.
    expect(second.environmentId).toBe(first.environmentId);
    const { work } = resultOf<{ work: { requestId: string; endedAt: number }[] }>(second);
    const firstWork = work.find((w) => w.requestId === first.requestId);
    expect(firstWork?.endedAt).toBeGreaterThan(answeredAt);
    expect(afterWork?.extensions).toEqual(['work-after-response']);
  });

  it('registers an internal extension at init only: later is Extension.RegistrationClosed, and SHUTDOWN is refused', async () => {
    // Prepare
    const lambda = poolOf('extension', { env: { WORK_MS: '0' }, functionName: 'my-function' });

    // Act
    const { registration, shutdownRefusal } = resultOf<Record<string, unknown>>(
      await settled(await lambda.invoke({})),
    );
    const { late } = resultOf<Record<string, unknown>>(await lambda.invoke({ register: true }));

    // Assess
    expect(registration).toEqual({
      status: 200,
      body: {
        functionName: 'my-function',
        functionVersion: '$LATEST',
        handler: 'extension.handler',
      },
    });
    expect(late).toEqual({
      status: 403,
      body: {
        errorType: 'Extension.RegistrationClosed',
        errorMessage: 'Extension registration closed already',
      },
    });
    expect(shutdownRefusal).toMatchObject({
      status: 403,
      body: { errorType: 'Extension.InvalidEventType' },
    });
    expect(lambda.environments()[0]?.extensions).toEqual(['work-after-response']);
  });
});

describe('Class: EnvironmentPool, concurrency', () => {
  it('starts a second environment for a concurrent invocation', async () => {
    // Prepare
    const lambda = poolOf('counter', { maxEnvironments: 4 });

    // Act
    const [a, b] = await Promise.all([
      lambda.invoke({ sleepMs: 300 }),
      lambda.invoke({ sleepMs: 300 }),
    ]);

    // Assess
    expect(a.coldStart && b.coldStart).toBe(true);
    expect(a.environmentId).not.toBe(b.environmentId);
    expect(resultOf<Counter>(a).pid).not.toBe(resultOf<Counter>(b).pid);
    expect(lambda.environments()).toHaveLength(2);
  });

  it('reuses the most recently used frozen environment first', async () => {
    // Prepare: two frozen environments, then one more invocation, so that the environment it
    // ran in is the one freed last whatever the two cold starts took (under load, a slow init
    // once reordered two invocations that only slept different times)
    const lambda = poolOf('counter');
    const [a, b] = await Promise.all([
      lambda.invoke({ sleepMs: 100 }),
      lambda.invoke({ sleepMs: 400 }),
    ]);
    await Promise.all([a.billedMs, b.billedMs]);
    expect(new Set([a.environmentId, b.environmentId]).size).toBe(2);
    const last = await lambda.invoke({});
    await last.billedMs;

    // Act
    const next = await lambda.invoke({});

    // Assess: the environment freed last, not the one frozen longer
    expect(next.coldStart).toBe(false);
    expect(next.environmentId).toBe(last.environmentId);
  });

  it('with maxEnvironments 1, a concurrent invocation waits for the environment and reuses it', async () => {
    // Prepare
    const lambda = poolOf('counter', { maxEnvironments: 1 });

    // Act
    const [a, b] = await Promise.all([lambda.invoke({ sleepMs: 300 }), lambda.invoke({})]);

    // Assess
    expect(a.coldStart).toBe(true);
    expect(b.coldStart).toBe(false);
    expect(b.environmentId).toBe(a.environmentId);
    expect(lambda.environments()).toHaveLength(1);
  });

  it('with maxEnvironments 1, throws TooManyRequestsException when none is free within maxWaitMs', async () => {
    // Prepare
    const lambda = poolOf('counter', { maxEnvironments: 1, maxWaitMs: 100 });
    const busy = lambda.invoke({ sleepMs: 1000 });
    await until(() => lambda.environments()[0]?.state === 'busy', 'the first invocation runs');

    // Act
    const error = await lambda.invoke({}).then(unexpected, caught);

    // Assess
    expect(error.name).toBe('TooManyRequestsException');
    expect(error.code).toBe('TooManyRequestsException');
    expect((await busy).outcome.ok).toBe(true);
  });
});

describe('Class: EnvironmentPool, failures', () => {
  it('a timed-out invocation fails with Sandbox.Timedout and ends its environment; the next one cold-starts', async () => {
    // Prepare
    const lambda = poolOf('counter', { timeoutMs: 500 });
    const warm = await settled(await lambda.invoke({}));
    const { pid } = resultOf<Counter>(warm);

    // Act
    const slow = await lambda.invoke({ sleepMs: 5000 });
    await until(() => runState(pid) === undefined, 'the timed-out runtime is gone');
    const next = await lambda.invoke({});

    // Assess
    expect(slow.outcome).toEqual({
      ok: false,
      errorType: 'Sandbox.Timedout',
      errorMessage: 'Task timed out after 0.50 seconds',
    });
    expect(await slow.billedMs).toBe(500);
    const ended = lambda.environments({ ended: true }).find((e) => e.id === warm.environmentId);
    expect(ended).toMatchObject({
      state: 'ended',
      shutdown: { reason: 'timeout', signals: ['SIGKILL'] },
    });
    expect(next.coldStart).toBe(true);
    expect(next.environmentId).not.toBe(warm.environmentId);
    expect(resultOf<Counter>(next).pid).not.toBe(pid);
  });

  it('an init failure fails the invocation with the error the runtime posted to init/error', async () => {
    // Act
    const lambda = poolOf('broken');
    const invocation = await lambda.invoke({});

    // Assess
    expect(invocation.coldStart).toBe(true);
    expect(invocation.outcome).toEqual({
      ok: false,
      errorType: 'ConfigurationError',
      errorMessage: 'BROKER_CONNECTIONS is missing',
    });
    expect(lambda.environments()).toHaveLength(0);
  });

  it("an extension's init/error fails the invocation with Extension.InitError and ends the environment", async () => {
    // Act
    const lambda = poolOf('extension', { env: { INIT_ERROR: '1' } });
    const invocation = await lambda.invoke({});

    // Assess
    expect(invocation.coldStart).toBe(true);
    expect(invocation.outcome).toEqual({
      ok: false,
      errorType: 'Extension.InitError',
      errorMessage: 'Extension work-after-response reported Extension.ConfigInvalid: no endpoint',
    });
    expect(lambda.environments()).toHaveLength(0);
    expect(lambda.environments({ ended: true })[0]?.shutdown?.reason).toBe('failure');
  });

  it('a runtime that exits fails its invocation with Runtime.ExitError; a function error does not end the environment', async () => {
    // Prepare
    const lambda = poolOf('counter');

    // Act
    const failed = await settled(await lambda.invoke({ fail: true }));
    const afterError = await settled(await lambda.invoke({}));
    const crashed = await lambda.invoke({ exit: 3 });

    // Assess
    expect(failed.outcome).toEqual({
      ok: false,
      errorType: 'SomethingFailed',
      errorMessage: 'it failed',
    });
    expect(afterError.environmentId).toBe(failed.environmentId);
    expect(crashed.outcome).toMatchObject({ ok: false, errorType: 'Runtime.ExitError' });
    expect(crashed.outcome.ok || crashed.outcome.errorMessage).toContain('exit status 3');
  });
});

describe('Class: EnvironmentPool, shutdown', () => {
  it('close() under an invocation fails it as a runtime that exited', async () => {
    // Prepare
    const lambda = poolOf('counter');
    const running = lambda.invoke({ sleepMs: 5000 });
    await until(() => lambda.environments()[0]?.state === 'busy', 'the invocation runs');

    // Act
    await lambda.close();

    // Assess
    const { outcome } = await running;
    expect(outcome).toMatchObject({ ok: false, errorType: 'Runtime.ExitError' });
    expect(outcome.ok || outcome.errorMessage).toContain(
      'Runtime exited with error: signal: killed',
    );
    expect(lambda.environments()).toHaveLength(0);
  });

  const shutdownOf = async (lambda: EnvironmentPool) => {
    await until(() => lambda.environments().length === 0, 'the idle environment is shut down');
    return lambda.environments({ ended: true })[0]?.shutdown;
  };

  it('idle shutdown sends SIGTERM to a runtime with an extension registered, and lets it clean up', async () => {
    // Prepare
    const lines: string[] = [];
    const lambda = poolOf('sigterm', {
      idleShutdownMs: 200,
      shutdownDeadlineMs: 2000,
      onLog: (line) => lines.push(line),
    });

    // Act
    await lambda.invoke({});
    const shutdown = await shutdownOf(lambda);

    // Assess
    expect(shutdown).toEqual({
      reason: 'spindown',
      signals: ['SIGTERM'],
      exitCode: 0,
      exitSignal: null,
    });
    expect(lines).toEqual(['SIGTERM received', 'cleanup done']);
  });

  it('idle shutdown kills at the deadline a runtime that ignores SIGTERM', async () => {
    // Prepare
    const lines: string[] = [];
    const lambda = poolOf('sigterm', {
      env: { IGNORE_SIGTERM: '1' },
      idleShutdownMs: 200,
      shutdownDeadlineMs: 300,
      onLog: (line) => lines.push(line),
    });

    // Act
    await lambda.invoke({});
    const shutdown = await shutdownOf(lambda);

    // Assess
    expect(shutdown).toEqual({
      reason: 'spindown',
      signals: ['SIGTERM', 'SIGKILL'],
      exitCode: null,
      exitSignal: 'SIGKILL',
    });
    expect(lines).toEqual(['SIGTERM received']);
  });

  it('idle shutdown kills a runtime with no extension registered at once, without SIGTERM', async () => {
    // Prepare
    const lines: string[] = [];
    const lambda = poolOf('sigterm', {
      env: { REGISTER_EXTENSION: '0' },
      idleShutdownMs: 200,
      onLog: (line) => lines.push(line),
    });

    // Act
    await lambda.invoke({});
    const shutdown = await shutdownOf(lambda);

    // Assess
    expect(shutdown).toEqual({
      reason: 'spindown',
      signals: ['SIGKILL'],
      exitCode: null,
      exitSignal: 'SIGKILL',
    });
    expect(lines).toEqual([]);
  });
});

describe('Method: EnvironmentPool.asHandler', () => {
  it('fronted by startLambdaServer, answers the Invoke API with the result, or the function error by name', async () => {
    // Prepare
    const lambda = poolOf('counter');
    const server = await startLambdaServer(lambda.asHandler());
    const invoke = (payload: unknown) =>
      fetch(`${server.url}/2015-03-31/functions/token-broker/invocations`, {
        method: 'POST',
        body: JSON.stringify(payload),
      });

    try {
      // Act
      const ok = await invoke({});
      await until(() => lambda.environments()[0]?.state === 'frozen', 'the environment froze');
      const failed = await invoke({ fail: true });

      // Assess
      expect(ok.status).toBe(200);
      expect(((await ok.json()) as Counter).pid).toBe(lambda.environments()[0]?.pid);
      expect(failed.headers.get('x-amz-function-error')).toBe('Unhandled');
      expect(await failed.json()).toEqual({
        errorType: 'SomethingFailed',
        errorMessage: 'it failed',
      });
    } finally {
      await server.close();
    }
  });

  it("fronted by startLambdaServer, the function's timeout runs from delivery: a cold start's init does not count (as in Lambda)", async () => {
    // Prepare: an init of 800 ms, then a handler that answers 1,000 ms into its 1,500 ms:
    // 1,800 ms after the request arrived, within the function's timeout as Lambda counts it.
    const lambda = poolOf('counter', { timeoutMs: 1_500, env: { INIT_SLEEP_MS: '800' } });
    const server = await startLambdaServer(lambda.asHandler(), {
      settings: { ...DEFAULT_LAMBDA, timeoutMs: 1_500, timedByEnvironment: true },
    });

    try {
      // Act
      const answer = await fetch(`${server.url}/2015-03-31/functions/token-broker/invocations`, {
        method: 'POST',
        body: JSON.stringify({ sleepMs: 1_000 }),
      });

      // Assess: the handler's answer, not "Task timed out" from a timer started on arrival.
      expect(answer.headers.get('x-amz-function-error')).toBeNull();
      expect(((await answer.json()) as Counter).pid).toBe(lambda.environments()[0]?.pid);
    } finally {
      await server.close();
    }
  });

  it('rejects unknown options (typos) and bad numbers when constructed', () => {
    expect(
      () => new EnvironmentPool({ bundle: 'x', bootstrap: 'y', maxEnviroments: 2 } as never),
    ).toThrow("unknown option 'maxEnviroments'");
    expect(() => new EnvironmentPool({ bundle: 'x', bootstrap: 'y', maxEnvironments: 0 })).toThrow(
      RangeError,
    );
  });
});
