/**
 * A function's execution environments, as Lambda keeps them: an invocation goes to a frozen
 * idle environment, the most recently used first (Lambda reuses warm ones), or to a new one
 * (a cold start) while fewer than `maxEnvironments` exist. Beyond that the invocation waits,
 * first come first served, for an environment to be free, and fails with
 * `TooManyRequestsException` after `maxWaitMs` (`0`: refused at once, as Lambda throttles a
 * synchronous invocation over its concurrency). An environment idle for `idleShutdownMs` is
 * shut down.
 *
 * `asHandler()` makes the pool a `LambdaHandler`, so that `startLambdaServer` fronts it
 * unchanged.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { CpuPolicy } from '../cpu-share.js';
import { DEFAULT_LAMBDA, type InvokeOutcome, type LambdaHandler } from '../lambda-events.js';
import type { LoopDelay } from '../loop-delay.js';
import {
  type CurrentInvocation,
  type EnvironmentCpu,
  type EnvironmentState,
  type EnvironmentStats,
  type ExecutionEnvironment,
  type InvokeOptions,
  type ShutdownRecord,
  startEnvironment,
} from './environment.js';

export interface EnvironmentPoolOptions {
  /** Path of the function's bundle (an ES module exporting `handler`). */
  readonly bundle: string;
  /** Path of the built runtime, `dist/local/lambda-env/bootstrap.mjs`. */
  readonly bootstrap: string;
  /** The function's environment variables. */
  readonly env?: Readonly<Record<string, string>>;
  /** Concurrency: how many environments may exist at once. Default 4. */
  readonly maxEnvironments?: number;
  /** Shut an environment down after this long frozen. Default 300,000 (5 minutes). */
  readonly idleShutdownMs?: number;
  /** The function's timeout, which bounds an invocation and its extensions' work. Default 10,000. */
  readonly timeoutMs?: number;
  /** SIGTERM to SIGKILL at shutdown. Default 500, Lambda's with internal extensions only. */
  readonly shutdownDeadlineMs?: number;
  /** Stop environments between invocations. Default true; false keeps them running. */
  readonly freeze?: boolean;
  /** How long an invocation waits for a free environment at the maximum. Default `timeoutMs`. */
  readonly maxWaitMs?: number;
  /** Lambda's limit on init. Default 10,000. */
  readonly initTimeoutMs?: number;
  readonly functionName?: string;
  /** Default: the function's AWS_REGION, else us-east-1. */
  readonly region?: string;
  readonly accountId?: string;
  readonly memoryMb?: number;
  /**
   * Each line an environment writes; during an invocation, in the async context `invoke` was
   * called in (see `ExecutionEnvironment`'s `onLog`), else in the one the pool was made in.
   */
  readonly onLog?: ((line: string, environmentId: string) => void) | undefined;
  /**
   * Lambda's CPU share of `memoryMb` for each environment (`local/cpu-share.ts`), or whole cores.
   * Default: none asked (whole cores); `startLambdaContainer` asks for it by default.
   */
  readonly cpu?: CpuPolicy | undefined;
  /** Measure each environment's event-loop delays outside its freezes (`local/loop-delay.ts`). */
  readonly loopDelay?: boolean;
}

/** What one invocation came to. */
export interface PoolInvocation {
  readonly outcome: InvokeOutcome;
  readonly requestId: string;
  readonly environmentId: string;
  /** The environment was started for this invocation. */
  readonly coldStart: boolean;
  /**
   * That environment's init failed: the outcome is the init error (a module that throws or
   * cannot load, `Runtime.HandlerNotFound`, `Extension.InitError`, an init timeout).
   */
  readonly initFailed?: true;
  /** Init time of that environment (cold starts only). */
  readonly initMs?: number;
  /** From delivery to the runtime's response. */
  readonly durationMs: number;
  /**
   * From delivery until the environment froze again, work after the response included: it
   * settles after the answer when an extension keeps the environment busy.
   */
  readonly billedMs: Promise<number>;
}

