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
 * What it shares with `EnvironmentPool` is pool-base.ts.
 */
import type { CpuPolicy } from '../cpu-share.js';
import { DEFAULT_LAMBDA } from '../lambda-events.js';
import { type ManagedEnvironment, startManagedEnvironment } from './managed-environment.js';
import { EnvironmentPoolError, type Lease, POOL_ERROR, PoolBase } from './pool-base.js';

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

export class ManagedInstancesPool extends PoolBase<ManagedEnvironment> {
  readonly #o: Required<
    Omit<ManagedInstancesPoolOptions, 'onLog' | 'cpu' | 'region' | 'maxWaitMs'>
  > &
    Pick<ManagedInstancesPoolOptions, 'onLog' | 'cpu'> & { region: string; maxWaitMs: number };
  /** Slots handed to invocations that have not called the environment's `invoke` yet. */
  readonly #reserved = new Map<string, number>();

  constructor(options: ManagedInstancesPoolOptions) {
    super();
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

  protected override leased(environment: ManagedEnvironment) {
    this.#reserve(environment, -1);
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
    for (const environment of this.live.values()) {
      const state = environment.state();
      if (state !== 'idle' && state !== 'busy') continue;
      if (this.#load(environment) >= this.#o.maxConcurrency) continue;
      if (!best || this.#load(environment) < this.#load(best)) best = environment;
    }
    if (best) this.#reserve(best, 1);
    return best;
  }

  protected override acquire(): Promise<Lease<ManagedEnvironment>> {
    const free = this.#free();
    if (free) return Promise.resolve({ ok: true, environment: free, coldStart: false });
    if (this.count < this.#o.maxEnvironments) return this.start();
    const { maxWaitMs, maxEnvironments, maxConcurrency } = this.#o;
    return this.wait(
      maxWaitMs,
      () =>
        new EnvironmentPoolError(
          POOL_ERROR.TooManyRequests,
          `Rate Exceeded. (${maxEnvironments} environments × ${maxConcurrency} invocations busy; no slot free within ${maxWaitMs} ms)`,
        ),
    );
  }

  protected override launch(id: string) {
    const o = this.#o;
    return startManagedEnvironment({
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
    });
  }

  protected override started(environment: ManagedEnvironment) {
    // This invocation's slot; the others go to whoever waits meanwhile.
    this.#reserve(environment, 1);
    this.#slotFree();
  }

  /** A slot is free somewhere: to the first waiters, while slots last. */
  #slotFree() {
    while (!this.closed && this.waiting() > 0) {
      const free = this.#free();
      if (!free) return;
      this.nextWaiter()?.resolve({ ok: true, environment: free, coldStart: false });
    }
  }

  #gone(environment: ManagedEnvironment) {
    const waiter = this.ended(environment);
    if (!waiter) return;
    this.start().then((slot) => {
      // `start` reserved its slot for the invocation that started it: this waiter.
      if (slot.ok) waiter.resolve({ ok: true, environment: slot.environment, coldStart: false });
      else waiter.reject(new Error(`${slot.errorType}: ${slot.errorMessage}`));
    }, waiter.reject);
  }
}
