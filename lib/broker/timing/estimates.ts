/**
 * The protocol's timing, part 2: **liveness estimates**, which only tune speed (how soon to
 * read again, when to try a refresh, how long a refresh may take). They may be wrong; safety
 * never rests on them. Where an estimate stands in for a bound of `bounds.ts`, it is never
 * below it (a property test checks each pair).
 */
import type { TokenRecord } from '../../ports.js';
import {
  COUNTDOWN_STEP_MS,
  countdownFor,
  leaseNeedsMs,
  type RefreshSettings,
  STORE_RESERVE_MS,
  windowMs,
} from './bounds.js';

/** Polling a lease held elsewhere: first wait and cap, ms (full jitter in between). */
export const POLL_BASE_MS = 25;
export const POLL_CAP_MS = 500;
/** The most a reader counts per countdown step for the holder's lease write, ms. */
export const MAX_STEP_WRITE_MS = 15;
/**
 * Kept before the deadline for the read that ends a wait, ms (at least twice the last measured
 * read): a read sent with no time left could only fail (I3, review finding R3).
 */
export const READ_RESERVE_MS = 50;
/**
 * A countdown read more than twice this before its end is read once more this close to its end,
 * ms: the cut-over is then aimed from a countdown a few steps long, not from one a re-check long
 * (each step lasts a write longer than 250 ms, which a reader cannot count on).
 */
export const CUT_OVER_REREAD_MS = 1_000;
/**
 * Kept free before the function's deadline to serialise and return the answer, ms (the edge's
 * `deadlineOf`; the settings check counts it in the least timeout a refresh needs).
 */
export const ANSWER_MARGIN_MS = 500;
/** What a refresh's budget allows for each countdown step's lease write, ms. */
export const STEP_WRITE_ALLOWANCE_MS = 50;
/** XFetch β: 1 is the value the paper shows optimal for a single recompute. */
export const XFETCH_BETA = 1;
/** Issuance duration assumed before one was measured, ms (two loopback-to-internet trips). */
export const DEFAULT_ISSUANCE_MS = 300;

/**
 * XFetch (Vattani et al., VLDB 2015), aimed so that the cut-over lands at the middle of the
 * refresh window: a try starts a countdown, so it is aimed a countdown earlier (never before
 * the window starts). XFetch's exponential tail is capped because a busy fleet draws it hundreds
 * of times a second. It decides when to *try*; the lease decides who mints.
 *
 * @param draw uniform in [0, 1)
 * @param issuanceMs the last measured issuance duration, countdown excluded (XFetch's δ)
 */
export const dueForRefresh = (
  record: TokenRecord,
  now: number,
  settings: RefreshSettings,
  draw: number,
  issuanceMs = DEFAULT_ISSUANCE_MS,
): boolean => {
  const half = windowMs(record, settings) / 2;
  const lead = Math.min(half, countdownFor(record, settings) * COUNTDOWN_STEP_MS);
  const earliness = Math.min(half - lead, -issuanceMs * XFETCH_BETA * Math.log(1 - draw));
  return now + earliness >= record.expiresAt - half - lead;
};

/**
 * How long a background refresh with `countdown` may take, ms: each step a store round trip
 * after its wait, then the authorization and the POST. Never below `leaseNeedsMs(countdown)`.
 */
export const refreshBudgetMs = (countdown: number, upstreamTimeoutMs: number): number =>
  Math.max(
    countdown * (COUNTDOWN_STEP_MS + STEP_WRITE_ALLOWANCE_MS) +
      2 * upstreamTimeoutMs +
      STORE_RESERVE_MS,
    leaseNeedsMs(countdown),
  );

/** Time kept before a deadline for one more read of the store, ms (see READ_RESERVE_MS). */
export const readReserveMs = (lastReadMs: number | undefined): number =>
  Math.max(READ_RESERVE_MS, 2 * (lastReadMs ?? 0));

/**
 * When a countdown read at `checkedAt` should have ended and its successor be stored (local ms):
 * each step is a lease write after the step's wait, then the POST (about half an issuance, a slow
 * one not waited for whole) and the token write. Never before the countdown's announced end.
 */
export const cutOverExpectedAt = (
  checkedAt: number,
  countdown: number,
  issuanceMs: number,
  lastReadMs: number | undefined,
): number => {
  const roundTrip = Math.min(issuanceMs / 2, POLL_CAP_MS);
  const write = Math.min(lastReadMs ?? 0, MAX_STEP_WRITE_MS);
  return checkedAt + countdown * (COUNTDOWN_STEP_MS + write) + roundTrip + write;
};

/**
 * How long to wait before reading a lease held elsewhere again, ms: full jitter below a doubling
 * ceiling, at least 1 ms; and no sooner than the lease's countdown runs out (no token can come
 * before). At a cut-over the token comes one access-token round trip after the countdown ends:
 * the ceiling starts there, so a waiter reads a few times, not a dozen.
 *
 * @param sinceReadMs time since the read that saw `countdown` was sent
 */
export const pollWaitMs = (input: {
  readonly countdown: number;
  readonly sinceReadMs: number;
  readonly replacing: boolean;
  readonly issuanceMs: number;
  readonly waits: number;
  readonly draw: number;
}): number => {
  const base = input.replacing ? Math.max(POLL_BASE_MS, input.issuanceMs / 2) : POLL_BASE_MS;
  const ceiling = Math.min(POLL_CAP_MS, base * 2 ** input.waits);
  const counting = (input.countdown - 1) * COUNTDOWN_STEP_MS - input.sinceReadMs;
  return Math.max(1, input.draw * ceiling, counting);
};

/**
 * Whether memory, which read a countdown long before its end, should read it once more now:
 * `CUT_OVER_REREAD_MS` before the end it proves (liveness: it only shortens serving).
 */
export const rereadNearCutOver = (
  entry: { readonly checkedAt: number; readonly until: number; readonly lease?: unknown },
  now: number,
): boolean =>
  entry.lease !== undefined &&
  entry.until - entry.checkedAt > 2 * CUT_OVER_REREAD_MS &&
  now >= entry.until - CUT_OVER_REREAD_MS;
