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
 * unchanged. What it shares with `ManagedInstancesPool` is pool-base.ts.
 */
import type { CpuPolicy } from '../cpu-share.js';
import { DEFAULT_LAMBDA } from '../lambda-events.js';
import { type ExecutionEnvironment, startEnvironment } from './environment.js';
import { type CommonPoolOptions, environmentOptions, type Lease, PoolBase } from './pool-base.js';

export {
  EnvironmentPoolError,
  type EnvironmentSnapshot,
  POOL_ERROR,
  type PoolErrorCode,
  type PoolInvocation,
} from './pool-base.js';

/**
 * `maxEnvironments`: the concurrency, default 4. `timeoutMs` bounds an invocation and its
 * extensions' work. `memoryMb`: default 256. `cpu`'s quota is Lambda's share of `memoryMb`.
 */
export interface EnvironmentPoolOptions extends CommonPoolOptions {
  /** Shut an environment down after this long frozen. Default 300,000 (5 minutes). */
  readonly idleShutdownMs?: number;
  /** Stop environments between invocations. Default true; false keeps them running. */
  readonly freeze?: boolean;
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

export class EnvironmentPool extends PoolBase<ExecutionEnvironment> {
  readonly #options: ReturnType<typeof settle>;
  /** Environments waiting for an invocation, the most recently used last. */
  readonly #idle: ExecutionEnvironment[] = [];
  readonly #idleTimers = new Map<string, NodeJS.Timeout>();

  constructor(options: EnvironmentPoolOptions) {
    super();
    this.#options = settle(options);
  }

  protected override closing() {
    for (const timer of this.#idleTimers.values()) clearTimeout(timer);
    this.#idleTimers.clear();
    this.#idle.length = 0;
  }

  protected override acquire(): Promise<Lease<ExecutionEnvironment>> {
    // 1. A warm environment, the most recently used first.
    const warm = this.#idle.pop();
    if (warm) {
      this.#unidle(warm);
      return Promise.resolve({ ok: true, environment: warm, coldStart: false });
    }
    // 2. A new one, while under the maximum.
    if (this.count < this.#options.maxEnvironments) return this.start();
    // 3. Wait for one to be free, within maxWaitMs.
    const { maxWaitMs, maxEnvironments } = this.#options;
    return this.wait(
      maxWaitMs,
      `${maxEnvironments} environments busy; none free within ${maxWaitMs} ms`,
    );
  }

  protected override launch(id: string) {
    const o = this.#options;
    return startEnvironment({
      ...environmentOptions(id, o),
      freeze: o.freeze,
      onReady: (environment) => this.#ready(environment),
      onEnded: (environment) => this.#gone(environment),
    });
  }

  /** An environment finished an invocation: to the first waiter, else idle until reused. */
  #ready(environment: ExecutionEnvironment) {
    if (this.closed) return;
    const waiter = this.nextWaiter();
    if (waiter) {
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
    const waiter = this.ended(environment);
    if (waiter) this.start().then(waiter.resolve, waiter.reject);
  }
}
