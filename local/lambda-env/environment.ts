/**
 * One Lambda execution environment: a runtime process (`node bootstrap.mjs <bundle>`, with the
 * function's environment only) and its Runtime and Extensions API (api-server.ts).
 *
 * Lifecycle, as the Lambda Developer Guide's "Lambda execution environment lifecycle" and
 * "Lambda Extensions API" pages describe it:
 * - init: the bundle is imported, its internal extensions register; init ends when the runtime
 *   and every registered extension wait on their `next`;
 * - the environment is frozen (SIGSTOP) whenever they all wait: after init and after each
 *   invocation. It is continued (SIGCONT) only to be given its next invocation, or to shut down;
 * - an invocation's answer goes back as soon as the runtime posts it, even while an extension
 *   keeps working after the response (the environment stays thawed until it calls `next`);
 * - billed duration runs from delivery until the environment froze again (work after the
 *   response included); the function's timeout bounds that whole span;
 * - a timeout, a runtime that exits, or an init/exit error resets the environment: here it
 *   ends, and the next invocation starts a new one (Lambda re-initialises in place, which a
 *   caller cannot tell apart);
 * - shutdown: with no extension registered, the runtime is killed at once (the guide: 0 ms;
 *   the emulator: SIGKILL "as no agents are registered"); with one, it gets SIGTERM and has
 *   `shutdownDeadlineMs` (the guide: 500 ms with an internal extension) before SIGKILL.
 *   Internal extensions cannot register for SHUTDOWN, so none is ever sent.
 * The process itself (spawn, CPU group, output, freezes, its end) is runtime-process.ts, shared
 * with managed-environment.ts.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import type { CpuPolicy, CpuThrottling } from '../cpu-share.js';
import type { InvokeOutcome } from '../lambda-events.js';
import type { LoopDelay } from '../loop-delay.js';
import { startRuntimeApi } from './api-server.js';
import {
  exitedAnswer,
  functionArn,
  functionMetadata,
  logStream,
  runtimeExited,
  timedOut,
  traceHeader,
} from './lambda-wording.js';
import { endEnvironment, initGate, spawnRuntime } from './runtime-process.js';

/**
 * - `initializing`: the bundle is loading;
 * - `busy`: has an invocation and has not answered it;
 * - `after-response`: has answered, and an extension is still working;
 * - `frozen`: stopped (SIGSTOP) until its next invocation;
 * - `idle`: waiting for its next invocation without being stopped (`freeze: false`);
 * - `shutting-down`, `ended`.
 */
export type EnvironmentState =
  | 'initializing'
  | 'busy'
  | 'after-response'
  | 'frozen'
  | 'idle'
  | 'shutting-down'
  | 'ended';

/** The Extensions API's shutdown reasons. */
export type ShutdownReason = 'spindown' | 'timeout' | 'failure';

export interface FunctionSettings {
  readonly functionName: string;
  readonly region: string;
  readonly accountId: string;
  readonly memoryMb: number;
  readonly timeoutMs: number;
}

/** What an environment of either model (this one, managed-environment.ts) is started with. */
export interface CommonEnvironmentOptions<E> {
  readonly id: string;
  /** Path of the built runtime (`bootstrap.mjs`, `managed-bootstrap.mjs`). */
  readonly bootstrap: string;
  /** Path of the function's bundle (an ES module exporting `handler`). */
  readonly bundle: string;
  /** The function's environment variables: nothing else of this process's is passed on but PATH. */
  readonly env: Readonly<Record<string, string>>;
  readonly settings: FunctionSettings;
  readonly initTimeoutMs: number;
  /** How long a runtime has between SIGTERM and SIGKILL. */
  readonly shutdownDeadlineMs: number;
  /**
   * Each line the process writes (stdout and stderr). A line of an invocation's is emitted in
   * the async context `invoke` was called in, so that AsyncLocalStorage-based capture (the
   * Invoke API's `Tail`) counts it as that invocation's.
   */
  readonly onLog?: ((line: string) => void) | undefined;
  /** The environment has ended (its process is gone). */
  readonly onEnded?: ((environment: E) => void) | undefined;
  /**
   * Its CPU (`local/cpu-share.ts`): with `quota`, the process goes into a cgroup of its own
   * right after its spawn, removed when it ends. Default: none (whole cores).
   */
  readonly cpu?: CpuPolicy | undefined;
  /**
   * Measure how late the process's event loop runs outside its freezes (`local/loop-delay.ts`):
   * `loopDelays()` once it has ended. Default false.
   */
  readonly loopDelay?: boolean | undefined;
}

