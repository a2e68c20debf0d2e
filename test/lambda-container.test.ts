/**
 * local/lambda-container.ts, the containers of `npm run chaos` and `npm run bench`, against real
 * processes: the process tier's build (the runtime, `local/container.mjs`) running the small
 * counter function of test/support/lambda-env/.
 */
import { existsSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterEach, describe, expect, it } from 'vitest';
import { probeCpuShare } from '../local/cpu-share.js';
import {
  type Execution,
  InitFailedError,
  type LambdaContainer,
  type LambdaContainerSpec,
  startLambdaContainer,
} from '../local/lambda-container.js';
import { root, sharedBuild } from './support/build.js';

const counter = join(root, 'test/support/lambda-env/counter.mjs');
const containers: LambdaContainer[] = [];
afterEach(async () => {
  await Promise.all(containers.splice(0).map((c) => c.close()));
});

const start = async (
  execution: Execution,
  env: Record<string, string> = {},
  timeoutMs = 5_000,
  more: Partial<LambdaContainerSpec> = {},
) => {
  const build = sharedBuild();
  const container = await startLambdaContainer({
    execution,
    bundle: counter,
    runner: build.container,
    bootstrap: build.bootstrap,
    env,
    timeoutMs,
    ...more,
  });
  containers.push(container);
  return container;
};

const until = async (check: () => boolean, what: string) => {
  for (let i = 0; i < 100; i += 1) {
    if (check()) return;
    await sleep(50);
  }
  throw new Error(`still not true after 5 s: ${what}`);
};

const alive = (pid: number) => {
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};

describe('Function: startLambdaContainer, frozen', () => {
  it('answers over the Invoke API, a function error by name; its pids are its environments; it bills each invocation', async () => {
    // Prepare
    const container = await start('frozen');

    // Act
    const ok = await container.invoke({});
    const failed = await container.invoke({ fail: true });
    const billing = await container.settledBilling();

    // Assess
    expect(ok.ok).toBe(true);
    const { pid } = (ok as { result: { pid: number } }).result;
    expect(container.pids()).toContain(pid);
    expect(failed).toMatchObject({ ok: false, errorType: 'SomethingFailed' });
    expect(billing.invocations).toBe(2);
    expect(billing.billedMs).toBeGreaterThanOrEqual(billing.durationMs);
    expect(container.billing()).toEqual(billing);
    expect(await container.settledBilling(1)).toMatchObject({ invocations: 1 });
  });

  it("times an invocation from its delivery, as Lambda does: a cold start's init longer than the timeout does not count", async () => {
    // Prepare: an init of 1.5 s, a function timeout of 1 s
    const container = await start('frozen', { INIT_SLEEP_MS: '1500' }, 1_000);

    // Act
    const outcome = await container.invoke({});

    // Assess
    expect(outcome.ok).toBe(true);
  });

  it("gives the function the request ID its caller gets (x-amzn-requestid), as npm start's Invoke API does", async () => {
    // Prepare
    const container = await start('frozen');

    // Act
    const response = await fetch(`${container.url}/2015-03-31/functions/token-broker/invocations`, {
      method: 'POST',
      body: '{}',
    });

    // Assess: one request ID, the caller's and the function's context's.
    const { requestId } = (await response.json()) as { requestId: string };
    expect(requestId).toBe(response.headers.get('x-amzn-requestid'));
  });

  it("runs npm start's warm-up schedule: once before it listens, then at its interval; lists its environments under /__local/", async () => {
    // Prepare
    const problems: string[] = [];
    const container = await start('frozen', {}, 5_000, {
      warmUp: { everyMs: 200, onProblem: (line) => problems.push(line) },
    });

    // Act: the first warm-up ran before the start resolved; wait for a scheduled one.
    const [first] = container.environments();
    await until(
      () => (container.environments()[0]?.stats.invocations ?? 0) >= 2,
      'a scheduled warm-up',
    );
    const listed = (await (await fetch(`${container.url}/__local/environments`)).json()) as {
      id: string;
      pid: number;
    }[];

    // Assess
    expect(first?.stats.invocations).toBe(1);
    expect(problems).toEqual([]);
    expect(listed).toEqual([expect.objectContaining({ id: first?.id, pid: first?.pid })]);
  });

  it("rejects the start when the first warm-up's init fails, with the init error as Lambda reports it", async () => {
    const build = sharedBuild();
    const started = startLambdaContainer({
      execution: 'frozen',
      bundle: join(root, 'test/support/lambda-env/broken.mjs'),
      bootstrap: build.bootstrap,
      env: {},
      warmUp: { everyMs: 0, onProblem: () => undefined },
    });
    const error = await started.then(
      () => undefined,
      (e: unknown) => e,
    );
    expect(error).toBeInstanceOf(InitFailedError);
    expect(error).toMatchObject({
      errorType: 'ConfigurationError',
      message: 'BROKER_CONNECTIONS is missing',
    });
  });

  it("lists an environment's invocation under way with its deadline, and whether it was answered", async () => {
    const container = await start('frozen', {}, 5_000);
    await container.invoke({});
    await until(() => container.environments()[0]?.state === 'frozen', 'frozen after it');
    expect(container.environments()[0]?.invocation).toBeUndefined();

    const sent = Date.now();
    const running = container.invoke({ sleepMs: 400 });
    await until(() => container.environments()[0]?.state === 'busy', 'the invocation delivered');
    const { invocation } = container.environments()[0] ?? {};
    await running;

    expect(invocation?.answered).toBe(false);
    expect(invocation?.deadlineAt).toBeGreaterThanOrEqual(sent + 5_000);
    expect(invocation?.deadlineAt).toBeLessThan(sent + 5_000 + 1_000);
  });

  it('close ends its environments', async () => {
    const container = await start('frozen');
    const outcome = await container.invoke({});
    const { pid } = (outcome as { result: { pid: number } }).result;
    await container.close();
    expect(alive(pid)).toBe(false);
    expect(container.pids()).toEqual([]);
  });
});

