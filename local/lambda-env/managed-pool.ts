/**
 * A function's Lambda Managed Instances execution environments (issue 37), the way
 * `EnvironmentPool` (pool.ts) keeps Lambda's own: the same surface (`invoke`, `asHandler`,
 * `environments`, `close`), so that `startLambdaContainer` fronts either. The differences:
 * - an invocation goes to a running environment with a free slot (the least busy; up to
 *   `maxConcurrency` invocations at once in each), else to a new one while fewer than
 *   `maxEnvironments` exist, else it waits for a slot (`maxWaitMs`, then
 *   `TooManyRequestsException`, as pool.ts);
 * - environments are never frozen and never shut down for being idle (Lambda keeps a capacity
 *   provider's environments running: three at least, by default); they end at `close`, or when
 *   their runtime exits.
 * AWS starts environments before any invocation and scales them on CPU, asynchronously; here
 * the first invocations start them (their init is reported as `initMs`, as a cold start).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { setImmediate as nextTurn } from 'node:timers/promises';
import type { CpuPolicy } from '../cpu-share.js';
import { DEFAULT_LAMBDA, type LambdaHandler } from '../lambda-events.js';
import type { InvokeOptions } from './environment.js';
import { type ManagedEnvironment, startManagedEnvironment } from './managed-environment.js';
import {
  EnvironmentPoolError,
  type EnvironmentSnapshot,
  POOL_ERROR,
  type PoolInvocation,
} from './pool.js';

export interface ManagedInstancesPoolOptions {
  readonly bundle: string;
  /** Path of the built `local/lambda-env/managed-bootstrap.mjs`. */
  readonly bootstrap: string;
  readonly env?: Readonly<Record<string, string>>;
  /** Environments at most. Default 3 (Lambda's default minimum for a capacity provider). */
  readonly maxEnvironments?: number;
  /** Invocations at once per environment (AWS_LAMBDA_MAX_CONCURRENCY). Default 64 (one vCPU). */
  readonly maxConcurrency?: number;
  /** Worker threads per environment, unless the function's env sets it. Default 1, as the stack. */
  readonly workers?: number;
  /** vCPUs per environment (its CPU quota). Default 1: 2,048 MB at 2 GiB per vCPU. */
  readonly vcpus?: number;
  /** The function's timeout: reported to the caller, not enforced on the function. Default 10,000. */
  readonly timeoutMs?: number;
  readonly shutdownDeadlineMs?: number;
  /** How long an invocation waits for a slot at the maximum. Default `timeoutMs`. */
  readonly maxWaitMs?: number;
  readonly initTimeoutMs?: number;
  readonly functionName?: string;
  readonly region?: string;
  readonly accountId?: string;
  /** AWS_LAMBDA_FUNCTION_MEMORY_SIZE. Default 2,048, the smallest function there. */
  readonly memoryMb?: number;
  readonly onLog?: ((line: string, environmentId: string) => void) | undefined;
  readonly cpu?: CpuPolicy | undefined;
  readonly loopDelay?: boolean;
}

interface Waiter {
  readonly resolve: (environment: ManagedEnvironment) => void;
  readonly reject: (error: Error) => void;
  readonly timer: NodeJS.Timeout;
}