/** `cpu`'s quota is Lambda's CPU share for `settings.memoryMb`. */
export interface EnvironmentOptions extends CommonEnvironmentOptions<ExecutionEnvironment> {
  /** Stop the process between invocations (false: leave it running, for comparison). */
  readonly freeze: boolean;
  /**
   * The environment waits for its next invocation again (after an invocation, not after init).
   * A line that arrives while it runs an invocation is that invocation's (`onLog`).
   */
  readonly onReady?: ((environment: ExecutionEnvironment) => void) | undefined;
}

/** An invocation under way in an environment. */
export interface CurrentInvocation {
  readonly requestId: string;
  /** Its deadline (the function's timeout from its delivery), epoch ms. */
  readonly deadlineAt: number;
  /** Its answer went back: what runs now is work after the response. */
  readonly answered: boolean;
}

/** The CPU an environment ran on. */
export type EnvironmentCpu =
  | {
      readonly kind: 'quota';
      /** Its cgroup (removed once it ended). */
      readonly group: string;
      readonly quotaUs: number;
      readonly periodUs: number;
      /** What the quota did: its last `cpu.stat`, read when the environment ended. */
      readonly throttling?: CpuThrottling;
    }
  | { readonly kind: 'whole-cores'; readonly reason: string };

export interface Failure {
  readonly errorType: string;
  readonly errorMessage: string;
}

export interface EnvironmentAnswer {
  readonly outcome: InvokeOutcome;
  readonly requestId: string;
  /** From delivery to the runtime's response, in ms. */
  readonly durationMs: number;
  /**
   * From delivery until the environment froze again (or ended), in whole ms rounded up: work
   * after the response included. Settles after the answer when an extension is still working.
   */
  readonly billedMs: Promise<number>;
}

export interface EnvironmentStats {
  readonly invocations: number;
  readonly freezes: number;
  readonly thaws: number;
  readonly timeouts: number;
}

export interface ShutdownRecord {
  readonly reason: ShutdownReason;
  /** What the runtime process was sent to end it, in order (SIGTERM, SIGKILL). */
  readonly signals: readonly NodeJS.Signals[];
  readonly exitCode: number | null;
  readonly exitSignal: NodeJS.Signals | null;
}

export interface ExecutionEnvironment {
  readonly id: string;
  /** The runtime process's PID. */
  readonly pid: number;
  state(): EnvironmentState;
  stats(): EnvironmentStats;
  /** Names of the extensions registered during init. */
  extensions(): readonly string[];
  /** How it ended, once it has. */
  shutdownRecord(): ShutdownRecord | undefined;
  /** The CPU it runs on: its memory's share (a cgroup quota) or whole cores, and why. */
  cpu(): EnvironmentCpu;
  /** The invocation it runs now (busy, or working after its response), if any. */
  current(): CurrentInvocation | undefined;
  /**
   * With `loopDelay`, once it has ended: its event loop's late timers outside its freezes, the
   * latest first. Undefined before, and without.
   */
  loopDelays(): readonly LoopDelay[] | undefined;
  /** The last 64 KB the process wrote. */
  output(): string;
  /** Runs one invocation; the environment must be `frozen` or `idle`. */
  invoke(event: unknown, options?: InvokeOptions): Promise<EnvironmentAnswer>;
  shutdown(reason?: ShutdownReason): Promise<void>;
}

