/**
 * The observer's store calls: failures as callers are told them (a typed error, the SDK's in the
 * cause), and how long a read may wait after one that went unanswered.
 */
import { StoreUnavailableError } from '../../errors.js';

const MESSAGES = {
  read: 'The token store could not be read; retry shortly',
  'answer in time': 'The token store did not answer in time; retry shortly',
  'take the lease': 'The token store failed to take the lease; retry shortly',
} as const;

export const storeFailure = (what: keyof typeof MESSAGES, cause?: unknown): StoreUnavailableError =>
  new StoreUnavailableError(MESSAGES[what], cause === undefined ? {} : { cause });

/** The shortest wait for a read after the last one failed, ms. */
const UNREACHABLE_READ_MS = 500;

/**
 * Whether the store answered this container's last read. After one that did not, a read is
 * given a short wait (four of the last measured, at least {@link UNREACHABLE_READ_MS}) rather
 * than the whole deadline, so an unreachable store is told fast. Liveness only.
 */
export class StoreReachability {
  #unanswered = false;

  /** How long the next read may wait, out of `waitMs`. */
  waitMs(waitMs: number, lastReadMs: number | undefined): number {
    if (!this.#unanswered) return waitMs;
    return Math.min(waitMs, Math.max(UNREACHABLE_READ_MS, 4 * (lastReadMs ?? 0)));
  }

  /** Notes how the last read went. */
  answered(answered: boolean): void {
    this.#unanswered = !answered;
  }
}
