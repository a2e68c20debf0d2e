/**
 * The chaos suite's containers, two ways (issue 17):
 * - `frozen` (the default, and Lambda's execution model): one execution environment
 *   (`local/lambda-env/`) per container, frozen (SIGSTOP) as soon as it has answered and every
 *   extension is done, continued on its next invocation, reset after a timeout;
 * - `always-running`: a process that never stops between invocations (`local/container.ts`),
 *   for a scenario that says it needs one, and for comparison.
 * Either way the harness reaches it over the Lambda Invoke API on 127.0.0.1, and may pause its
 * process (a fault).
 */

import { startContainer } from '../local/fleet.js';
import { EnvironmentPool } from '../local/lambda-env/pool.js';
import { DEFAULT_LAMBDA } from '../local/lambda-events.js';
import { startLambdaServer } from '../local/lambda-server.js';

export type Execution = 'frozen' | 'always-running';

export interface ChaosContainer {
  readonly url: string;
  /**
   * The processes running the function now: one, or more while environments finish work after
   * their answer (an environment may be replaced after a timeout). A fault pauses them all.
   */
  pids(): readonly number[];
  output(): string;
  /** Ends it (its environments get SIGTERM first when frozen ones, as at a Lambda shutdown). */
  close(): Promise<void>;
  /** Billed durations and invocations so far (frozen containers only). */
  billing(): {
    readonly invocations: number;
    readonly billedMs: number;
    readonly durationMs: number;
  };
}

export interface ChaosContainerSpec {
  readonly execution: Execution;
  readonly bundle: string;
  /** `local/container.mjs` (always-running). */
  readonly runner: string;
  /** `local/lambda-env/bootstrap.mjs` (frozen). */
  readonly bootstrap: string;
  readonly env: Record<string, string>;
  readonly timeoutMs: number;
}

export const startChaosContainer = async (spec: ChaosContainerSpec): Promise<ChaosContainer> => {
  if (spec.execution === 'always-running') {
    const container = await startContainer(spec);
    return {
      url: container.url,
      pids: () =>
        container.process.exitCode === null && container.process.pid !== undefined
          ? [container.process.pid]
          : [],
      output: () => container.output(),
      close: () => container.kill('SIGKILL'),
      billing: () => ({ invocations: 0, billedMs: 0, durationMs: 0 }),
    };
  }
  let output = '';
  const totals = { invocations: 0, billedMs: 0, durationMs: 0 };
  const pool = new EnvironmentPool({
    bundle: spec.bundle,
    bootstrap: spec.bootstrap,
    env: spec.env,
    // One caller per container, and the warm-ups: one environment, and more while others
    // finish their work after an answer (Lambda gives a busy environment no invocation: it
    // starts another). Two were too few when a refresh held one for the function's timeout
    // and a warm-up another: the caller queued past its deadline.
    maxEnvironments: 4,
    timeoutMs: spec.timeoutMs,
    onLog: (line) => {
      output += line.endsWith('\n') ? line : `${line}\n`;
    },
  });
  const server = await startLambdaServer(
    async (event) => {
      const { outcome, durationMs, billedMs } = await pool.invoke(event);
      totals.invocations += 1;
      totals.durationMs += durationMs;
      // Billing ends when the environment freezes, after the answer when work goes on.
      void billedMs.then((ms) => {
        totals.billedMs += ms;
      });
      if (outcome.ok) return outcome.result;
      const error = new Error(outcome.errorMessage);
      error.name = outcome.errorType;
      throw error;
    },
    // The environment times each invocation from its delivery, as Lambda does: a timer here,
    // started on arrival, would count a cold start's init and answer "Task timed out" for a
    // broker that answered within its deadline (fresh-clone CI runs failed on it: callers held
    // to 500 ms before their deadline, in a new environment whose init took longer than that).
    { settings: { ...DEFAULT_LAMBDA, timeoutMs: spec.timeoutMs, timedByEnvironment: true } },
  );
  return {
    url: server.url,
    pids: () =>
      pool
        .environments()
        .filter((e) => e.state !== 'ended' && e.state !== 'shutting-down')
        .map((e) => e.pid),
    output: () => output,
    close: async () => {
      await pool.close();
      await server.close();
    },
    billing: () => totals,
  };
};
