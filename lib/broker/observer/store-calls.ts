/**
 * Calls to the token store as the observer's loop makes them: failures as callers are told
 * them (a typed error with a stable code, whatever the SDK threw: its message stays in the
 * cause, for the logs), and how long a read may wait after one that went unanswered.
 */
import { StoreUnavailableError } from '../../errors.js';

const MESSAGES = {
  read: 'The token store could not be read; retry shortly',
  'answer in time': 'The token store did not answer in time; retry shortly',
  'take the lease': 'The token store failed to take the lease; retry shortly',
} as const;

export const storeFailure = (what: keyof typeof MESSAGES, cause?: unknown): StoreUnavailableError =>
  new StoreUnavailableError(MESSAGES[what], cause === undefined ? {} : { cause });

/**
 * The shortest wait for a read after the last one failed (ms): a cross-region strong read takes
 * 25–150 ms, a few times that on a loaded host.
 */
const UNREACHABLE_READ_MS = 500;

/**
 * Whether the store answered this container's last read. After one that did not (a region cut
 * off from its replicas, a table down), a read is given a short wait, four of the last measured
 * reads and at least {@link UNREACHABLE_READ_MS}, rather than the caller's whole deadline: a
 * store that still does not answer is told fast (the isolated region's callers waited the SDK's
 * 2 s request timeout each, 14 a run in `regions-isolated-holder`, and a client with several
 * brokers fails over sooner), and one that answers clears it. Liveness only: a read cut short is
 * a failed read, and what memory may serve then is what it proved before (I2).
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
