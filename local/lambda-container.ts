/**
 * One emulated Lambda "container" (a function's concurrency), reached over the Lambda Invoke API
 * and the HTTP routes: what `npm start`, `npm run chaos` and `npm run bench` run. Two ways
 * (issue 17):
 * - `frozen` (Lambda's model): execution environments (`local/lambda-env/`, an
 *   `EnvironmentPool`) frozen with SIGSTOP as soon as they have answered and every extension is
 *   done, continued on their next invocation, reset after a timeout; more start while others
 *   finish work after their answer, as Lambda gives a busy environment no invocation. The
 *   server in front of them times nothing: each environment times its invocation from its
 *   delivery, as Lambda does, so a cold start's init does not count against the timeout. The
 *   function sees its caller's request ID. `GET /__local/environments` lists the environments;
 *   a warm-up schedule (EventBridge's Scheduled Event) runs once before the server listens,
 *   where a configuration error shows, and then at its interval;
 * - `always-running`: a process that never stops between invocations (`local/container.ts`),
 *   where a scenario or a benchmark asks for one.
 * Each invocation's response and billed durations are kept (frozen only), so that the work
 * after the response (billed until the freeze) can be summed. Closing ends the environments
 * before the server, since they may release leases as they shut down.
 *
 * Either way each process gets the CPU share Lambda gives `memoryMb` (default the stack's
 * 512 MB: 0.29 of a core) through a cgroup of its own (`local/cpu-share.ts`), where the cgroup
 * v1 `cpu` controller is writable; elsewhere, or with BROKER_LOCAL_CPU_SHARE=off, whole cores.
 * `cpu.description` says which.
 */
import { dirname, join } from 'node:path';
import {
  type CpuGroup,
  type CpuPolicy,
  createCpuGroup,
  defaultCpuPolicy,
  describeCpuShare,
  STACK_MEMORY_MB,
} from './cpu-share.js';
import { invokeAt, startContainer } from './fleet.js';
import { ManagedInstancesPool } from './lambda-env/managed-pool.js';
import { EnvironmentPool, type EnvironmentSnapshot } from './lambda-env/pool.js';
import {
  DEFAULT_LAMBDA,
  type InvokeOutcome,
  scheduledEvent,
  withUrlQualifierOf,
} from './lambda-events.js';
import { type LocalLambdaServer, startLambdaServer } from './lambda-server.js';

/**
 * `managed-instances` (issue 37): Lambda Managed Instances' model, a `ManagedInstancesPool`
 * (`local/lambda-env/managed-pool.ts`) in the place of the frozen pool: worker threads, many
 * invocations at once per environment, never frozen, timeouts reported and not enforced. Its
 * runtime is `managed-bootstrap.mjs`, built beside `bootstrap`.
 */
export type Execution = 'frozen' | 'always-running' | 'managed-instances';

export interface LambdaContainerSpec {
  readonly execution: Execution;
  /** The built Lambda bundle (`broker/index.mjs`). */
  readonly bundle: string;
  /** The built `local/container.mjs` (always-running only). */
  readonly runner?: string;
  /** The built `local/lambda-env/bootstrap.mjs` (frozen only). */
  readonly bootstrap?: string;
  /** The function's environment: nothing else of this process's is passed on. */
  readonly env: Record<string, string>;
  /** The function's timeout (frozen): it bounds an invocation and its work after the response. */
  readonly timeoutMs?: number;
  /** How many environments may exist at once (frozen). Default 4. */
  readonly maxEnvironments?: number;
  /** Keep only the last this many characters of the output (default: all of it; 0: none). */
  readonly outputTail?: number;
  /** Each line the function writes, as it comes (frozen), besides `output()`. */
  readonly onLog?: (line: string) => void;
  /** Where the server listens (frozen). Default 127.0.0.1, port 0 (any free one). */
  readonly host?: string;
  readonly port?: number;
  /** Stop environments between invocations (frozen). Default true. */
  readonly freeze?: boolean;
  /** Shut an environment down after this long idle (frozen). Default the pool's, 5 minutes. */
  readonly idleShutdownMs?: number;
  /** The warm-up schedule (frozen); none by default. */
  readonly warmUp?: WarmUpSchedule;
  /** The function's memory, MB: its CPU share, and AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 512. */
  readonly memoryMb?: number;
  /**
   * The CPU share policy. Default: `defaultCpuPolicy()` (the memory's share where the cgroup
   * controller is writable, whole cores elsewhere or with BROKER_LOCAL_CPU_SHARE=off).
   */
  readonly cpu?: CpuPolicy;
  /** Measure each environment's event-loop delays outside its freezes (frozen; `local/loop-delay.ts`). */
  readonly loopDelay?: boolean;
}

/** The CPU a container's processes run on. */
export interface ContainerCpu {
  readonly policy: CpuPolicy;
  readonly memoryMb: number;
  /** `CPU: 0.29 core per environment (512 MB, cgroup cpu quota)`, or whole cores and why. */
  readonly description: string;
}

