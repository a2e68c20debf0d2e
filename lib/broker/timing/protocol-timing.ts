/**
 * The protocol's timing as one value (docs/protocol.md, "Timing assumptions" A1–A5): eight
 * independent constants; every other duration is derived from them by a function below, so no
 * timing can carry a derived value out of step with its source. `DEFAULT_TIMING` is what every
 * deployment runs; a test or `npm start` (`BROKER_TIMING_SCALE`) may inject another, which
 * `relations.ts` validates once. The core reads it from the settings that flow to every side
 * (`RefreshSettings.timing`, `HolderTerms.timing`), never from a module constant.
 *
 * - Independent: `countdownStepMs`, `proofMarginMs` (A2), `skewToleranceMs` (A3), `leaseMs`,
 *   `storeRoundTripMs` (A4), `minPostMs`, `answerMarginMs`, `defaultIssuanceMs`.
 * - Derived (here): `reuseMarginMs`, `maxMemoryRecheckMs`, `leaseHeartbeatMs`,
 *   `storeReserveMs`, `readReserveFloorMs`, `pollBaseMs`, `pollCapMs`,
 *   `cutOverRereadMs`; in `bounds.ts`: `postSendWindowMs`, `countingLeaseMs`, and the
 *   stale-if-error margin (`staleMarginMs`, `TTL_MARGIN_SECONDS`, not timing: fixed).
 */

/** The independent constants, in ms. */
export interface ProtocolTiming {
  /**
   * One step of a lease's countdown (`Lease.countdown`): each countdown write is sent at least
   * this long after the previous one was answered, on the holder's monotonic clock. I2.2.
   */
  readonly countdownStepMs: number;
  /**
   * A2: kept between the last instant a reader serves a token and the earliest instant a
   * request that revokes it can leave: scheduling and clock-rate slack. I2.3, I2.6.
   */
  readonly proofMarginMs: number;
  /**
   * A3: clock skew between containers allowed for: a lease whose expiry is further past is stale
   * at first sight; a token expired less than this ago may still be served elsewhere. I1.5, I2.
   */
  readonly skewToleranceMs: number;
  /** How long one lease version lasts, on anyone's clock from when they first see it. I1.2. */
  readonly leaseMs: number;
  /**
   * A4 (`BROKER_STORE_ROUND_TRIP_MS`): the longest a lease write or a strong read is assumed to
   * take; 50 for a table in the function's region, 150 on a global table. Liveness only: a
   * reader proves from its read's send, the holder paces its steps from each write's answer.
   */
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

/**
 * Round trips the token write after the POST may take: the item's write, then its read copies'
 * puts (ADR 0024, in parallel).
 */
const TOKEN_WRITE_ROUND_TRIPS = 2;

/**
 * Derived: = `proofMarginMs`. Cuts a caller's reuse (`maxAgeMs`) short of the proof: the drift
 * between this clock and the caller's (A5, the same 0.1 % as between containers) over a reuse
 * of at most a re-check, which the proof margin covers (`maxMemoryRecheckMs`). I2.5.
 */
export const reuseMarginMs = (t: ProtocolTiming): number => t.proofMarginMs;

/**
 * Derived: = `proofMarginMs` × `CLOCK_RATE_TOLERANCE`. The longest re-check
 * (`BROKER_MEMORY_RECHECK_SECONDS`'s cap): the one over which the margin covers the drift. I2.6.
 */
export const maxMemoryRecheckMs = (t: ProtocolTiming): number =>
  t.proofMarginMs * CLOCK_RATE_TOLERANCE;

/**
 * Derived: = `leaseMs` / 3. The holder renews at least this often: a renewal sent up to half a
 * beat late still lands with half the lease to spare. I1.
 */
export const leaseHeartbeatMs = (t: ProtocolTiming): number => t.leaseMs / 3;

/**
 * Derived: = `TOKEN_WRITE_ROUND_TRIPS` × (`storeRoundTripMs` + `proofMarginMs`): each of the
 * token write's round trips (A4) after a scheduling delay (A2). Kept free after the
 * access-token POST for the token write that follows it, so a slow POST does not cut it. I3.
 */
export const storeReserveMs = (t: ProtocolTiming): number =>
  TOKEN_WRITE_ROUND_TRIPS * (t.storeRoundTripMs + t.proofMarginMs);

/**
 * Derived: = `storeRoundTripMs`. The least kept before a deadline for the read that ends a
 * wait (`readReserveMs`): a read sent with less could only fail. I3 (review finding R3).
 */
export const readReserveFloorMs = (t: ProtocolTiming): number => t.storeRoundTripMs;

/**
 * Derived: = `countdownStepMs` / 10. Polling a lease held elsewhere, the first wait (full
 * jitter): a small part of a step, so a lease let go is seen at once; it doubles to the cap.
 */
export const pollBaseMs = (t: ProtocolTiming): number => t.countdownStepMs / 10;

/**
 * Derived: = 2 × `countdownStepMs`. Polling a lease held elsewhere, the longest wait: a waiter
 * sees a countdown's end, or its successor, at most two steps late.
 */
export const pollCapMs = (t: ProtocolTiming): number => 2 * t.countdownStepMs;

/**
 * Derived: = 4 × `countdownStepMs`. A countdown read more than twice this before its end is
 * read once more this close to it: the cut-over is then aimed from a countdown a few steps
 * long, not a re-check long (each step lasts a write longer, which a reader cannot count on).
 */
export const cutOverRereadMs = (t: ProtocolTiming): number => 4 * t.countdownStepMs;
