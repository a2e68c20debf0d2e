import { DEFAULT_LAMBDA } from '../lambda-events.js';
import { type ManagedEnvironment, startManagedEnvironment } from './managed-environment.js';
import { type CommonPoolOptions, environmentOptions, type Lease, PoolBase } from './pool-base.js';

/**
 * `maxEnvironments`: default 3 (Lambda's default minimum for a capacity provider). `timeoutMs`
 * is reported to the caller, not enforced on the function. `memoryMb`: default 2,048, the
 * smallest function there. `cpu`'s quota is the environment's `vcpus`.
 */
export interface ManagedInstancesPoolOptions extends CommonPoolOptions {
  /** Invocations at once per environment (AWS_LAMBDA_MAX_CONCURRENCY). Default 64 (one vCPU). */
  readonly maxConcurrency?: number;
  /** Worker threads per environment, unless the function's env sets it. Default 1, as the stack. */
  readonly workers?: number;
  /** vCPUs per environment (its CPU quota). Default 1: 2,048 MB at 2 GiB per vCPU. */
  readonly vcpus?: number;
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
      `${maxEnvironments} environments × ${maxConcurrency} invocations busy; no slot free within ${maxWaitMs} ms`,
    );
  }

  protected override launch(id: string) {
    const o = this.#o;
    return startManagedEnvironment({
      ...environmentOptions(id, o),
      maxConcurrency: o.maxConcurrency,
      workers: o.workers,
      vcpus: o.vcpus,
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
