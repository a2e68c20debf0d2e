/**
 * What the two pools share (`EnvironmentPool`, pool.ts, Lambda's own model;
 * `ManagedInstancesPool`, managed-pool.ts, Lambda Managed Instances'): their surface (`invoke`,
 * `asHandler`, `environments`, `close`), the queue of invocations waiting for an environment
 * (`maxWaitMs`, then `TooManyRequestsException`), the start of a new environment, and the
 * bookkeeping of those that ended. Which environment an invocation gets, and when one is free
 * again, is each pool's own.
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { CpuPolicy } from '../cpu-share.js';
import type { InvokeOutcome, LambdaHandler } from '../lambda-events.js';
import type { LoopDelay } from '../loop-delay.js';
import type {
  CommonEnvironmentOptions,
  CurrentInvocation,
  EnvironmentCpu,
  EnvironmentState,
  EnvironmentStats,
  ExecutionEnvironment,
  InitResult,
  InvokeOptions,
  ShutdownRecord,
} from './environment.js';

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

const closedError = () =>
  new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed');

/** An environment handed to one invocation, or the init failure of the one started for it. */
export type Lease<E> =
  | {
      readonly ok: true;
      readonly environment: E;
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

/** An invocation waiting for an environment; its timer is cleared once it is handed one. */
export interface Waiter<E> {
  readonly resolve: (lease: Lease<E>) => void;
  readonly reject: (error: Error) => void;
}

interface Waiting<E> extends Waiter<E> {
  readonly timer: NodeJS.Timeout;
}

/** What both pools are given; each pool's own interface says its defaults where they differ. */
export interface CommonPoolOptions {
  /** Path of the function's bundle (an ES module exporting `handler`). */
  readonly bundle: string;
  /** Path of the built runtime (`dist/local/lambda-env/bootstrap.mjs`, `managed-bootstrap.mjs`). */
  readonly bootstrap: string;
  /** The function's environment variables. */
  readonly env?: Readonly<Record<string, string>>;
  /** How many environments may exist at once. */
  readonly maxEnvironments?: number;
  /** The function's timeout. Default 10,000. */
  readonly timeoutMs?: number;
  /** SIGTERM to SIGKILL at shutdown. Default 500, Lambda's with internal extensions only. */
  readonly shutdownDeadlineMs?: number;
  /** How long an invocation waits for an environment at the maximum. Default `timeoutMs`. */
  readonly maxWaitMs?: number;
  /** Lambda's limit on init. Default 10,000. */
  readonly initTimeoutMs?: number;
  readonly functionName?: string;
  /** Default: the function's AWS_REGION, else us-east-1. */
  readonly region?: string;
  readonly accountId?: string;
  /** AWS_LAMBDA_FUNCTION_MEMORY_SIZE. */
  readonly memoryMb?: number;
  /**
   * Each line an environment writes; during an invocation, in the async context `invoke` was
   * called in (see `ExecutionEnvironment`'s `onLog`), else in the one the pool was made in.
   */
  readonly onLog?: ((line: string, environmentId: string) => void) | undefined;
  /**
   * Each environment's CPU (`local/cpu-share.ts`): a cgroup quota, or whole cores. Default: none
   * asked (whole cores); `startLambdaContainer` asks for it by default.
   */
  readonly cpu?: CpuPolicy | undefined;
  /** Measure each environment's event-loop delays outside its freezes (`local/loop-delay.ts`). */
  readonly loopDelay?: boolean;
}

/** What both pools' options, defaults applied, give every environment they start. */
export interface PoolSettings {
  readonly bootstrap: string;
  readonly bundle: string;
  readonly env: Readonly<Record<string, string>>;
  readonly functionName: string;
  readonly region: string;
  readonly accountId: string;
  readonly memoryMb: number;
  readonly timeoutMs: number;
  readonly initTimeoutMs: number;
  readonly shutdownDeadlineMs: number;
  readonly onLog?: ((line: string, environmentId: string) => void) | undefined;
  readonly cpu?: CpuPolicy | undefined;
  readonly loopDelay: boolean;
}

/** The options of environment `id` that do not depend on its model. */
export const environmentOptions = (
  id: string,
  o: PoolSettings,
): Omit<CommonEnvironmentOptions<never>, 'onEnded'> => ({
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
  initTimeoutMs: o.initTimeoutMs,
  shutdownDeadlineMs: o.shutdownDeadlineMs,
  onLog: o.onLog && ((line) => o.onLog?.(line, id)),
  cpu: o.cpu,
  loopDelay: o.loopDelay,
});

export abstract class PoolBase<E extends ExecutionEnvironment> {
  /** Environments that have not ended, by ID. */
  protected readonly live = new Map<string, E>();
  /** How many environments exist or are starting. */
  protected count = 0;
  protected closed = false;
  readonly #waiters: Waiting<E>[] = [];
  readonly #starting = new Set<Promise<unknown>>();
  /** The last environments that ended, for diagnostics. */
  readonly #ended: E[] = [];
  /**
   * Runs a function in the async context the pool was made in: an environment belongs to the
   * pool, not to the invocation that happened to start it, so its process's streams and timers
   * must not carry that invocation's AsyncLocalStorage values (its `Tail` capture) for good.
   */
  readonly #outside = AsyncLocalStorage.snapshot();

  /** An environment for one invocation (the pool is open). */
  protected abstract acquire(): Promise<Lease<E>>;

  /** Starts environment `id` (in the pool's own async context). */
  protected abstract launch(id: string): Promise<InitResult & { readonly environment: E }>;

  /** Called synchronously with a leased environment, right before its `invoke`. */
  protected leased(_environment: E): void {}

  /** Called with an environment that started for an invocation, before its lease goes back. */
  protected started(_environment: E): void {}

  /** Called at `close`, once the waiting invocations have failed. */
  protected closing(): void {}

  /** Runs one invocation in an environment of the pool; a function error is an outcome. */
  async invoke(event: unknown, options: InvokeOptions = {}): Promise<PoolInvocation> {
    // An event that is not JSON (a BigInt, a cycle) throws here, before it holds an environment.
    JSON.stringify(event ?? null);
    const lease = await (this.closed ? Promise.reject(closedError()) : this.acquire());
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
    // Synchronously: the environment counts the invocation before anything else may look.
    this.leased(environment);
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
    const listed = [...(ended ? this.#ended : []), ...this.live.values()];
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
    this.closed = true;
    for (const waiter of this.#waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(closedError());
    }
    this.closing();
    await Promise.allSettled([...this.#starting]);
    await Promise.all([...this.live.values()].map((e) => e.shutdown('spindown')));
  }

  /**
   * Waits, first come first served, for an environment, within `maxWaitMs` (0: at once); then
   * fails with `TooManyRequestsException` and `Rate Exceeded. (<busy>)`.
   */
  protected wait(maxWaitMs: number, busy: string): Promise<Lease<E>> {
    const throttled = () =>
      new EnvironmentPoolError(POOL_ERROR.TooManyRequests, `Rate Exceeded. (${busy})`);
    if (maxWaitMs === 0) return Promise.reject(throttled());
    return new Promise<Lease<E>>((resolve, reject) => {
      const waiter: Waiting<E> = {
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

  /** How many invocations wait for an environment. */
  protected waiting(): number {
    return this.#waiters.length;
  }

  /** The first waiting invocation, no longer timed. */
  protected nextWaiter(): Waiter<E> | undefined {
    const waiter = this.#waiters.shift();
    if (waiter) clearTimeout(waiter.timer);
    return waiter;
  }

  /** A new environment for an invocation; an init failure is a lease that says so. */
  protected start(): Promise<Lease<E>> {
    const id = randomUUID().slice(0, 8);
    this.count += 1;
    const started = this.#outside(() => this.launch(id)).then(async (init): Promise<Lease<E>> => {
      if (!init.ok) return { ok: false, environmentId: id, ...init.failure, initMs: init.initMs };
      this.live.set(id, init.environment);
      if (this.closed) {
        await init.environment.shutdown('spindown');
        throw closedError();
      }
      this.started(init.environment);
      return { ok: true, environment: init.environment, coldStart: true, initMs: init.initMs };
    });
    this.#starting.add(started);
    void started.finally(() => this.#starting.delete(started)).catch(() => undefined);
    return started;
  }

  /**
   * An environment ended (idle shutdown, timeout, crash, close): forgotten, kept for diagnostics;
   * returns the first waiting invocation, which its place goes to (none once closed).
   */
  protected ended(environment: E): Waiter<E> | undefined {
    this.live.delete(environment.id);
    this.#ended.push(environment);
    if (this.#ended.length > 64) this.#ended.shift();
    this.count -= 1;
    if (this.closed) return undefined;
    return this.nextWaiter();
  }
}
