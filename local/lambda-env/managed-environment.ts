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
 * Its CPU is its vCPUs (one at 2 GiB per vCPU), not a share of its memory. The process itself
 * (spawn, CPU group, output, its end) is runtime-process.ts, as for environment.ts.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { MB_PER_VCPU } from '../cpu-share.js';
import type { InvokeOutcome } from '../lambda-events.js';
import type {
  CommonEnvironmentOptions,
  CurrentInvocation,
  EnvironmentAnswer,
  EnvironmentState,
  EnvironmentStats,
  ExecutionEnvironment,
  Failure,
  InitResult,
  InvokeOptions,
  RunningInvocation,
  ShutdownReason,
  ShutdownRecord,
} from './environment.js';
import {
  exitedAnswer,
  functionArn,
  functionMetadata,
  runtimeExited,
  timedOut,
  traceHeader,
} from './lambda-wording.js';
import { startManagedApi } from './managed-api.js';
import { endEnvironment, initGate, spawnRuntime } from './runtime-process.js';

/** `bootstrap` is `managed-bootstrap.mjs`; `cpu`'s quota is its vCPUs. */
export interface ManagedEnvironmentOptions extends CommonEnvironmentOptions<ManagedEnvironment> {
  /** Invocations at once (AWS_LAMBDA_MAX_CONCURRENCY). */
  readonly maxConcurrency: number;
  /** Worker threads (AWS_LAMBDA_NODEJS_WORKER_COUNT) unless the function's env sets it. */
  readonly workers: number;
  /** vCPUs of the environment: its CPU quota where the cgroup controller is writable. */
  readonly vcpus: number;
  /** A slot is free again (an invocation was answered or timed out). */
  readonly onSlot?: ((environment: ManagedEnvironment) => void) | undefined;
}

export interface ManagedEnvironment extends ExecutionEnvironment {
  /** Invocations delivered or waiting for a worker, not answered yet. */
  inFlight(): number;
  /** Every invocation it runs now. */
  invocations(): readonly CurrentInvocation[];
}

interface Invocation extends RunningInvocation {
  readonly payload: string;
  /** `context.invokedFunctionArn`: the qualifier the caller named, if any. */
  readonly invokedFunctionArn: string;
  delivered: boolean;
}

/** Starts an environment and runs its init; it takes invocations when this resolves `ok`. */
export const startManagedEnvironment = async (
  options: ManagedEnvironmentOptions,
): Promise<InitResult & { readonly environment: ManagedEnvironment }> => {
  const { settings } = options;
  const arn = functionArn(settings);
  let state: EnvironmentState = 'initializing';
  const stats = { invocations: 0, freezes: 0, thaws: 0, timeouts: 0 };
  const invocations = new Map<string, Invocation>();
  let ending: Promise<void> | undefined;
  let record: ShutdownRecord | undefined;

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
    if (state === 'initializing') init.end(failure);
    void shutdown(reason);
  };

  const api = await startManagedApi(functionMetadata(settings, options.bundle), {
    onInitialized: () => {
      if (state !== 'initializing') return;
      state = 'idle';
      init.end();
    },
    onWorkerWaiting: () => pump(),
    onResponse: finish,
    onFailure: (failure) => fail(failure, 'failure'),
  });

  const runtime = spawnRuntime(options, {
    api: api.address,
    defaults: { AWS_LAMBDA_NODEJS_WORKER_COUNT: String(options.workers) },
    reserved: {
      AWS_LAMBDA_INITIALIZATION_TYPE: 'lambda-managed-instances',
      AWS_LAMBDA_MAX_CONCURRENCY: String(options.maxConcurrency),
    },
    // Its vCPUs: a quota of that many cores (1,769 MB is one vCPU's share in cpu-share.ts).
    cpuMemoryMb: options.vcpus * MB_PER_VCPU,
    // A line names its invocation only by its content here (many run at once): the one whose
    // request ID it carries, as Powertools writes it, else none.
    scopeOf: (line) => [...invocations.values()].find((i) => line.includes(i.requestId))?.scope,
  });
  const init = initGate(options.initTimeoutMs, (failure) => {
    if (state === 'initializing') fail(failure, 'timeout');
  });
  void runtime.exited.then((status) => {
    if (state === 'shutting-down' || state === 'ended') return;
    fail(runtimeExited(status), 'failure');
  });

  const shutdown = (reason: ShutdownReason = 'spindown'): Promise<void> => {
    ending ??= (async () => {
      state = 'shutting-down';
      init.cancel();
      record = await endEnvironment(
        runtime,
        api,
        reason,
        (status) => {
          for (const { requestId } of [...invocations.values()]) {
            finish(requestId, { ok: false, ...runtimeExited(status, requestId) });
          }
        },
        () => api.shutdown(reason, Date.now() + options.shutdownDeadlineMs),
      );
      state = 'ended';
      options.onEnded?.(environment);
    })();
    return ending;
  };

  const current = (): CurrentInvocation[] =>
    [...invocations.values()].map((i) => ({
      requestId: i.requestId,
      deadlineAt: i.deadlineAt,
      answered: false,
    }));

  const invoke = (
    event: unknown,
    invokeOptions: InvokeOptions = {},
  ): Promise<EnvironmentAnswer> => {
    if (state === 'shutting-down' || state === 'ended') return exitedAnswer();
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
          finish(requestId, { ok: false, ...timedOut(settings.timeoutMs) });
        }, settings.timeoutMs),
      });
      pump();
    });
  };

  const environment: ManagedEnvironment = {
    id: options.id,
    pid: runtime.pid,
    state: () => state,
    stats: () => ({ ...stats }) as EnvironmentStats,
    extensions: () => api.extensions(),
    shutdownRecord: () => record,
    cpu: runtime.cpu,
    current: () => current()[0],
    invocations: current,
    inFlight: () => invocations.size,
    loopDelays: runtime.loopDelays,
    output: runtime.output,
    invoke,
    shutdown,
  };

  return init.result(runtime, environment, shutdown);
};
