/**
 * The protocol's timing, part 2: **liveness estimates**, which only tune speed (how soon to
 * read again, when to try a refresh, how long a refresh may take). They may be wrong; safety
 * never rests on them. Where an estimate stands in for a bound of `bounds.ts`, it is never
 * below it (a property test checks each pair).
 */
import type { TokenRecord } from '../../ports.js';
import { countdownFor, leaseNeedsMs, type RefreshSettings, windowMs } from './bounds.js';
import {
  cutOverRereadMs,
  maxStepWriteMs,
  type ProtocolTiming,
  pollBaseMs,
  pollCapMs,
  readReserveFloorMs,
  storeReserveMs,
} from './protocol-timing.js';

/** XFetch's β (an algorithm constant, no unit): 1, the paper's optimum for a single recompute. */
export const XFETCH_BETA = 1;

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
  issuanceMs = settings.timing.defaultIssuanceMs,
): boolean => {
  const { timing } = settings;
  const half = windowMs(record, settings) / 2;
  const lead = Math.min(half, countdownFor(record, settings) * timing.countdownStepMs);
  const earliness = Math.min(half - lead, -issuanceMs * XFETCH_BETA * Math.log(1 - draw));
  return now + earliness >= record.expiresAt - half - lead;
};

/**
 * How long a background refresh with `countdown` may take, ms: each step a store round trip
 * after its wait, then the authorization and the POST. Never below `leaseNeedsMs(countdown)`.
 */
export const refreshBudgetMs = (
  countdown: number,
  upstreamTimeoutMs: number,
  timing: ProtocolTiming,
): number =>
  Math.max(
    countdown * (timing.countdownStepMs + timing.storeRoundTripMs) +
      2 * upstreamTimeoutMs +
      storeReserveMs(timing),
    leaseNeedsMs(countdown, timing),
  );

/** Kept before a deadline for one more read, ms: twice the last, at least `readReserveFloorMs`. */
export const readReserveMs = (lastReadMs: number | undefined, timing: ProtocolTiming): number =>
  Math.max(readReserveFloorMs(timing), 2 * (lastReadMs ?? 0));

/**
 * When a countdown read at `checkedAt` should have ended and its successor be stored (local ms):
 * each step is a lease write after the step's wait, then the POST (about half an issuance, a slow
 * one not waited for whole) and the token write. Never before the countdown's announced end.
 *
 * A step's length is the holder's word when it gave one (`announcedStepMs`: the step's wait and
 * its own last write's round trip), else the step's wait and this reader's last read's round
 * trip, as a guess at the holder's write. On a global table the two differ by region: a reader
 * in a far region that guessed from its own read slept up to 0.6 s past a cut-over of nine steps
 * (`regions-three`, 2026-11-25), and one whose read was a cold start's (144 ms) 1.9 s.
 */
export const cutOverExpectedAt = (
  checkedAt: number,
  countdown: number,
  issuanceMs: number,
  lastReadMs: number | undefined,
  timing: ProtocolTiming,
  announcedStepMs?: number,
): number => {
  const step = stepEstimateMs(lastReadMs, timing, announcedStepMs);
  return checkedAt + countdown * step + lastStretchMs(issuanceMs, step, timing);
};

/**
 * How long one countdown step takes (ms): the holder's word when it gave one, never under the
 * step's own wait nor over it plus the longest step write the protocol allows; else the wait and
 * this reader's last read's round trip (at most `maxStepWriteMs`).
 */
export const stepEstimateMs = (
  lastReadMs: number | undefined,
  timing: ProtocolTiming,
  announcedStepMs?: number,
): number =>
  announcedStepMs === undefined
    ? timing.countdownStepMs + Math.min(lastReadMs ?? 0, maxStepWriteMs(timing))
    : Math.min(
        Math.max(announcedStepMs, timing.countdownStepMs),
        timing.countdownStepMs + timing.storeRoundTripMs,
      );

/**
 * From the countdown's last step to its successor stored (ms): the POST (about half an issuance,
 * a slow one not waited for whole) and the token write.
 */
export const lastStretchMs = (issuanceMs: number, stepMs: number, timing: ProtocolTiming): number =>
  Math.min(issuanceMs / 2, pollCapMs(timing)) + (stepMs - timing.countdownStepMs);

/**
 * How long to wait before reading a lease held elsewhere again, ms: full jitter below a doubling
 * ceiling, at least 1 ms; and no sooner than the lease's countdown runs out (no token can come
 * before). At a cut-over the token comes one access-token round trip after the countdown ends:
 * the ceiling starts there, so a waiter reads a few times, not a dozen.
 *
 * @param sinceReadMs time since the read that saw `countdown` was sent
 */
export const pollWaitMs = (
  input: {
    readonly countdown: number;
    readonly sinceReadMs: number;
    readonly replacing: boolean;
    readonly issuanceMs: number;
    readonly waits: number;
    readonly draw: number;
  },
  timing: ProtocolTiming,
): number => {
  const first = pollBaseMs(timing);
  const base = input.replacing ? Math.max(first, input.issuanceMs / 2) : first;
  const ceiling = Math.min(pollCapMs(timing), base * 2 ** input.waits);
  const counting = (input.countdown - 1) * timing.countdownStepMs - input.sinceReadMs;
  return Math.max(1, input.draw * ceiling, counting);
};

/**
 * Whether memory, which read a countdown long before its end, should read it once more now:
 * `cutOverRereadMs` before the end it proves (liveness: it only shortens serving).
 */
export const rereadNearCutOver = (
  entry: { readonly checkedAt: number; readonly until: number; readonly lease?: unknown },
  now: number,
  timing: ProtocolTiming,
): boolean =>
  entry.lease !== undefined &&
  entry.until - entry.checkedAt > 2 * cutOverRereadMs(timing) &&
  now >= entry.until - cutOverRereadMs(timing);
