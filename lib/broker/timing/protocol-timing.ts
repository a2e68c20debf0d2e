/**
 * The protocol's timing as one value (docs/protocol.md, "Timing assumptions" A1–A5): eight
 * independent constants, and every other duration derived from them below. `DEFAULT_TIMING` is
 * what every deployment runs; another is validated once (`relations.ts`).
 */

/** The independent constants, in ms. */
export interface ProtocolTiming {
  /** One countdown step: each write sent at least this long after the last was answered. I2.2. */
  readonly countdownStepMs: number;
  /** A2: scheduling and clock-rate slack between a reader's last serve and a revoking POST. I2.3. */
  readonly proofMarginMs: number;
  /** A3: clock skew between containers allowed for. I1.5, I2. */
  readonly skewToleranceMs: number;
  /** How long one lease version lasts, on anyone's clock from when they first see it. I1.2. */
  readonly leaseMs: number;
  /** A4 (`BROKER_STORE_ROUND_TRIP_MS`): the longest lease write or strong read. Liveness only. */
  readonly storeRoundTripMs: number;
  /** A POST is not started with less time than this: it would time out, outcome unknown. I1.3. */
  readonly minPostMs: number;
  /** Kept before the function's deadline to serialise and return the answer (`deadlineOf`). */
  readonly answerMarginMs: number;
  /** Issuance duration assumed before one was measured (two loopback-to-internet trips). */
  readonly defaultIssuanceMs: number;
}

/** The timing every deployment runs: the protocol's constants as measured and argued. */
export const DEFAULT_TIMING: ProtocolTiming = Object.freeze({
  countdownStepMs: 250,
  proofMarginMs: 100,
  skewToleranceMs: 10_000,
  leaseMs: 3_000,
  storeRoundTripMs: 50,
  minPostMs: 100,
  answerMarginMs: 500,
  defaultIssuanceMs: 300,
});

/** A3: clock rates differ by at most 1 in this many (0.1 %). A fixed fact, not a setting. */
export const CLOCK_RATE_TOLERANCE = 1_000;

/** Round trips of the token write after the POST: the item, then its read copies (ADR 0024). */
const TOKEN_WRITE_ROUND_TRIPS = 2;

/** = `proofMarginMs`: cuts a caller's reuse short of the proof, for clock drift (A5). I2.5. */
export const reuseMarginMs = (t: ProtocolTiming): number => t.proofMarginMs;

/** = `proofMarginMs` × `CLOCK_RATE_TOLERANCE`: the longest re-check the margin covers. I2.6. */
export const maxMemoryRecheckMs = (t: ProtocolTiming): number =>
  t.proofMarginMs * CLOCK_RATE_TOLERANCE;

/** = `leaseMs` / 3: the holder's renewal period, so a late renewal still lands in time. I1. */
export const leaseHeartbeatMs = (t: ProtocolTiming): number => t.leaseMs / 3;

/** = round trips × (`storeRoundTripMs` + `proofMarginMs`): kept after the POST for the token write. I3. */
export const storeReserveMs = (t: ProtocolTiming): number =>
  TOKEN_WRITE_ROUND_TRIPS * (t.storeRoundTripMs + t.proofMarginMs);

/** = `storeRoundTripMs`: the least kept before a deadline for a wait's last read. I3. */
export const readReserveFloorMs = (t: ProtocolTiming): number => t.storeRoundTripMs;

/** = `countdownStepMs` / 10: the first poll of a lease held elsewhere (full jitter, doubling). */
export const pollBaseMs = (t: ProtocolTiming): number => t.countdownStepMs / 10;

/** = 2 × `countdownStepMs`: the longest poll wait. */
export const pollCapMs = (t: ProtocolTiming): number => 2 * t.countdownStepMs;

/**
 * = 4 × `countdownStepMs`: a countdown read further than twice this from its end is read again
 * this close to it, so the cut-over is aimed from a few steps, not a re-check.
 */
export const cutOverRereadMs = (t: ProtocolTiming): number => 4 * t.countdownStepMs;
