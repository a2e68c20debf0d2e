/**
 * The protocol's liveness estimates: they only tune speed, safety never rests on them. Where one
 * stands in for a bound of `bounds.ts` it is never below it.
 */
import type { Lease, TokenRecord } from '../../ports.js';
import { countdownFor, leaseNeedsMs, type RefreshSettings, windowMs } from './bounds.js';
import {
  type ProtocolTiming,
  pollBaseMs,
  pollCapMs,
  readReserveFloorMs,
  storeReserveMs,
} from './protocol-timing.js';

/** XFetch's β (no unit): 1, the paper's optimum. */
export const XFETCH_BETA = 1;

/**
 * XFetch (Vattani et al., VLDB 2015), aimed so the cut-over lands at the middle of the refresh
 * window (a countdown earlier), its tail capped. It decides when to try; the lease, who mints.
 * @param draw uniform in [0, 1)
 * @param issuanceMs the last measured issuance duration, countdown excluded (XFetch's δ)
 */
export const dueForRefresh = (
  record: TokenRecord,
  now: number,
  settings: RefreshSettings,
  draw: number,
  issuanceMs: number,
): boolean => {
  const half = windowMs(record, settings) / 2;
  const lead = Math.min(half, countdownFor(record, settings) * settings.timing.countdownStepMs);
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
 * The cut-over estimate: when the successor of a token whose lease a read sent at `checkedAt`
 * found counting down should be stored (local ms), and each step's length (the holder's
 * `Lease.stepMs`, clamped). Never before the countdown's announced end. Liveness only.
 */
export const cutOverEstimate = (
  checkedAt: number,
  lease: Pick<Lease, 'countdown' | 'stepMs'>,
  issuanceMs: number,
  timing: ProtocolTiming,
): { readonly successorAt: number; readonly stepMs: number } => {
  const { countdownStepMs, storeRoundTripMs } = timing;
  const stepMs = Math.min(
    Math.max(lease.stepMs ?? countdownStepMs, countdownStepMs),
    countdownStepMs + storeRoundTripMs,
  );
  const lastStretch = Math.min(issuanceMs / 2, pollCapMs(timing)) + (stepMs - countdownStepMs);
  return { successorAt: checkedAt + lease.countdown * stepMs + lastStretch, stepMs };
};

/**
 * How long to wait before reading a lease held elsewhere again, ms: full jitter below a doubling
 * ceiling, at least 1 ms, and no sooner than the countdown runs out.
 * @param sinceReadMs time since the read that saw `countdown` was sent
 */
export const pollWaitMs = (
  input: {
    readonly countdown: number;
    readonly sinceReadMs: number;
    readonly issuanceMs: number;
    readonly waits: number;
    readonly draw: number;
  },
  timing: ProtocolTiming,
): number => {
  const base = Math.max(pollBaseMs(timing), input.issuanceMs / 2);
  const ceiling = Math.min(pollCapMs(timing), base * 2 ** input.waits);
  const counting = (input.countdown - 1) * timing.countdownStepMs - input.sinceReadMs;
  return Math.max(1, input.draw * ceiling, counting);
};