/** The cpu group a process is in (`/` for the root group). */
const cpuGroupOf = (pid: number): string =>
  /^\d+:cpu(?:,cpuacct)?:(.*)$/m.exec(readFileSync(`/proc/${pid}/cgroup`, 'utf8'))?.[1] ?? '?';

const writable = probeCpuShare({ env: {} }).kind === 'quota';

describe.skipIf(!writable)("Function: startLambdaContainer, Lambda's CPU share (issue 35)", () => {
  it("puts each environment in a cgroup of its own with its memory's quota (512 MB: 0.29 core), removed when it ends", async () => {
    // Prepare
    const container = await start('frozen');

    // Act
    const outcome = await container.invoke({});
    const { pid } = (outcome as { result: { pid: number } }).result;
    const [environment] = container.environments();

    // Assess
    expect(container.cpu.description).toBe(
      'CPU: 0.29 core per environment (512 MB, cgroup cpu quota)',
    );
    expect(environment?.cpu).toMatchObject({ kind: 'quota', quotaUs: 28_943, periodUs: 100_000 });
    const group = environment?.cpu.kind === 'quota' ? environment.cpu.group : '';
    expect(cpuGroupOf(pid)).toBe(group.replace('/sys/fs/cgroup/cpu', ''));
    expect(readFileSync(join(group, 'cpu.cfs_quota_us'), 'utf8').trim()).toBe('28943');

    // Act
    await container.close();

    // Assess: the group is gone, its last cpu.stat kept.
    const [ended] = container.environments({ ended: true });
    expect(existsSync(group)).toBe(false);
    expect(ended?.cpu).toMatchObject({
      kind: 'quota',
      throttling: { periods: expect.any(Number) },
    });
  });

  it('runs on whole cores, and says so, with BROKER_LOCAL_CPU_SHARE=off', async () => {
    const container = await start('frozen', {}, 5_000, {
      cpu: probeCpuShare({ env: { BROKER_LOCAL_CPU_SHARE: 'off' } }),
    });

    const outcome = await container.invoke({});
    const { pid } = (outcome as { result: { pid: number } }).result;

    expect(container.cpu.description).toBe('CPU: whole cores (BROKER_LOCAL_CPU_SHARE=off)');
    expect(container.environments()[0]?.cpu).toEqual({
      kind: 'whole-cores',
      reason: 'BROKER_LOCAL_CPU_SHARE=off',
    });
    expect(cpuGroupOf(pid)).toBe('/');
  });

  it('puts an always-running process in a group of its own too, removed on close', async () => {
    const container = await start('always-running');
    const [pid] = container.pids();
    if (pid === undefined) throw new Error('no process');

    const group = cpuGroupOf(pid);
    await container.close();

    expect(group).toMatch(/^\/token-broker\/\d+-always-\d+$/);
    expect(existsSync(`/sys/fs/cgroup/cpu${group}`)).toBe(false);
  });
});

