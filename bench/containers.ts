/**
 * The benchmark's containers, two ways (issue 17), each reached over the Lambda Invoke API on
 * 127.0.0.1:
 * - `always-running`: a process that never stops between invocations (`local/container.ts`),
 *   what the benchmark ran until now;
 * - `frozen`: Lambda's model, one execution environment (`local/lambda-env/`) frozen with
 *   SIGSTOP between invocations, as `chaos/containers.ts` runs them: an `EnvironmentPool` of
 *   one environment behind `startLambdaServer`. Each invocation's response and billed
 *   durations are kept, so that the work after the response (billed until the freeze) can be
 *   summed once every environment has frozen.
 */
import { startContainer } from '../local/fleet.js';
import { EnvironmentPool } from '../local/lambda-env/pool.js';
import { DEFAULT_LAMBDA, type InvokeOutcome } from '../local/lambda-events.js';
import { startLambdaServer } from '../local/lambda-server.js';

export type Execution = 'always-running' | 'frozen';

export interface BenchContainerSpec {
  readonly execution: Execution;
  readonly bundle: string;
  /** `local/container.mjs` (always-running). */
  readonly runner: string;
  /** `local/lambda-env/bootstrap.mjs` (frozen). */
  readonly bootstrap: string;
  readonly env: Record<string, string>;
  /** The function's timeout (frozen): it bounds an invocation and its work after the response. */
  readonly timeoutMs?: number;
}

/** Billed time of a frozen container's invocations, in all (ms). */
export interface Billing {
  readonly invocations: number;
  /** From delivery to the runtime's response. */
  readonly durationMs: number;
  /** From delivery to the freeze, in whole ms rounded up: work after the response included. */
  readonly billedMs: number;
  /** Invocations whose environment stayed thawed 100 ms or more after its response. */
  readonly keptThawed: number;
}

export interface BenchContainer {
  /** The Lambda Invoke API; a function error comes back as `{ ok: false, errorType }`. */
  invoke(event: unknown): Promise<InvokeOutcome>;
  /**
   * Settles once every invocation so far, the first `skip` aside, has frozen (zeros for
   * always-running containers).
   */
  billing(skip?: number): Promise<Billing>;
  /** The last lines it wrote, for a failure's message. */
  output(): string;
  close(): Promise<void>;
}

const INVOKE_PATH = '/2015-03-31/functions/token-broker/invocations';
/** Work after the response that counts as keeping the environment thawed (not the `next` calls). */
const KEPT_THAWED_MS = 100;
const OUTPUT_TAIL = 4096;

const invokeAt = async (url: string, event: unknown): Promise<InvokeOutcome> => {
  const response = await fetch(`${url}${INVOKE_PATH}`, {
    method: 'POST',
    body: JSON.stringify(event),
  });
  const body = (await response.json()) as Record<string, unknown>;
  return response.headers.get('x-amz-function-error')
    ? { ok: false, errorType: String(body.errorType), errorMessage: String(body.errorMessage) }
    : { ok: true, result: body };
};

export const startBenchContainer = async (spec: BenchContainerSpec): Promise<BenchContainer> => {
  if (spec.execution === 'always-running') {
    const container = await startContainer(spec);
    return {
      invoke: (event) => container.invoke(event),
      billing: async () => ({ invocations: 0, durationMs: 0, billedMs: 0, keptThawed: 0 }),
      output: () => container.output().slice(-OUTPUT_TAIL),
      close: () => container.kill('SIGKILL'),
    };
  }
  const timeoutMs = spec.timeoutMs ?? DEFAULT_LAMBDA.timeoutMs;
  const invocations: { durationMs: number; billedMs: Promise<number> }[] = [];
  let output = '';
  const pool = new EnvironmentPool({
    bundle: spec.bundle,
    bootstrap: spec.bootstrap,
    env: spec.env,
    // One container: one environment, and a second while the first finishes its work after an
    // answer (Lambda gives a busy environment no invocation), as chaos/containers.ts has it.
    maxEnvironments: 2,
    timeoutMs,
    onLog: (line) => {
      output = `${output}${line}\n`.slice(-OUTPUT_TAIL);
    },
  });
  let server: Awaited<ReturnType<typeof startLambdaServer>> | undefined;
  try {
    server = await startLambdaServer(
      async (event) => {
        const { outcome, durationMs, billedMs } = await pool.invoke(event);
        invocations.push({ durationMs, billedMs });
        if (outcome.ok) return outcome.result;
        const error = new Error(outcome.errorMessage);
        error.name = outcome.errorType;
        throw error;
      },
      { settings: { ...DEFAULT_LAMBDA, timeoutMs } },
    );
  } catch (error) {
    await pool.close();
    throw error;
  }
  const { url } = server;
  const close = server.close;
  return {
    invoke: (event) => invokeAt(url, event),
    billing: async (skip = 0) => {
      const counted = invocations.slice(skip);
      const billed = await Promise.all(counted.map((i) => i.billedMs));
      return counted.reduce(
        (total, { durationMs }, i) => {
          const ms = billed[i] ?? 0;
          return {
            invocations: total.invocations + 1,
            durationMs: total.durationMs + durationMs,
            billedMs: total.billedMs + ms,
            keptThawed: total.keptThawed + (ms - durationMs >= KEPT_THAWED_MS ? 1 : 0),
          };
        },
        { invocations: 0, durationMs: 0, billedMs: 0, keptThawed: 0 },
      );
    },
    output: () => output,
    close: async () => {
      try {
        await pool.close();
      } finally {
        await close();
      }
    },
  };
};