/**
 * EventBridge's warm-up rule: its Scheduled Event runs once before the server listens (an
 * init that fails there rejects the start with an {@link InitFailedError}), then every
 * `everyMs` (0: never again).
 */
export interface WarmUpSchedule {
  readonly everyMs: number;
  /** A warm-up that was not run (pool closed, throttled) or failed: one line that says so. */
  readonly onProblem: (line: string) => void;
}

/** The first environment's init failed: the error as Lambda reports an init error. */
export class InitFailedError extends Error {
  readonly errorType: string;
  constructor(errorType: string, errorMessage: string) {
    super(errorMessage);
    this.name = 'InitFailedError';
    this.errorType = errorType;
  }
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

export interface LambdaContainer {
  readonly url: string;
  readonly port: number;
  /** The Lambda Invoke API; a function error comes back as `{ ok: false, errorType }`. */
  invoke(event: unknown): Promise<InvokeOutcome>;
  /**
   * The processes running the function now: one, or more while environments finish work after
   * their answer (an environment may be replaced after a timeout). A fault pauses them all.
   */
  pids(): readonly number[];
  /** What it printed (its log lines; the last `outputTail` characters if set). */
  output(): string;
  /** Its execution environments (none for always-running), those that ended too if asked. */
  environments(options?: { ended?: boolean }): readonly EnvironmentSnapshot[];
  /** Billing so far: invocations that froze already count their billed time, others none. */
  billing(): Billing;
  /** The CPU its processes get. */
  readonly cpu: ContainerCpu;
  /**
   * Settles once every invocation so far, the first `skip` aside, has frozen (zeros for
   * always-running containers).
   */
  settledBilling(skip?: number): Promise<Billing>;
  /** Ends it: an always-running process by SIGKILL, frozen environments by SIGTERM first. */
  close(): Promise<void>;
}

/** Work after the response that counts as keeping the environment thawed (not the `next` calls). */
const KEPT_THAWED_MS = 100;
const NO_BILLING: Billing = { invocations: 0, durationMs: 0, billedMs: 0, keptThawed: 0 };

interface Invocation {
  readonly durationMs: number;
  readonly billedMs: Promise<number>;
  /** Set once the environment froze. */
  billed?: number;
}

const sumOf = (invocations: readonly Invocation[], billed: readonly number[]): Billing =>
  invocations.reduce((total, { durationMs }, i) => {
    const ms = billed[i] ?? 0;
    return {
      invocations: total.invocations + 1,
      durationMs: total.durationMs + durationMs,
      billedMs: total.billedMs + ms,
      keptThawed: total.keptThawed + (ms - durationMs >= KEPT_THAWED_MS ? 1 : 0),
    };
  }, NO_BILLING);

/** One warm-up: a line when it was not run or failed; the init error when its init failed. */
const warmUpOnce = async (pool: Pick<EnvironmentPool, 'invoke'>, { onProblem }: WarmUpSchedule) => {
  const run = await pool.invoke(scheduledEvent(DEFAULT_LAMBDA)).catch((error: Error) => {
    onProblem(`warm-up not run: ${error.name}: ${error.message}`);
    return undefined;
  });
  if (!run || run.outcome.ok) return undefined;
  const { errorType, errorMessage } = run.outcome;
  if (run.initFailed) return new InitFailedError(errorType, errorMessage);
  onProblem(`warm-up failed: ${errorType}: ${errorMessage}`);
  return undefined;
};

const startAlwaysRunning = async (
  spec: LambdaContainerSpec,
  tail: (text: string) => string,
  cpu: ContainerCpu,
): Promise<LambdaContainer> => {
  const { runner, bundle, env } = spec;
  if (!runner) throw new TypeError('startLambdaContainer: always-running needs a runner');
  let group: CpuGroup | undefined;
  const { policy } = cpu;
  const container = await startContainer({
    runner,
    bundle,
    env,
    // Its share from its spawn on, as an environment's; a group that cannot be made leaves it on
    // whole cores (the frozen way records why, per environment).
    onSpawn: (pid) => {
      if (policy.kind !== 'quota') return;
      try {
        group = createCpuGroup(policy, `${process.pid}-always-${pid}`, cpu.memoryMb);
        group.add(pid);
      } catch {
        void group?.remove(0);
        group = undefined;
      }
    },
  }).catch(async (error: unknown) => {
    await group?.remove();
    throw error;
  });
  return {
    cpu,
    url: container.url,
    port: Number(new URL(container.url).port),
    invoke: (event) => container.invoke(event),
    pids: () =>
      container.process.exitCode === null &&
      container.process.signalCode === null &&
      container.process.pid !== undefined
        ? [container.process.pid]
        : [],
    output: () => tail(container.output()),
    environments: () => [],
    billing: () => NO_BILLING,
    settledBilling: async () => NO_BILLING,
    close: async () => {
      await container.kill('SIGKILL');
      await group?.remove();
    },
  };
};

export const startLambdaContainer = async (spec: LambdaContainerSpec): Promise<LambdaContainer> => {
  const tail = (text: string) =>
    spec.outputTail === undefined ? text : spec.outputTail > 0 ? text.slice(-spec.outputTail) : '';
  const memoryMb = spec.memoryMb ?? STACK_MEMORY_MB;
  const policy = spec.cpu ?? defaultCpuPolicy();
  const cpu: ContainerCpu =
    spec.execution === 'managed-instances' && policy.kind === 'quota'
      ? {
          policy,
          memoryMb,
          description:
            'CPU: 1 vCPU per environment (Lambda Managed Instances, 2 GiB per vCPU; cgroup cpu quota)',
        }
      : { policy, memoryMb, description: describeCpuShare(policy, memoryMb) };
  if (spec.execution === 'always-running') return startAlwaysRunning(spec, tail, cpu);
  if (!spec.bootstrap) {
    throw new TypeError(`startLambdaContainer: ${spec.execution} needs a bootstrap`);
  }
  const timeoutMs = spec.timeoutMs ?? DEFAULT_LAMBDA.timeoutMs;
  const invocations: Invocation[] = [];
  let output = '';
  const onLog = (line: string) => {
    output = tail(`${output}${line.endsWith('\n') ? line : `${line}\n`}`);
    spec.onLog?.(line);
  };
  const pool =
    spec.execution === 'managed-instances'
      ? new ManagedInstancesPool({
          bundle: spec.bundle,
          bootstrap: join(dirname(spec.bootstrap), 'managed-bootstrap.mjs'),
          env: spec.env,
          ...(spec.maxEnvironments === undefined ? {} : { maxEnvironments: spec.maxEnvironments }),
          timeoutMs,
          // Its environments have one vCPU each and 2,048 MB, not a share of the stack's memory.
          cpu: policy,
          ...(spec.loopDelay ? { loopDelay: true } : {}),
          onLog,
        })
      : new EnvironmentPool({
          bundle: spec.bundle,
          bootstrap: spec.bootstrap,
          env: spec.env,
          maxEnvironments: spec.maxEnvironments ?? 4,
          timeoutMs,
          memoryMb,
          cpu: policy,
          ...(spec.loopDelay ? { loopDelay: true } : {}),
          ...(spec.freeze === undefined ? {} : { freeze: spec.freeze }),
          ...(spec.idleShutdownMs === undefined ? {} : { idleShutdownMs: spec.idleShutdownMs }),
          onLog,
        });
  let server: LocalLambdaServer;
  let schedule: NodeJS.Timeout | undefined;
  try {
    const { warmUp } = spec;
    if (warmUp) {
      const initFailed = await warmUpOnce(pool, warmUp);
      if (initFailed) throw initFailed;
      if (warmUp.everyMs > 0) {
        schedule = setInterval(() => void warmUpOnce(pool, warmUp), warmUp.everyMs);
      }
    }
    const handler = pool.asHandler({
      onInvocation: ({ durationMs, billedMs }) => {
        const invocation: Invocation = { durationMs, billedMs };
        invocations.push(invocation);
        // Billing ends when the environment freezes, after the answer when work goes on.
        void billedMs.then((ms) => {
          invocation.billed = ms;
        });
      },
    });
    server = await startLambdaServer(handler, {
      ...(spec.host === undefined ? {} : { host: spec.host }),
      ...(spec.port === undefined ? {} : { port: spec.port }),
      // The environment times each invocation from its delivery, as Lambda does: a timer here,
      // started on arrival, would count a cold start's init and answer "Task timed out" for a
      // broker that answered within its deadline (fresh-clone CI runs failed on it: callers
      // held to 500 ms before their deadline, in a new environment whose init took longer).
      // Its HTTP requests through the URL's alias the function is told (BROKER_URL_QUALIFIER).
      settings: withUrlQualifierOf(
        { ...DEFAULT_LAMBDA, timeoutMs, timedByEnvironment: true },
        spec.env,
      ),
      localRoutes: {
        // Local only (no such route in AWS): which environments exist, and in which state.
        '/__local/environments': () =>
          pool.environments().map(({ id, pid, state, stats }) => ({
            id,
            pid,
            state,
            invocations: stats.invocations,
          })),
      },
    });
  } catch (error) {
    clearInterval(schedule);
    await pool.close();
    throw error;
  }
  const { url, port } = server;
  return {
    url,
    port,
    cpu,
    invoke: (event) => invokeAt(url, event),
    pids: () =>
      pool
        .environments()
        .filter((e) => e.state !== 'ended' && e.state !== 'shutting-down')
        .map((e) => e.pid),
    output: () => output,
    environments: (options) => pool.environments(options),
    billing: () =>
      sumOf(
        invocations,
        invocations.map((i) => i.billed ?? 0),
      ),
    settledBilling: async (skip = 0) => {
      const counted = invocations.slice(skip);
      return sumOf(counted, await Promise.all(counted.map((i) => i.billedMs)));
    },
    // The environments first: they may release leases in DynamoDB as they shut down.
    close: async () => {
      clearInterval(schedule);
      try {
        await pool.close();
      } finally {
        await server.close();
      }
    },
  };
};
