/**
 * The runtime process of one execution environment, whatever the execution model
 * (environment.ts, Lambda's own; managed-environment.ts, Lambda Managed Instances'): spawned
 * with the function's environment only and what Lambda sets, put into a CPU cgroup of its own
 * right after its spawn (its init already runs at its share, as in Lambda), its output kept and
 * split into lines, its freezes (SIGSTOP) recorded against its event-loop delays
 * (`local/loop-delay.ts`), and ended as Lambda ends one: SIGKILL at once with no extension,
 * else SIGTERM and SIGKILL at the deadline. What the process's events mean is each model's own.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { type CpuGroup, createCpuGroup } from '../cpu-share.js';
import {
  LOOP_DELAY_VARIABLE,
  type LoopDelay,
  monotonicMs,
  netDelays,
  readGaps,
  type Span,
} from '../loop-delay.js';
import type { ApiServer } from './api-protocol.js';
import type {
  CommonEnvironmentOptions,
  EnvironmentCpu,
  ExecutionEnvironment,
  Failure,
  InitResult,
  ShutdownReason,
  ShutdownRecord,
} from './environment.js';
import { type Exit, handlerName, initTimedOut } from './lambda-wording.js';

const OUTPUT_TAIL = 64 * 1024;

// Processes still running when this process exits are killed: a stopped child left behind
// would stay stopped forever.
const running = new Set<ChildProcess>();
let guarded = false;
const guardExit = () => {
  if (guarded) return;
  guarded = true;
  process.once('exit', () => {
    for (const child of running) child.kill('SIGKILL');
  });
};

/** What a process differs in by execution model (the rest is its environment's options). */
export interface RuntimeModel {
  /** `AWS_LAMBDA_RUNTIME_API`: its API server's `host:port`. */
  readonly api: string;
  /** Variables the model sets that the function's own may override. */
  readonly defaults?: Readonly<Record<string, string>>;
  /** Variables only the model sets (reserved: they win over the function's own). */
  readonly reserved: Readonly<Record<string, string>>;
  /** The memory whose CPU share its quota is (`cpu`). */
  readonly cpuMemoryMb: number;
  /** The async context a line is emitted in (its invocation's), or undefined: the current one. */
  readonly scopeOf: (line: string) => (<R>(fn: () => R) => R) | undefined;
}

export interface RuntimeProcess {
  /** Its PID (-1 when it could not be spawned). */
  readonly pid: number;
  /** When it was spawned (`performance.now()`). */
  readonly spawnedAt: number;
  /** Settles once it has ended; its own bookkeeping (cgroup, loop delays) runs first. */
  readonly exited: Promise<Exit>;
  /** How it ended, once it has. */
  exit(): Exit | undefined;
  cpu(): EnvironmentCpu;
  /** With `loopDelay`, once it has ended: its event loop's late timers outside its freezes. */
  loopDelays(): readonly LoopDelay[] | undefined;
  /** The last 64 KB it wrote. */
  output(): string;
  /** Stops it (SIGSTOP). */
  freeze(): void;
  /** Continues it (SIGCONT) if it is stopped; false when it was not. */
  thaw(): boolean;
  /**
   * Ends it: SIGKILL without `graceful`; else `beforeTerm`, SIGTERM, and SIGKILL after
   * `shutdownDeadlineMs`. Resolves to the signals it was sent, in order.
   */
  end(graceful: boolean, beforeTerm?: () => void): Promise<NodeJS.Signals[]>;
}