export interface InvokeOptions {
  /**
   * The request ID the function sees (`context.awsRequestId`); default a new UUID. The Invoke
   * API passes its own, so that `X-Amzn-RequestId` and the function's log lines agree, as in Lambda.
   */
  readonly requestId?: string;
  /**
   * The ARN the function sees invoked (`context.invokedFunctionArn`), with the qualifier its
   * caller named; default the unqualified function ARN.
   */
  readonly invokedFunctionArn?: string;
}

export type InitResult =
  | { readonly ok: true; readonly environment: ExecutionEnvironment; readonly initMs: number }
  | {
      readonly ok: false;
      readonly environment: ExecutionEnvironment;
      readonly failure: Failure;
      readonly initMs: number;
    };

/** An invocation under way, as either model keeps it. */
export interface RunningInvocation {
  readonly requestId: string;
  readonly started: number;
  /** The deadline the runtime was given (`Lambda-Runtime-Deadline-Ms`), epoch ms. */
  readonly deadlineAt: number;
  /** Runs a function in the async context of the caller of `invoke` (for `onLog`). */
  readonly scope: <R>(fn: () => R) => R;
  /** Its timeout. */
  readonly timer: NodeJS.Timeout;
  /** Resolves `invoke` with its outcome. */
  readonly answer: (outcome: InvokeOutcome) => void;
}

interface Invocation extends RunningInvocation {
  answered: boolean;
  readonly bill: (ms: number) => void;
}

