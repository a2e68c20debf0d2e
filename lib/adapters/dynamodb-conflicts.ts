/**
 * Replicated write conflicts on a multi-Region strongly consistent (MRSC) global table (issue
 * 26). MRSC answers concurrent writes to one item from different regions with
 * `ReplicatedWriteConflictException` (HTTP 400): the write was **not applied**, and is safe to
 * send again. The SDK retries it already, but only within its own `maxAttempts` (2 here: one
 * retry, 0–24 ms after the first attempt; see docs/operations.md, "Replicated write
 * conflicts"), and about a third of the conflicts in the simulation still reached the
 * broker, as a failed refresh or a "lost" lease. So the store retries them itself: a conflict is
 * never an unknown outcome, a lost lease or an unavailable store while time remains.
 *
 * Full jitter (a uniform draw in [0, min(cap, base × 2^n)), AWS's "Exponential Backoff and
 * Jitter"): the write it raced is one cross-region round trip from applied (25–100 ms in the
 * three-region chaos world, tens of ms on AWS), so a first retry inside 25 ms and later ones
 * spread over up to 200 ms let it land, and keep two regions that conflict from retrying in
 * step. The base is the SDK's own for DynamoDB (25 ms, `defaultBaseDelay` in
 * @aws-sdk/client-dynamodb's runtime config).
 */
import {
  ConditionalCheckFailedException,
  ReplicatedWriteConflictException,
} from '@aws-sdk/client-dynamodb';
import type { Clock } from '../clock.js';
import type { LeaseRef, LeaseTerms, StoreCall } from '../ports.js';

export interface ConflictRetry {
  /** First backoff's upper bound (ms); doubled per retry. */
  readonly baseMs: number;
  /** Largest backoff's upper bound (ms). */
  readonly capMs: number;
  /**
   * How long a call may go on retrying conflicts when its caller gave no deadline (ms): at most
   * what one call may already take under the SDK's own bounds (`maxAttempts` × request
   * timeout), so a conflict holds nobody longer than a store that does not answer would.
   */
  readonly budgetMs: number;
}

export const DEFAULT_CONFLICT_RETRY: ConflictRetry = { baseMs: 25, capMs: 200, budgetMs: 2_000 };

/** Whether `error` is MRSC's "not applied: another region's write to this item raced it". */
export const isReplicatedWriteConflict = (error: unknown): boolean =>
  error instanceof ReplicatedWriteConflictException ||
  (error as { name?: unknown } | undefined)?.name === 'ReplicatedWriteConflictException';

/**
 * Runs `attempt` until it answers with anything but a conflict, backing off with full jitter
 * between attempts, while the next attempt can still start before `untilMs` (monotonic). When it
 * cannot, the last conflict is thrown: the write was not applied.
 *
 * @param attempt gets the number of conflicts seen before it (0 on the first attempt).
 */
export const retryConflicts = async <T>(
  attempt: (conflictsBefore: number) => Promise<T>,
  clock: Pick<Clock, 'monotonic' | 'random' | 'sleep'>,
  retry: ConflictRetry,
  untilMs: number,
): Promise<T> => {
  for (let conflicts = 0; ; conflicts += 1) {
    try {
      return await attempt(conflicts);
    } catch (error) {
      if (!isReplicatedWriteConflict(error)) throw error;
      const backoffMs = Math.floor(
        clock.random() * Math.min(retry.capMs, retry.baseMs * 2 ** conflicts),
      );
      if (clock.monotonic() + backoffMs >= untilMs) throw error;
      await clock.sleep(backoffMs);
    }
  }
};

export type Bound = StoreCall | { readonly untilMs: number };

/** The store's conflict retries: its writes, bounded by each call, and its leases' lapses. */
export class ConflictRetries {
  readonly #retry: ConflictRetry;
  /**
   * When each lease version this store wrote lapses, on this container's monotonic clock (sent
   * at + duration: no other container takes it over before): how long a conflicting release
   * is worth retrying. Entries go once lapsed.
   */
  readonly #lapses = new Map<string, number>();

  constructor(
    private readonly clock: Pick<Clock, 'monotonic' | 'random' | 'sleep'>,
    retry: Partial<ConflictRetry> = {},
  ) {
    this.#retry = { ...DEFAULT_CONFLICT_RETRY, ...retry };
  }

  /** Runs `attempt`, retrying conflicts until the call's bound. */
  retry<T>(bound: Bound, attempt: (conflictsBefore: number) => Promise<T>): Promise<T> {
    const untilMs = this.#until(bound);
    return retryConflicts(attempt, this.clock, this.#retry, untilMs);
  }

  /**
   * Runs a conditional write, retrying conflicts (not applied) within the call's bound. A failed
   * condition is an answer, not an error: false, or `'refused after a conflict'` when it
   * answered a retry (the caller may re-read what happened).
   */
  async attempt(
    bound: Bound,
    write: () => Promise<unknown>,
  ): Promise<boolean | 'refused after a conflict'> {
    let conflicts = 0;
    try {
      await this.retry(bound, (before) => {
        conflicts = before;
        return write();
      });
      return true;
    } catch (error) {
      if (error instanceof ConditionalCheckFailedException) {
        return conflicts > 0 ? 'refused after a conflict' : false;
      }
      throw error;
    }
  }

  /** {@link ConflictRetries.attempt}, where a refusal is false however it came. */
  async conditional(bound: Bound, write: () => Promise<unknown>): Promise<boolean> {
    return (await this.attempt(bound, write)) === true;
  }

  /** Notes when a lease version this store sends lapses. */
  wrote(terms: Pick<LeaseTerms, 'version' | 'durationMs'>): void {
    const now = this.clock.monotonic();
    for (const [version, lapses] of this.#lapses) if (lapses <= now) this.#lapses.delete(version);
    this.#lapses.set(terms.version, now + terms.durationMs);
  }

  /** A release's bound: until the later of its versions lapses, and at least the call's bound. */
  untilLapsed(lease: LeaseRef, call: StoreCall): { readonly untilMs: number } {
    const lapses = Math.max(
      this.#lapses.get(lease.version) ?? 0,
      lease.unanswered ? (this.#lapses.get(lease.unanswered) ?? 0) : 0,
    );
    return { untilMs: Math.max(lapses, this.#until(call)) };
  }

  /**
   * Where a call's bound ends (monotonic ms): its own end, or its deadline's; undefined for a
   * call with neither (its conflicts are retried for the budget, {@link #until}).
   */
  endOf(bound: Bound): number | undefined {
    return 'untilMs' in bound ? bound.untilMs : bound.deadline?.at;
  }

  #until(bound: Bound): number {
    return this.endOf(bound) ?? this.clock.monotonic() + this.#retry.budgetMs;
  }
}
