/**
 * One emulated Lambda Managed Instances execution environment (issue 37): a runtime process
 * (`node managed-bootstrap.mjs <bundle>`: worker threads, each running many invocations at once)
 * and its Runtime and Extensions API (managed-api.ts). Where it differs from environment.ts
 * (Lambda's own model), as AWS's "Lambda Managed Instances execution environment" page says:
 * - never frozen: the process runs from its init to its shutdown;
 * - up to `maxConcurrency` invocations at once (AWS_LAMBDA_MAX_CONCURRENCY); more wait for a
 *   worker to ask for them;
 * - a timeout is reported, not enforced: at the deadline the caller is answered
 *   `Sandbox.Timedout`, and the function goes on (its late answer is dropped); neither the
 *   environment nor its other invocations are touched;
 * - `AWS_LAMBDA_INITIALIZATION_TYPE=lambda-managed-instances`, `AWS_LAMBDA_MAX_CONCURRENCY`;
 * - shutdown: SHUTDOWN to the extensions registered for it, SIGTERM, SIGKILL at the deadline
 *   (SIGKILL at once with no extension, as environment.ts). A runtime that exits fails what it
 *   was running and ends the environment.
 * Its CPU is its vCPUs (one at 2 GiB per vCPU), not a share of its memory.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { type ChildProcess, spawn } from 'node:child_process';
import { randomBytes, randomUUID } from 'node:crypto';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, dirname, extname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type CpuGroup, type CpuPolicy, createCpuGroup, MB_PER_VCPU } from '../cpu-share.js';
import type { InvokeOutcome } from '../lambda-events.js';
import { LOOP_DELAY_VARIABLE, type LoopDelay, netDelays, readGaps } from '../loop-delay.js';
import type {
  CurrentInvocation,
  EnvironmentAnswer,
  EnvironmentCpu,
  EnvironmentState,
  EnvironmentStats,
  ExecutionEnvironment,
  Failure,
  FunctionSettings,
  InitResult,
  InvokeOptions,
  ShutdownReason,
  ShutdownRecord,
} from './environment.js';
import { startManagedApi } from './managed-api.js';

export interface ManagedEnvironmentOptions {
  readonly id: string;
  /** Path of the built `managed-bootstrap.mjs`. */
  readonly bootstrap: string;
  readonly bundle: string;
  readonly env: Readonly<Record<string, string>>;
  readonly settings: FunctionSettings;
  /** Invocations at once (AWS_LAMBDA_MAX_CONCURRENCY). */
  readonly maxConcurrency: number;
  /** Worker threads (AWS_LAMBDA_NODEJS_WORKER_COUNT) unless the function's env sets it. */
  readonly workers: number;
  /** vCPUs of the environment: its CPU quota where the cgroup controller is writable. */
  readonly vcpus: number;
  readonly initTimeoutMs: number;
  readonly shutdownDeadlineMs: number;
  readonly onLog?: ((line: string) => void) | undefined;
  /** A slot is free again (an invocation was answered or timed out). */
  readonly onSlot?: ((environment: ManagedEnvironment) => void) | undefined;
  readonly onEnded?: ((environment: ManagedEnvironment) => void) | undefined;
  readonly cpu?: CpuPolicy | undefined;
  readonly loopDelay?: boolean | undefined;
}

export interface ManagedEnvironment extends ExecutionEnvironment {
  /** Invocations delivered or waiting for a worker, not answered yet. */
  inFlight(): number;
  /** Every invocation it runs now. */
  invocations(): readonly CurrentInvocation[];
}

const OUTPUT_TAIL = 64 * 1024;

const running = new Set<ChildProcess>();
let guarded = false;
const guardExit = () => {
  if (guarded) return;
  guarded = true;
  process.once('exit', () => {
    for (const child of running) child.kill('SIGKILL');
  });
};

const traceHeader = () =>
  `Root=1-${Math.floor(Date.now() / 1000).toString(16)}-${randomBytes(12).toString('hex')};Parent=${randomBytes(8).toString('hex')};Sampled=0`;