/** Starts an environment and runs its init; it is frozen (or idle) when this resolves `ok`. */
export const startEnvironment = async (options: EnvironmentOptions): Promise<InitResult> => {
  const { settings } = options;
  const arn = functionArn(settings);
  let state: EnvironmentState = 'initializing';
  const stats = { invocations: 0, freezes: 0, thaws: 0, timeouts: 0 };
  let invocation: Invocation | undefined;
  let ending: Promise<void> | undefined;
  let record: ShutdownRecord | undefined;

  // Everything below runs on the API's events; `environment` is defined before any can fire.
  const park = (notify: boolean) => {
    if (options.freeze) {
      runtime.freeze();
      stats.freezes += 1;
      state = 'frozen';
    } else {
      state = 'idle';
    }
    if (notify) options.onReady?.(environment);
  };

  /** The runtime and every extension wait: init or the invocation is over. */
  const settle = () => {
    if (state === 'initializing') {
      park(false);
      init.end();
      return;
    }
    const current = invocation;
    if (!current || (state !== 'busy' && state !== 'after-response')) return;
    invocation = undefined;
    clearTimeout(current.timer);
    current.bill(Math.ceil(performance.now() - current.started));
    park(true);
  };

  const respond = (requestId: string, outcome: InvokeOutcome) => {
    const current = invocation;
    if (!current || current.requestId !== requestId || current.answered) return;
    current.answered = true;
    state = 'after-response';
    current.answer(outcome);
  };

  /** The environment cannot go on: the invocation (or init) fails with `failure`, then it ends. */
  const fail = (failure: Failure, reason: ShutdownReason) => {
    if (state === 'initializing') init.end(failure);
    const current = invocation;
    if (current && !current.answered) {
      current.answered = true;
      current.answer({ ok: false, ...failure });
    }
    void shutdown(reason);
  };

  const onTimeout = () => {
    const current = invocation;
    if (!current) return;
    stats.timeouts += 1;
    invocation = undefined;
    if (!current.answered) {
      current.answered = true;
      current.answer({ ok: false, ...timedOut(settings.timeoutMs) });
    }
    // Lambda bills a timed-out invocation its timeout.
    current.bill(settings.timeoutMs);
    void shutdown('timeout');
  };

  const api = await startRuntimeApi(functionMetadata(settings, options.bundle), {
    onWaiting: () => settle(),
    onResponse: respond,
    onFailure: (failure) => fail(failure, 'failure'),
  });

  const runtime = spawnRuntime(options, {
    api: api.address,
    reserved: {
      AWS_LAMBDA_LOG_STREAM_NAME: logStream(),
      AWS_LAMBDA_INITIALIZATION_TYPE: 'on-demand',
    },
    cpuMemoryMb: settings.memoryMb,
    // Lines that arrive during an invocation are its own (a line of the previous invocation's
    // work after its response can still arrive here once the next one was delivered, when
    // an invocation waited for this environment: it is then counted as the new one's).
    scopeOf: () => invocation?.scope,
  });
  const init = initGate(options.initTimeoutMs, (failure) => {
    if (state === 'initializing') fail(failure, 'timeout');
  });
  void runtime.exited.then((status) => {
    if (state === 'shutting-down' || state === 'ended') return;
    fail(runtimeExited(status, invocation?.requestId), 'failure');
  });

  const shutdown = (reason: ShutdownReason = 'spindown'): Promise<void> => {
    ending ??= (async () => {
      state = 'shutting-down';
      init.cancel();
      record = await endEnvironment(runtime, api, reason, (status) => {
        const current = invocation;
        invocation = undefined;
        if (!current) return;
        // Ended under an invocation (the pool closed): it fails as a runtime that exited.
        clearTimeout(current.timer);
        if (!current.answered) {
          current.answered = true;
          current.answer({ ok: false, ...runtimeExited(status, current.requestId) });
        }
        current.bill(Math.ceil(performance.now() - current.started));
      });
      state = 'ended';
      options.onEnded?.(environment);
    })();
    return ending;
  };

  const invoke = (
    event: unknown,
    invokeOptions: InvokeOptions = {},
  ): Promise<EnvironmentAnswer> => {
    if (state === 'shutting-down' || state === 'ended') return exitedAnswer();
    if (state !== 'frozen' && state !== 'idle') {
      return Promise.reject(
        new Error(`Environment ${options.id} is ${state}: not ready to invoke`),
      );
    }
    // What Lambda delivers: the JSON payload, or null for an empty one.
    const payload = JSON.stringify(event === undefined ? null : event);
    const requestId = invokeOptions.requestId || randomUUID();
    state = 'busy';
    stats.invocations += 1;
    if (runtime.thaw()) stats.thaws += 1;
    return new Promise<EnvironmentAnswer>((resolve) => {
      let bill: (ms: number) => void = () => undefined;
      const billedMs = new Promise<number>((settled) => {
        bill = settled;
      });
      const started = performance.now();
      const deadlineAt = Date.now() + settings.timeoutMs;
      invocation = {
        requestId,
        started,
        deadlineAt,
        scope: AsyncLocalStorage.snapshot(),
        answered: false,
        timer: setTimeout(onTimeout, settings.timeoutMs),
        answer: (outcome) =>
          resolve({ outcome, requestId, durationMs: performance.now() - started, billedMs }),
        bill,
      };
      api.deliver({
        requestId,
        deadlineMs: deadlineAt,
        invokedFunctionArn: invokeOptions.invokedFunctionArn ?? arn,
        traceId: traceHeader(),
        payload,
      });
    });
  };

  const environment: ExecutionEnvironment = {
    id: options.id,
    pid: runtime.pid,
    state: () => state,
    stats: () => ({ ...stats }),
    extensions: () => api.extensions(),
    shutdownRecord: () => record,
    cpu: runtime.cpu,
    current: () =>
      invocation && {
        requestId: invocation.requestId,
        deadlineAt: invocation.deadlineAt,
        answered: invocation.answered,
      },
    loopDelays: runtime.loopDelays,
    output: runtime.output,
    invoke,
    shutdown,
  };

  return init.result(runtime, environment, shutdown);
};