/** Spawns the runtime process of environment `options.id`. */
export const spawnRuntime = (
  options: CommonEnvironmentOptions<never>,
  model: RuntimeModel,
): RuntimeProcess => {
  const { settings } = options;
  // The sampler's file (local/loop-delay.ts), and this process's freezes on its clock.
  const loopDelayFile = options.loopDelay
    ? join(tmpdir(), `token-broker-loop-delay-${process.pid}-${options.id}`)
    : undefined;
  const freezes: Span[] = [];
  let frozeAt: number | undefined;
  let stopped = false;
  let delays: readonly LoopDelay[] | undefined;
  let exit: Exit | undefined;
  let output = '';
  const thawed = () => {
    if (frozeAt !== undefined) freezes.push({ from: frozeAt, to: monotonicMs() });
    frozeAt = undefined;
  };

  const child = spawn(process.execPath, [options.bootstrap, options.bundle], {
    cwd: dirname(options.bundle),
    env: {
      PATH: process.env.PATH ?? '',
      ...model.defaults,
      ...options.env,
      // What Lambda sets; reserved, so they win over the function's own variables.
      AWS_LAMBDA_FUNCTION_NAME: settings.functionName,
      AWS_LAMBDA_FUNCTION_VERSION: '$LATEST',
      AWS_LAMBDA_FUNCTION_MEMORY_SIZE: String(settings.memoryMb),
      AWS_LAMBDA_LOG_GROUP_NAME: `/aws/lambda/${settings.functionName}`,
      ...model.reserved,
      AWS_EXECUTION_ENV: 'AWS_Lambda_nodejs24.x',
      AWS_REGION: settings.region,
      AWS_DEFAULT_REGION: settings.region,
      LAMBDA_TASK_ROOT: dirname(options.bundle),
      _HANDLER: handlerName(options.bundle),
      AWS_LAMBDA_RUNTIME_API: model.api,
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
      group = createCpuGroup(options.cpu, `${process.pid}-${options.id}`, model.cpuMemoryMb);
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
  const exited = new Promise<Exit>((resolve) => {
    child.once('close', (code, signal) => resolve({ code, signal }));
    // A process that could not be spawned (EAGAIN, ENOMEM) emits 'error' and may never close.
    child.once('error', () => resolve({ code: null, signal: null }));
  });
  // Registered first: whoever awaits `exited` after this sees its bookkeeping done.
  void exited.then((status) => {
    exit = status;
    running.delete(child);
    thawed();
    if (loopDelayFile) {
      delays = netDelays(readGaps(loopDelayFile), freezes);
      rmSync(loopDelayFile, { force: true });
    }
    if (group && cpu.kind === 'quota') {
      const ending = cpu;
      void group.remove().then((throttling) => {
        if (throttling) cpu = { ...ending, throttling };
      });
    }
  });

  for (const stream of [child.stdout, child.stderr]) {
    let rest = '';
    stream.setEncoding('utf8');
    stream.on('data', (chunk: string) => {
      output = (output + chunk).slice(-OUTPUT_TAIL);
      const lines = (rest + chunk).split('\n');
      rest = lines.pop() ?? '';
      const onLog = options.onLog;
      if (!onLog) return;
      for (const line of lines) {
        const scope = model.scopeOf(line);
        if (scope) scope(() => onLog(line));
        else onLog(line);
      }
    });
    stream.on('end', () => {
      if (rest !== '') options.onLog?.(rest);
    });
  }

  const thaw = () => {
    if (!stopped) return false;
    child.kill('SIGCONT');
    thawed();
    stopped = false;
    return true;
  };

  return {
    pid: child.pid ?? -1,
    spawnedAt,
    exited,
    exit: () => exit,
    cpu: () => cpu,
    loopDelays: () => delays,
    output: () => output,
    freeze: () => {
      child.kill('SIGSTOP');
      frozeAt = monotonicMs();
      stopped = true;
    },
    thaw,
    end: async (graceful, beforeTerm) => {
      const signals: NodeJS.Signals[] = [];
      const signal = (name: NodeJS.Signals) => {
        if (exit) return;
        child.kill(name);
        signals.push(name);
      };
      if (exit) return signals;
      // A stopped process would keep a SIGTERM pending without running its handler.
      thaw();
      if (!graceful) {
        signal('SIGKILL');
        return signals;
      }
      beforeTerm?.();
      signal('SIGTERM');
      const deadline = new AbortController();
      const first = await Promise.race([
        exited.then(() => 'exited' as const),
        sleep(options.shutdownDeadlineMs, 'deadline' as const, { signal: deadline.signal }),
      ]);
      deadline.abort();
      if (first === 'deadline') signal('SIGKILL');
      return signals;
    },
  };
};

/**
 * An environment's init, as both models time it: over when the model says so (`end`), or timed
 * out after `timeoutMs` (`Sandbox.Timedout`, to `onTimeout`). Started right after the spawn.
 */
export const initGate = (timeoutMs: number, onTimeout: (failure: Failure) => void) => {
  let resolve: (failure: Failure | undefined) => void = () => undefined;
  const ended = new Promise<Failure | undefined>((settle) => {
    resolve = settle;
  });
  const timer = setTimeout(() => onTimeout(initTimedOut(timeoutMs)), timeoutMs);
  return {
    /** Init is over: `failure` when it failed. */
    end: (failure?: Failure) => {
      clearTimeout(timer);
      resolve(failure);
    },
    /** Its timeout no longer applies (the environment is shutting down). */
    cancel: () => clearTimeout(timer),
    /**
     * The end of the environment's start: its init awaited, the environment shut down when init
     * failed, and its init time (from the spawn) measured.
     */
    result: async <E extends ExecutionEnvironment>(
      runtime: RuntimeProcess,
      environment: E,
      shutdown: (reason: 'failure') => Promise<void>,
    ): Promise<InitResult & { readonly environment: E }> => {
      const failure = await ended;
      const initMs = performance.now() - runtime.spawnedAt;
      if (failure) {
        await shutdown('failure');
        return { ok: false, environment, failure, initMs };
      }
      return { ok: true, environment, initMs };
    },
  };
};

/**
 * Ends an environment's process, then closes its API: SIGKILL with no extension registered,
 * else `beforeTerm`, SIGTERM and SIGKILL at the deadline; `onExit` once the process has exited,
 * before the API closes. Resolves to how it ended.
 */
export const endEnvironment = async (
  runtime: RuntimeProcess,
  api: ApiServer,
  reason: ShutdownReason,
  onExit: (status: Exit) => void,
  beforeTerm?: () => void,
): Promise<ShutdownRecord> => {
  const signals = await runtime.end(api.extensions().length > 0, beforeTerm);
  const status = await runtime.exited;
  onExit(status);
  await api.close();
  return { reason, signals, exitCode: status.code, exitSignal: status.signal };
};