export interface EnvironmentSnapshot {
  readonly id: string;
  readonly pid: number;
  readonly state: EnvironmentState;
  readonly extensions: readonly string[];
  readonly stats: EnvironmentStats;
  readonly shutdown?: ShutdownRecord;
  /** The CPU it runs on (its memory's share, or whole cores and why). */
  readonly cpu: EnvironmentCpu;
  /** The invocation it runs now, if any: its deadline, and whether it was answered. */
  readonly invocation?: CurrentInvocation;
  /** With `loopDelay`, once ended: its event loop's late timers outside its freezes, the latest first. */
  readonly loopDelays?: readonly LoopDelay[];
}

/** Codes of {@link EnvironmentPoolError}; each is also the error's `name`. */
export const POOL_ERROR = {
  /** No environment free within `maxWaitMs` (Lambda's 429 for a throttled invocation). */
  TooManyRequests: 'TooManyRequestsException',
  /** The pool was closed. */
  Closed: 'EnvironmentPoolClosed',
} as const;
export type PoolErrorCode = (typeof POOL_ERROR)[keyof typeof POOL_ERROR];

/** An invocation the pool could not run (not a function error: those are outcomes). */
export class EnvironmentPoolError extends Error {
  readonly code: PoolErrorCode;
  constructor(code: PoolErrorCode, message: string, options?: ErrorOptions) {
    super(message, options);
    // Set explicitly: a minifier renames classes, and Lambda reports `name` as the error type.
    this.name = code;
    this.code = code;
  }
}

const DEFAULTS = {
  env: {} as Readonly<Record<string, string>>,
  maxEnvironments: 4,
  idleShutdownMs: 300_000,
  timeoutMs: DEFAULT_LAMBDA.timeoutMs,
  shutdownDeadlineMs: 500,
  freeze: true,
  maxWaitMs: undefined as number | undefined,
  initTimeoutMs: 10_000,
  functionName: DEFAULT_LAMBDA.functionName,
  region: undefined as string | undefined,
  accountId: DEFAULT_LAMBDA.accountId,
  memoryMb: 256,
  onLog: undefined as EnvironmentPoolOptions['onLog'],
  cpu: undefined as CpuPolicy | undefined,
  loopDelay: false,
};
const KNOWN = new Set(['bundle', 'bootstrap', ...Object.keys(DEFAULTS)]);

/** Options merged with the defaults, checked once: unknown keys (typos) and bad numbers throw. */
const settle = (options: EnvironmentPoolOptions) => {
  for (const key of Object.keys(options)) {
    if (!KNOWN.has(key)) throw new TypeError(`EnvironmentPool: unknown option '${key}'`);
  }
  const merged = { ...DEFAULTS, ...options };
  const whole = (name: string, value: number, min: number) => {
    if (!Number.isInteger(value) || value < min) {
      throw new RangeError(
        `EnvironmentPool: ${name} must be a whole number ≥ ${min}, not ${value}`,
      );
    }
  };
  whole('maxEnvironments', merged.maxEnvironments, 1);
  whole('idleShutdownMs', merged.idleShutdownMs, 1);
  whole('timeoutMs', merged.timeoutMs, 1);
  whole('shutdownDeadlineMs', merged.shutdownDeadlineMs, 0);
  whole('initTimeoutMs', merged.initTimeoutMs, 1);
  whole('memoryMb', merged.memoryMb, 128);
  const maxWaitMs = merged.maxWaitMs ?? merged.timeoutMs;
  whole('maxWaitMs', maxWaitMs, 0);
  if (!options.bundle || !options.bootstrap) {
    throw new TypeError('EnvironmentPool: bundle and bootstrap are required');
  }
  return {
    ...merged,
    maxWaitMs,
    region: merged.region ?? merged.env.AWS_REGION ?? DEFAULT_LAMBDA.region,
  };
};

/** An environment handed to one invocation. */
type Lease =
  | {
      readonly ok: true;
      readonly environment: ExecutionEnvironment;
      readonly coldStart: boolean;
      readonly initMs?: number;
    }
  | {
      readonly ok: false;
      readonly environmentId: string;
      readonly errorType: string;
      readonly errorMessage: string;
      readonly initMs: number;
    };

interface Waiter {
  readonly resolve: (lease: Lease) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
}