describe('Function: startLambdaContainer, the qualifier invoked (issue 37)', () => {
  const arn = 'arn:aws:lambda:us-east-1:000000000000:function:token-broker';
  const seen = async (response: Response) =>
    ((await response.json()) as { invokedFunctionArn: string }).invokedFunctionArn;

  it.each<Execution>([
    'frozen',
    'always-running',
    'managed-instances',
  ])('%s: HTTP requests through the URL’s alias (BROKER_URL_QUALIFIER, else url), direct invokes through what the caller named', async (execution) => {
    for (const [env, alias] of [
      [{}, 'url'],
      [{ BROKER_URL_QUALIFIER: 'function-url' }, 'function-url'],
    ] as const) {
      const container = await start(execution, env);
      expect(await seen(await fetch(`${container.url}/tokens/x`))).toBe(`${arn}:${alias}`);
      const invoke = (path: string) =>
        fetch(`${container.url}/2015-03-31/functions/${path}`, { method: 'POST', body: '{}' });
      expect(await seen(await invoke('token-broker/invocations'))).toBe(arn);
      expect(await seen(await invoke('token-broker%3A%24LATEST/invocations'))).toBe(
        `${arn}:$LATEST`,
      );
      expect(await seen(await invoke('token-broker/invocations?Qualifier=%24LATEST'))).toBe(
        `${arn}:$LATEST`,
      );
      // The container's own Invoke API call (chaos, bench): unqualified.
      const outcome = await container.invoke({});
      expect(outcome.ok && (outcome.result as { invokedFunctionArn: string })).toMatchObject({
        invokedFunctionArn: arn,
      });
    }
  });
});

describe('Function: startLambdaContainer, event-loop delays (issue 35, A2)', () => {
  it("counts a pause while the function runs, not the environment's freezes between invocations", async () => {
    // Prepare
    const container = await start('frozen', {}, 5_000, { loopDelay: true });
    const first = await container.invoke({});
    const { pid } = (first as { result: { pid: number } }).result;
    await sleep(600); // frozen by the runtime: not a delay

    // Act: a 300 ms stop in the middle of an invocation, as a GC or a CPU quota would.
    const running = container.invoke({ sleepMs: 600 });
    await sleep(150);
    process.kill(pid, 'SIGSTOP');
    await sleep(300);
    process.kill(pid, 'SIGCONT');
    await running;
    await container.close();

    // Assess
    const [ended] = container.environments({ ended: true });
    const delays = ended?.loopDelays ?? [];
    expect(delays[0]?.delayMs).toBeGreaterThan(250);
    expect(delays[0]?.delayMs).toBeLessThan(450);
    expect(delays.filter((d) => d.delayMs > 450)).toEqual([]);
  });
});

describe('Function: startLambdaContainer, always-running', () => {
  it('runs the function in one process that never stops, with no billing, and kills it on close', async () => {
    const container = await start('always-running');
    const outcome = await container.invoke({});
    expect(outcome.ok).toBe(true);
    const [pid] = container.pids();
    expect(pid).toBe((outcome as { result: { pid: number } }).result.pid);
    expect(await container.settledBilling()).toEqual({
      invocations: 0,
      durationMs: 0,
      billedMs: 0,
      keptThawed: 0,
    });
    await container.close();
    expect(container.pids()).toEqual([]);
  });
});
