/**
 * local/lambda-container.ts, the containers of `npm run chaos` and `npm run bench`, against real
 * processes: the process tier's build (the runtime, `local/container.mjs`) running the small
 * counter function of test/support/lambda-env/.
 */
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import {
  type Execution,
  type LambdaContainer,
  startLambdaContainer,
} from '../local/lambda-container.js';
import { root, sharedBuild } from './support/build.js';

const counter = join(root, 'test/support/lambda-env/counter.mjs');
const containers: LambdaContainer[] = [];
afterEach(async () => {
  await Promise.all(containers.splice(0).map((c) => c.close()));
});

const start = async (execution: Execution, env: Record<string, string> = {}, timeoutMs = 5_000) => {
  const build = sharedBuild();
  const container = await startLambdaContainer({
    execution,
    bundle: counter,
    runner: build.container,
    bootstrap: build.bootstrap,
    env,
    timeoutMs,
  });
  containers.push(container);
  return container;
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

  it('close ends its environments', async () => {
    const container = await start('frozen');
    const outcome = await container.invoke({});
    const { pid } = (outcome as { result: { pid: number } }).result;
    await container.close();
    expect(alive(pid)).toBe(false);
    expect(container.pids()).toEqual([]);
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