export class EnvironmentPool {
  readonly #options: ReturnType<typeof settle>;
  readonly #environments = new Map<string, ExecutionEnvironment>();
  /** Environments waiting for an invocation, the most recently used last. */
  readonly #idle: ExecutionEnvironment[] = [];
  readonly #idleTimers = new Map<string, NodeJS.Timeout>();
  readonly #waiters: Waiter[] = [];
  readonly #starting = new Set<Promise<unknown>>();
  /** The last environments that ended, for diagnostics. */
  readonly #ended: ExecutionEnvironment[] = [];
  /**
   * Runs a function in the async context the pool was made in: an environment belongs to the
   * pool, not to the invocation that happened to start it, so its process's streams and timers
   * must not carry that invocation's AsyncLocalStorage values (its `Tail` capture) for good.
   */
  readonly #outside = AsyncLocalStorage.snapshot();
  #count = 0;
  #closed = false;

  constructor(options: EnvironmentPoolOptions) {
    this.#options = settle(options);
  }

  /** Runs one invocation in an environment of the pool; a function error is an outcome. */
  async invoke(event: unknown, options: InvokeOptions = {}): Promise<PoolInvocation> {
    // An event that is not JSON (a BigInt, a cycle) throws here, before it holds an environment.
    JSON.stringify(event ?? null);
    const lease = await this.#acquire();
    if (!lease.ok) {
      return {
        outcome: { ok: false, errorType: lease.errorType, errorMessage: lease.errorMessage },
        requestId: options.requestId || randomUUID(),
        environmentId: lease.environmentId,
        coldStart: true,
        initFailed: true,
        initMs: lease.initMs,
        durationMs: 0,
        billedMs: Promise.resolve(0),
      };
    }
    const { environment, coldStart, initMs } = lease;
    const answer = await environment.invoke(event, options);
    return {
      ...answer,
      environmentId: environment.id,
      coldStart,
      ...(initMs === undefined ? {} : { initMs }),
    };
  }

  /**
   * The pool as a handler: the result, or a thrown Error whose `name` is the errorType. The
   * function sees the caller's `context.awsRequestId` as its own. `onInvocation` sees each
   * invocation the pool ran (its durations, say) before its answer goes back.
   */
  asHandler({
    onInvocation,
  }: {
    onInvocation?: (invocation: PoolInvocation) => void;
  } = {}): LambdaHandler {
    return async (event, context) => {
      const invocation = await this.invoke(event, {
        requestId: context?.awsRequestId,
        invokedFunctionArn: context?.invokedFunctionArn,
      });
      onInvocation?.(invocation);
      const { outcome } = invocation;
      // The runtime writes its lines before it posts its answer, but the two reach this process
      // on two descriptors (a pipe, a socket) read in the same turn in either order: one more
      // turn lets lines already written reach `onLog` in this invocation's context.
      await nextTurn();
      if (outcome.ok) return outcome.result;
      const error = new Error(outcome.errorMessage);
      error.name = outcome.errorType;
      throw error;
    };
  }