type Slot =
  | {
      readonly ok: true;
      readonly environment: ManagedEnvironment;
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

export class ManagedInstancesPool {
  readonly #o: Required<
    Omit<ManagedInstancesPoolOptions, 'onLog' | 'cpu' | 'region' | 'maxWaitMs'>
  > &
    Pick<ManagedInstancesPoolOptions, 'onLog' | 'cpu'> & { region: string; maxWaitMs: number };
  readonly #environments = new Map<string, ManagedEnvironment>();
  readonly #starting = new Set<Promise<Slot>>();
  readonly #waiters: Waiter[] = [];
  readonly #ended: ManagedEnvironment[] = [];
  /** Slots handed to invocations that have not called the environment's `invoke` yet. */
  readonly #reserved = new Map<string, number>();
  readonly #outside = AsyncLocalStorage.snapshot();
  #count = 0;
  #closed = false;

  constructor(options: ManagedInstancesPoolOptions) {
    if (!options.bundle || !options.bootstrap) {
      throw new TypeError('ManagedInstancesPool: bundle and bootstrap are required');
    }
    const env = options.env ?? {};
    const timeoutMs = options.timeoutMs ?? DEFAULT_LAMBDA.timeoutMs;
    this.#o = {
      bundle: options.bundle,
      bootstrap: options.bootstrap,
      env,
      maxEnvironments: options.maxEnvironments ?? 3,
      maxConcurrency: options.maxConcurrency ?? 64,
      workers: options.workers ?? 1,
      vcpus: options.vcpus ?? 1,
      timeoutMs,
      shutdownDeadlineMs: options.shutdownDeadlineMs ?? 500,
      maxWaitMs: options.maxWaitMs ?? timeoutMs,
      initTimeoutMs: options.initTimeoutMs ?? 10_000,
      functionName: options.functionName ?? DEFAULT_LAMBDA.functionName,
      region: options.region ?? env.AWS_REGION ?? DEFAULT_LAMBDA.region,
      accountId: options.accountId ?? DEFAULT_LAMBDA.accountId,
      memoryMb: options.memoryMb ?? 2048,
      onLog: options.onLog,
      cpu: options.cpu,
      loopDelay: options.loopDelay ?? false,
    };
    for (const name of ['maxEnvironments', 'maxConcurrency', 'workers', 'vcpus'] as const) {
      const value = this.#o[name];
      if (!Number.isInteger(value) || value < 1) {
        throw new RangeError(
          `ManagedInstancesPool: ${name} must be a whole number ≥ 1, not ${value}`,
        );
      }
    }
  }

  async invoke(event: unknown, options: InvokeOptions = {}): Promise<PoolInvocation> {
    JSON.stringify(event ?? null);
    const slot = await this.#acquire();
    if (!slot.ok) {
      return {
        outcome: { ok: false, errorType: slot.errorType, errorMessage: slot.errorMessage },
        requestId: options.requestId || randomUUID(),
        environmentId: slot.environmentId,
        coldStart: true,
        initFailed: true,
        initMs: slot.initMs,
        durationMs: 0,
        billedMs: Promise.resolve(0),
      };
    }
    // Synchronously: the environment counts the invocation before anything else may look.
    this.#reserve(slot.environment, -1);
    const answer = await slot.environment.invoke(event, options);
    return {
      ...answer,
      environmentId: slot.environment.id,
      coldStart: slot.coldStart,
      ...(slot.initMs === undefined ? {} : { initMs: slot.initMs }),
    };
  }

  /** As `EnvironmentPool.asHandler`. */
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
      await nextTurn();
      const { outcome } = invocation;
      if (outcome.ok) return outcome.result;
      const error = new Error(outcome.errorMessage);
      error.name = outcome.errorType;
      throw error;
    };
  }

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

  async close(): Promise<void> {
    this.#closed = true;
    for (const waiter of this.#waiters.splice(0)) {
      clearTimeout(waiter.timer);
      waiter.reject(new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed'));
    }
    await Promise.allSettled([...this.#starting]);
    await Promise.all([...this.#environments.values()].map((e) => e.shutdown('spindown')));
  }

  #load(environment: ManagedEnvironment): number {
    return environment.inFlight() + (this.#reserved.get(environment.id) ?? 0);
  }

  #reserve(environment: ManagedEnvironment, by: number) {
    this.#reserved.set(environment.id, (this.#reserved.get(environment.id) ?? 0) + by);
  }

  /** The running environment with a free slot and the fewest invocations; its slot reserved. */
  #free(): ManagedEnvironment | undefined {
    let best: ManagedEnvironment | undefined;
    for (const environment of this.#environments.values()) {
      const state = environment.state();
      if (state !== 'idle' && state !== 'busy') continue;
      if (this.#load(environment) >= this.#o.maxConcurrency) continue;
      if (!best || this.#load(environment) < this.#load(best)) best = environment;
    }
    if (best) this.#reserve(best, 1);
    return best;
  }

  #acquire(): Promise<Slot> {
    if (this.#closed) {
      return Promise.reject(
        new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed'),
      );
    }
    const free = this.#free();
    if (free) return Promise.resolve({ ok: true, environment: free, coldStart: false });
    if (this.#count < this.#o.maxEnvironments) return this.#start();
    const { maxWaitMs, maxEnvironments, maxConcurrency } = this.#o;
    const throttled = () =>
      new EnvironmentPoolError(
        POOL_ERROR.TooManyRequests,
        `Rate Exceeded. (${maxEnvironments} environments × ${maxConcurrency} invocations busy; no slot free within ${maxWaitMs} ms)`,
      );
    if (maxWaitMs === 0) return Promise.reject(throttled());
    return new Promise<Slot>((resolve, reject) => {
      const waiter: Waiter = {
        resolve: (environment) => resolve({ ok: true, environment, coldStart: false }),
        reject,
        timer: setTimeout(() => {
          this.#waiters.splice(this.#waiters.indexOf(waiter), 1);
          reject(throttled());
        }, maxWaitMs),
      };
      this.#waiters.push(waiter);
    });
  }

  #start(): Promise<Slot> {
    const o = this.#o;
    const id = randomUUID().slice(0, 8);
    this.#count += 1;
    const started = this.#outside(() =>
      startManagedEnvironment({
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
        maxConcurrency: o.maxConcurrency,
        workers: o.workers,
        vcpus: o.vcpus,
        initTimeoutMs: o.initTimeoutMs,
        shutdownDeadlineMs: o.shutdownDeadlineMs,
        onLog: o.onLog && ((line) => o.onLog?.(line, id)),
        cpu: o.cpu,
        loopDelay: o.loopDelay,
        onSlot: () => this.#slotFree(),
        onEnded: (environment) => this.#gone(environment),
      }),
    ).then(async (init): Promise<Slot> => {
      if (!init.ok) return { ok: false, environmentId: id, ...init.failure, initMs: init.initMs };
      this.#environments.set(id, init.environment);
      if (this.#closed) {
        await init.environment.shutdown('spindown');
        throw new EnvironmentPoolError(POOL_ERROR.Closed, 'The environment pool was closed');
      }
      // This invocation's slot; the others go to whoever waits meanwhile.
      this.#reserve(init.environment, 1);
      this.#slotFree();
      return { ok: true, environment: init.environment, coldStart: true, initMs: init.initMs };
    });
    this.#starting.add(started);
    void started.finally(() => this.#starting.delete(started)).catch(() => undefined);
    return started;
  }

  /** A slot is free somewhere: to the first waiters, while slots last. */
  #slotFree() {
    while (!this.#closed && this.#waiters.length > 0) {
      const free = this.#free();
      if (!free) return;
      const waiter = this.#waiters.shift() as Waiter;
      clearTimeout(waiter.timer);
      waiter.resolve(free);
    }
  }

  #gone(environment: ManagedEnvironment) {
    this.#environments.delete(environment.id);
    this.#ended.push(environment);
    if (this.#ended.length > 64) this.#ended.shift();
    this.#count -= 1;
    if (this.#closed) return;
    const waiter = this.#waiters.shift();
    if (!waiter) return;
    clearTimeout(waiter.timer);
    this.#start().then((slot) => {
      // `#start` reserved its slot for the invocation that started it: this waiter.
      if (slot.ok) waiter.resolve(slot.environment);
      else waiter.reject(new Error(`${slot.errorType}: ${slot.errorMessage}`));
    }, waiter.reject);
  }
}