const describeExit = ({ code, signal }: { code: number | null; signal: NodeJS.Signals | null }) =>
  signal ? `signal: ${signal === 'SIGKILL' ? 'killed' : signal}` : `exit status ${code}`;

interface Invocation {
  readonly requestId: string;
  readonly started: number;
  readonly deadlineAt: number;
  readonly scope: <R>(fn: () => R) => R;
  readonly timer: NodeJS.Timeout;
  readonly payload: string;
  /** `context.invokedFunctionArn`: the qualifier the caller named, if any. */
  readonly invokedFunctionArn: string;
  delivered: boolean;
  readonly answer: (outcome: InvokeOutcome) => void;
}

/** Starts an environment and runs its init; it takes invocations when this resolves `ok`. */
export const startManagedEnvironment = async (
  options: ManagedEnvironmentOptions,
): Promise<InitResult & { readonly environment: ManagedEnvironment }> => {
  const { settings } = options;
  const handler = `${basename(options.bundle, extname(options.bundle))}.handler`;
  const arn = `arn:aws:lambda:${settings.region}:${settings.accountId}:function:${settings.functionName}`;
  let state: EnvironmentState = 'initializing';
  const stats = { invocations: 0, freezes: 0, thaws: 0, timeouts: 0 };
  const invocations = new Map<string, Invocation>();
  let ending: Promise<void> | undefined;
  let record: ShutdownRecord | undefined;
  let exit: { code: number | null; signal: NodeJS.Signals | null } | undefined;
  let output = '';
  let initDone: (failure: Failure | undefined) => void = () => undefined;
  const initialized = new Promise<Failure | undefined>((resolve) => {
    initDone = resolve;
  });

  const settleState = () => {
    if (state === 'busy' || state === 'idle') state = invocations.size > 0 ? 'busy' : 'idle';
  };

  /** Hands waiting invocations to waiting workers, oldest first. */
  const pump = () => {
    for (const invocation of invocations.values()) {
      if (invocation.delivered) continue;
      const delivered = api.deliver({
        requestId: invocation.requestId,
        deadlineMs: invocation.deadlineAt,
        invokedFunctionArn: invocation.invokedFunctionArn,
        traceId: traceHeader(),
        payload: invocation.payload,
      });
      if (!delivered) return;
      invocation.delivered = true;
    }
  };

  const finish = (requestId: string, outcome: InvokeOutcome) => {
    const invocation = invocations.get(requestId);
    if (!invocation) return;
    invocations.delete(requestId);
    clearTimeout(invocation.timer);
    invocation.answer(outcome);
    settleState();
    options.onSlot?.(environment);
  };

  const fail = (failure: Failure, reason: ShutdownReason) => {
    if (state === 'initializing') initDone(failure);
    void shutdown(reason);
  };

  const api = await startManagedApi(
    {
      functionName: settings.functionName,
      functionVersion: '$LATEST',
      handler,
      accountId: settings.accountId,
    },
    {
      onInitialized: () => {
        if (state !== 'initializing') return;
        clearTimeout(initTimer);
        state = 'idle';
        initDone(undefined);
      },
      onWorkerWaiting: () => pump(),
      onResponse: finish,
      onFailure: (failure) => fail(failure, 'failure'),
    },
  );

  const loopDelayFile = options.loopDelay
    ? join(tmpdir(), `token-broker-loop-delay-${process.pid}-${options.id}`)
    : undefined;
  let delays: readonly LoopDelay[] | undefined;

  const child = spawn(process.execPath, [options.bootstrap, options.bundle], {
    cwd: dirname(options.bundle),
    env: {
      PATH: process.env.PATH ?? '',
      AWS_LAMBDA_NODEJS_WORKER_COUNT: String(options.workers),
      ...options.env,
      AWS_LAMBDA_FUNCTION_NAME: settings.functionName,
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(settings.memoryMb),
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${settings.functionName}`,
      AWS_LAMBDA_INITIALIZATION_TYPE: 'lambda-managed-instances',
      AWS_LAMBDA_MAX_CONCURRENCY: String(options.maxConcurrency),
      AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs24.x',
      AWS_REGION: settings.region,
      AWS_DEFAULT_REGION: settings.region,
      LAMBDA_TASK_ROOT: dirname(options.bundle),
      _HANDLER: handler,
      AWS_LAMBDA_RUNTIME_API: api.address,
      ...(loopDelayFile ? { [LOOP_DELAY_VARIABLE]: loopDelayFile } : {}),
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const spawnedAt = performance.now();
  let group: CpuGroup | undefined;
  let cpu: EnvironmentCpu = { kind: 'whole-cores', reason: 'no CPU share asked' };
  if (options.cpu?.kind === 'whole-cores')
    cpu = { kind: 'whole-cores', reason: options.cpu.reason };
  if (options.cpu?.kind === 'quota' && child.pid !== undefined) {
    try {
      // Its vCPUs: a quota of that many cores (1,769 MB is one vCPU's share in cpu-share.ts).
      group = createCpuGroup(
        options.cpu,
        `${process.pid}-${options.id}`,
        options.vcpus * MB_PER_VCPU,
      );
      group.add(child.pid);
      cpu = { kind: 'quota', group: group.path, quotaUs: group.quotaUs, periodUs: group.periodUs };
    } catch (error) {
      void group?.remove(0);
      group = undefined;
      cpu = {
        kind: 'whole-cores',
        reason: `cgroup not applied: ${(error as NodeJS.ErrnoException).code ?? (error as Error).message}`,
      };
    }
  }
  guardExit();
  running.add(child);
  const exited = new Promise<{ code: number | null; signal: NodeJS.Signals | null }>((resolve) => {
    child.once('close', (code, signal) => resolve({ code, signal }));
    child.once('error', () => resolve({ code: null, signal: null }));
  });
  void exited.then((status) => {
    exit = status;
    running.delete(child);
    if (loopDelayFile) {
      // Never frozen: every gap is a delay.
      delays = netDelays(readGaps(loopDelayFile), []);
      rmSync(loopDelayFile, { force: true });
    }
    if (group && cpu.kind === 'quota') {
      const ended = cpu;
      void group.remove().then((throttling) => {
        if (throttling) cpu = { ...ended, throttling };
      });
    }
    if (state === 'shutting-down' || state === 'ended') return;
    fail(
      {
        errorType: 'Runtime.ExitError',
        errorMessage: `Error: Runtime exited with error: ${describeExit(status)}`,
      },
      'failure',
    );
  });

  for (const stream of [child.stdout, child.stderr]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      output = (output + chunk).slice(-OUTPUT_TAIL);
      const lines = (rest + chunk).split('\n');
      rest = lines.pop() ?? '';
      if (!options.onLog || lines.length === 0) return;
      for (const line of lines) {
        // A line names its invocation only by its content here (many run at once): the one whose
        // request ID it carries, as Powertools writes it, else none.
        const owner = [...invocations.values()].find((i) => line.includes(i.requestId));
        if (owner) owner.scope(() => options.onLog?.(line));
        else options.onLog(line);
      }
    });
    stream.on('end', () => {
      if (rest !== '') options.onLog?.(rest);
    });
  }

  const initTimer = setTimeout(() => {
    if (state !== 'initializing') return;
    fail(
      {
        errorType: 'Sandbox.Timedout',
        errorMessage: `Init timed out after ${(options.initTimeoutMs / 1000).toFixed(2)} seconds`,
      },
      'timeout',
    );
  }, options.initTimeoutMs);

  const shutdown = (reason: ShutdownReason = 'spindown'): Promise<void> => {
    ending ??= (async () => {
      state = 'shutting-down';
      clearTimeout(initTimer);
      const signals: NodeJS.Signals[] = [];
      const signal = (name: NodeJS.Signals) => {
        if (exit) return;
        child.kill(name);
        signals.push(name);
      };
      if (!exit) {
        if (api.extensions().length === 0) {
          signal('SIGKILL');
        } else {
          api.shutdown(reason, Date.now() + options.shutdownDeadlineMs);
          signal('SIGTERM');
          const deadline = new AbortController();
          const first = await Promise.race([
            exited.then(() => 'exited' as const),
            sleep(options.shutdownDeadlineMs, 'deadline' as const, { signal: deadline.signal }),
          ]);
          deadline.abort();
          if (first === 'deadline') signal('SIGKILL');
        }
      }
      const status = await exited;
      for (const invocation of [...invocations.values()]) {
        finish(invocation.requestId, {
          ok: false,
          errorType: 'Runtime.ExitError',
          errorMessage: `RequestId: ${invocation.requestId} Error: Runtime exited with error: ${describeExit(status)}`,
        });
      }
      await api.close();
      record = { reason, signals, exitCode: status.code, exitSignal: status.signal };
      state = 'ended';
      options.onEnded?.(environment);
    })();
    return ending;
  };

  const invoke = (
    event: unknown,
    invokeOptions: InvokeOptions = {},
  ): Promise<EnvironmentAnswer> => {
    if (state === 'shutting-down' || state === 'ended') {
      const requestId = randomUUID();
      return Promise.resolve({
        outcome: {
          ok: false,
          errorType: 'Runtime.ExitError',
          errorMessage: `RequestId: ${requestId} Error: Runtime exited`,
        },
        requestId,
        durationMs: 0,
        billedMs: Promise.resolve(0),
      });
    }
    if (state === 'initializing' || invocations.size >= options.maxConcurrency) {
      return Promise.reject(
        new Error(
          `Environment ${options.id} is ${state} with ${invocations.size} invocations: no slot`,
        ),
      );
    }
    const requestId = invokeOptions.requestId || randomUUID();
    stats.invocations += 1;
    state = 'busy';
    return new Promise<EnvironmentAnswer>((resolve) => {
      const started = performance.now();
      const deadlineAt = Date.now() + settings.timeoutMs;
      const answer = (outcome: InvokeOutcome) => {
        const durationMs = performance.now() - started;
        // Billed by the instance, not the invocation: its duration is what it took.
        resolve({
          outcome,
          requestId,
          durationMs,
          billedMs: Promise.resolve(Math.ceil(durationMs)),
        });
      };
      invocations.set(requestId, {
        requestId,
        started,
        deadlineAt,
        scope: AsyncLocalStorage.snapshot(),
        payload: JSON.stringify(event === undefined ? null : event),
        invokedFunctionArn: invokeOptions.invokedFunctionArn ?? arn,
        delivered: false,
        answer,
        // Reported, not enforced: the caller hears of it, the function goes on.
        timer: setTimeout(() => {
          stats.timeouts += 1;
          api.forget(requestId);
          finish(requestId, {
            ok: false,
            errorType: 'Sandbox.Timedout',
            errorMessage: `Task timed out after ${(settings.timeoutMs / 1000).toFixed(2)} seconds`,
          });
        }, settings.timeoutMs),
      });
      pump();
    });
  };

  const current = (): CurrentInvocation[] =>
    [...invocations.values()].map((i) => ({
      requestId: i.requestId,
      deadlineAt: i.deadlineAt,
      answered: false,
    }));

  const environment: ManagedEnvironment = {
    id: options.id,
    pid: child.pid ?? -1,
    state: () => state,
    stats: () => ({ ...stats }) as EnvironmentStats,
    extensions: () => api.extensions(),
    shutdownRecord: () => record,
    cpu: () => cpu,
    current: () => current()[0],
    invocations: current,
    inFlight: () => invocations.size,
    loopDelays: () => delays,
    output: () => output,
    invoke,
    shutdown,
  };

  const failure = await initialized;
  const initMs = performance.now() - spawnedAt;
  if (failure) {
    await shutdown('failure');
    return { ok: false, environment, failure, initMs };
  }
  return { ok: true, environment, initMs };
};