  /** Every environment that has not ended (and the last 64 that have), for tests and diagnostics. */
  environments({ ended = false }: { ended?: boolean } = {}): readonly EnvironmentSnapshot[] {
    const listed = [...(ended ? this.#ended : []), ...this.#environments.values()];
    return listed.map((environment) => {
      const shutdown = environment.shutdownRecord();
      const loopDelays = environment.loopDelays();
      const invocation = environment.current();
      return {
        id: environment.id,
        pid: environment.pid,
        state: environment.state(),
        extensions: environment.extensions(),
        stats: environment.stats(),
        cpu: environment.cpu(),
        ...(shutdown ? { shutdown } : {}),
        ...(loopDelays ? { loopDelays } : {}),
        ...(invocation ? { invocation } : {}),
      };
    });
  }

  /** Shuts every environment down; invocations waiting for one fail. */
  async close(): Promise<void> {
    this.#closed = true;
    for (const waiter of this.#waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed'));
    }
    for (const timer of this.#idleTimers.values()) clearTimeout(timer);
    this.#idleTimers.clear();
    this.#idle.length = 0;
    await Promise.allSettled([...this.#starting]);
    await Promise.all([...this.#environments.values()].map((e) => e.shutdown('spindown')));
  }

  #acquire(): Promise<Lease> {
    if (this.#closed) {
      return Promise.reject(
        new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed'),
      );
    }
    // 1. A warm environment, the most recently used first.
    const warm = this.#idle.pop();
    if (warm) {
      this.#unidle(warm);
      return Promise.resolve({ ok: true, environment: warm, coldStart: false });
    }
    // 2. A new one, while under the maximum.
    if (this.#count < this.#options.maxEnvironments) return this.#start();
    // 3. Wait for one to be free, within maxWaitMs.
    const { maxWaitMs, maxEnvironments } = this.#options;
    const throttled = () =>
      new EnvironmentPoolError(
        POOL_ERROR.TooManyRequests,
        `Rate Exceeded. (${maxEnvironments} environments busy; none free within ${maxWaitMs} ms)`,
      );
    if (maxWaitMs === 0) return Promise.reject(throttled());
    return new Promise<Lease>((resolve, reject) => {
      const waiter: Waiter = {
        resolve,
        reject,
        timer: setTimeout(() => {
          this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
          reject(throttled());
        }, maxWaitMs),
      };
      this.#waiters.push(waiter);
    });
  }

  #start(): Promise<Lease> {
    const o = this.#options;
    const id = randomUUID().slice(0, 8);
    this.#count += 1;
    const started = this.#outside(() =>
      startEnvironment({
        id,
        bootstrap: o.bootstrap,
        bundle: o.bundle,
        env: o.env,
        settings: {
          functionName: o.functionName,
          region: o.region,
          accountId: o.accountId,
          memoryMb: o.memoryMb,
          timeoutMs: o.timeoutMs,
        },
        freeze: o.freeze,
        initTimeoutMs: o.initTimeoutMs,
        shutdownDeadlineMs: o.shutdownDeadlineMs,
        onLog: o.onLog && ((line) => o.onLog?.(line, id)),
        cpu: o.cpu,
        loopDelay: o.loopDelay,
        onReady: (environment) => this.#ready(environment),
        onEnded: (environment) => this.#gone(environment),
      }),
    ).then(async (init): Promise<Lease> => {
      if (!init.ok) {
        return { ok: false, environmentId: id, ...init.failure, initMs: init.initMs };
      }
      this.#environments.set(id, init.environment);
      if (this.#closed) {
        await init.environment.shutdown('spindown');
        throw new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed');
      }
      return { ok: true, environment: init.environment, coldStart: true, initMs: init.initMs };
    });
    this.#starting.add(started);
    void started.finally(() => this.#starting.delete(started)).catch(() => undefined);
    return started;
  }

  /** An environment finished an invocation: to the first waiter, else idle until reused. */
  #ready(environment: ExecutionEnvironment) {
    if (this.#closed) return;
    const waiter = this.#waiters.shift();
    if (waiter) {
      clearTimeout(waiter.timer);
      waiter.resolve({ ok: true, environment, coldStart: false });
      return;
    }
    this.#idle.push(environment);
    const timer = setTimeout(() => {
      this.#unidle(environment);
      void environment.shutdown('spindown');
    }, this.#options.idleShutdownMs);
    timer.unref();
    this.#idleTimers.set(environment.id, timer);
  }

  #unidle(environment: ExecutionEnvironment) {
    const at = this.#idle.indexOf(environment);
    if (at >= 0) this.#idle.splice(at, 1);
    clearTimeout(this.#idleTimers.get(environment.id));
    this.#idleTimers.delete(environment.id);
  }

  /** An environment ended (idle shutdown, timeout, crash): its place goes to the first waiter. */
  #gone(environment: ExecutionEnvironment) {
    this.#unidle(environment);
    this.#environments.delete(environment.id);
    this.#ended.push(environment);
    if (this.#ended.length > 64) this.#ended.shift();
    this.#count -= 1;
    if (this.#closed) return;
    const waiter = this.#waiters.shift();
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.#start().then(waiter.resolve, waiter.reject);
  }
}
