/**
 * How the broker treats a failing Open API, with cockatiel policies:
 * - transient failures (connection errors, timeouts, HTTP 5xx and 429) are retried with
 *   exponential backoff and full jitter, honouring the upstream's Retry-After, and never past
 *   the caller's deadline;
 * - a circuit breaker per connection opens after repeated transient failures, so that an
 *   outage is not hammered by every request; valid cached tokens keep being served meanwhile.
 * Rejections and malformed answers are never retried: asking again would not change them.
 */
import {
  BrokenCircuitError,
  type CircuitBreakerPolicy,
  ConsecutiveBreaker,
  circuitBreaker,
  handleWhen,
  type IBackoff,
  type IBackoffFactory,
  type IRetryBackoffContext,
  retry,
} from 'cockatiel';
import type { Deadline } from '../clock.js';
import { UpstreamUnavailableError } from '../errors.js';

export interface ResilienceOptions {
  /** Attempts per upstream request, first one included. */
  readonly maxAttempts: number;
  /** First backoff ceiling, doubled per attempt up to `maxDelayMs` (full jitter below it). */
  readonly baseDelayMs: number;
  readonly maxDelayMs: number;
  /** Consecutive transient failures that open a connection's circuit. */
  readonly circuitThreshold: number;
  /** How long an open circuit refuses calls before letting one through. */
  readonly circuitHalfOpenAfterMs: number;
  readonly random?: () => number;
  /** Told when a connection's circuit opens, half-opens or closes again. */
  readonly onCircuitChange?: (connection: string, state: 'open' | 'half-open' | 'closed') => void;
}

export const DEFAULT_RESILIENCE: ResilienceOptions = {
  maxAttempts: 3,
  baseDelayMs: 100,
  maxDelayMs: 2_000,
  circuitThreshold: 5,
  circuitHalfOpenAfterMs: 10_000,
};

/** Worth asking again: the upstream or the network failed, not the request. */
export const isTransient = (error: unknown): error is UpstreamUnavailableError =>
  // An access-token request whose outcome is unknown is never retried: its code is single-use,
  // and a second request could land after the first (each revoking the tokens before it).
  error instanceof UpstreamUnavailableError && !error.outcomeUnknown;

/** What the upstream's Retry-After asked for, in ms (0 when it said nothing). */
const upstreamRetryAfterMs = (error: unknown): number =>
  error instanceof UpstreamUnavailableError ? (error.upstreamRetryAfterSeconds ?? 0) * 1000 : 0;

/** Full-jitter exponential backoff that waits at least what Retry-After asks for. */
export class RetryAfterBackoff implements IBackoffFactory<IRetryBackoffContext<unknown>> {
  constructor(
    private readonly options: Pick<ResilienceOptions, 'baseDelayMs' | 'maxDelayMs' | 'random'>,
    /** The longest a wait may be: the time left before the caller's deadline. */
    private readonly budgetMs: () => number,
  ) {}

  next(context: IRetryBackoffContext<unknown>): IBackoff<IRetryBackoffContext<unknown>> {
    const { baseDelayMs, maxDelayMs, random = Math.random } = this.options;
    const ceiling = Math.min(maxDelayMs, baseDelayMs * 2 ** Math.max(0, context.attempt - 1));
    const error = 'error' in context.result ? context.result.error : undefined;
    const retryAfterMs = upstreamRetryAfterMs(error);
    const duration = Math.max(
      0,
      Math.min(Math.max(random() * ceiling, retryAfterMs), this.budgetMs()),
    );
    return { duration, next: (next) => this.next(next) };
  }
}

export class UpstreamResilience {
  readonly #breakers = new Map<string, CircuitBreakerPolicy>();

  constructor(private readonly options: ResilienceOptions = DEFAULT_RESILIENCE) {}

  /**
   * Runs `attempt` for `connection` under the breaker and the retry policy. Retries stop when
   * fewer than `minAttemptMs` remain before `deadline`, and no backoff outlasts it: both judged
   * on the monotonic clock, so a wall clock stepped between attempts stretches no retry (I3).
   */
  async execute<T>(
    connection: string,
    deadline: Deadline,
    attempt: () => Promise<T>,
    minAttemptMs = 200,
  ): Promise<T> {
    const remaining = () => deadline.leftMs();
    // No retry when the upstream asks for a longer pause than the caller can wait: the caller
    // is better answered now, with that Retry-After, than at its deadline.
    const policy = retry(
      handleWhen(
        (error) => isTransient(error) && remaining() - minAttemptMs > upstreamRetryAfterMs(error),
      ),
      {
        maxAttempts: this.options.maxAttempts - 1,
        backoff: new RetryAfterBackoff(this.options, () => remaining() - minAttemptMs),
      },
    );
    try {
      return await this.#breaker(connection).execute(() => policy.execute(attempt));
    } catch (error) {
      if (error instanceof BrokenCircuitError) {
        const seconds = Math.ceil(this.options.circuitHalfOpenAfterMs / 1000);
        throw new UpstreamUnavailableError(
          `The Open API failed repeatedly for connection '${connection}'; calls are paused for up to ${seconds}s`,
          { retryAfterSeconds: seconds, cause: error },
        );
      }
      throw error;
    }
  }

  #breaker(connection: string): CircuitBreakerPolicy {
    let breaker = this.#breakers.get(connection);
    if (!breaker) {
      // Every outage counts towards the breaker, unknown outcomes included (they are timeouts).
      breaker = circuitBreaker(
        handleWhen((error) => error instanceof UpstreamUnavailableError),
        {
          halfOpenAfter: this.options.circuitHalfOpenAfterMs,
          breaker: new ConsecutiveBreaker(this.options.circuitThreshold),
        },
      );
      const notify = this.options.onCircuitChange;
      if (notify) {
        breaker.onBreak(() => notify(connection, 'open'));
        breaker.onHalfOpen(() => notify(connection, 'half-open'));
        breaker.onReset(() => notify(connection, 'closed'));
      }
      this.#breakers.set(connection, breaker);
    }
    return breaker;
  }
}
