/**
 * The protocol's timing as one value: every constant a proof (`bounds.ts`) or a liveness
 * estimate (`estimates.ts`) uses, each with its unit and its reason. `DEFAULT_TIMING` is the
 * timing every deployment runs; a test (or `npm start`, with `BROKER_TIMING_SCALE`) may inject
 * another, which `relations.ts` validates once, against the relations the safety argument of
 * docs/protocol.md rests on. The core reads it from the settings that already flow to every
 * side (`RefreshSettings.timing`, the holder's `HolderTerms.timing`), never from a module
 * constant.
 */

/** Every protocol constant, in milliseconds unless its name says otherwise. */
export interface ProtocolTiming {
  // Safety bounds (bounds.ts): they must never be wrong.
  /**
   * One step of a lease's countdown, ms (see `Lease.countdown`): each lease write of the
   * countdown is sent at least this long after the previous one was answered, on the holder's
   * monotonic clock. A reader that saw countdown r counts on (r - 1) steps. I2.2.
   */
  readonly countdownStepMs: number;
  /**
   * Kept between the last instant a reader serves a token and the earliest instant a request
   * that revokes it can leave, ms: scheduling and clock-rate slack. Clock rates differ by at most
   * 0.1 %, and the longest proof is a re-check of at most `maxMemoryRecheckMs`: 0.1 % of it is at
   * most this margin. I2.3, I2.6.
   */
  readonly proofMarginMs: number;
  /**
   * Kept between the end of what a read proves and the end of the reuse granted to a caller with
   * the answer, ms: the rate difference between this clock and the caller's over a reuse of at
   * most a re-check, and scheduling slack. The way back needs none: the caller counts from when
   * it sent its request, which was before this container looked at its clock. I2.5.
   */
  readonly reuseMarginMs: number;
  /**
   * Clock skew between containers that the protocol allows for, ms: a lease whose own expiry is
   * further past than this is stale at first sight, and a token expired less than this ago may
   * still be served on a slower clock (its replacement is counted down too). I1.5, I2.
   */
  readonly skewToleranceMs: number;
  /** How long one lease version lasts, ms, on anyone's clock from when they first see it. I1.2. */
  readonly leaseMs: number;
  /** The holder writes a new version at least this often while it holds the lease, ms. I1. */
  readonly leaseHeartbeatMs: number;
  /** Kept free after the access-token POST for the store write that follows it, ms. I3. */
  readonly storeReserveMs: number;
  /** A POST is not started with less time than this, ms: it would time out, outcome unknown. I1.3. */
  readonly minPostMs: number;
  /**
   * The longest re-check the settings may set, ms (`BROKER_MEMORY_RECHECK_SECONDS` is capped
   * here): the proof and reuse margins cover the clock drift over it. I2.6.
   */
  readonly maxMemoryRecheckMs: number;
  /**
   * The most kept between the end of a stale-if-error grant and the token's expiry, ms (a tenth
   * of a shorter lifetime): a trade against I2 bounded by the grant (docs/adr/0017).
   */
  readonly staleIfErrorMarginMs: number;

  // Liveness estimates (estimates.ts): they only tune speed, and may be wrong.
  /** Polling a lease held elsewhere: the first wait, ms (full jitter up to the cap). */
  readonly pollBaseMs: number;
  /** Polling a lease held elsewhere: the longest wait, ms. */
  readonly pollCapMs: number;
  /**
   * The most a reader counts per countdown step for the holder's lease write, ms: the store's
   * stated round-trip bound (`stepWriteAllowanceMs`), so that an estimate made from a measured
   * read is never stretched by one slow answer.
   */
  readonly maxStepWriteMs: number;
  /**
   * Kept before the deadline for the read that ends a wait, ms (at least twice the last measured
   * read): a read sent with no time left could only fail (I3, review finding R3).
   */
  readonly readReserveMs: number;
  /**
   * A countdown read more than twice this before its end is read once more this close to its
   * end, ms: the cut-over is then aimed from a countdown a few steps long, not from one a
   * re-check long (each step lasts a write longer than a step, which a reader cannot count on).
   */
  readonly cutOverRereadMs: number;
  /**
   * Kept free before the function's deadline to serialise and return the answer, ms (the edge's
   * `deadlineOf`; the settings check counts it in the least timeout a refresh needs).
   */
  readonly answerMarginMs: number;
  /**
   * The store's round-trip bound, ms: the longest a lease write or a strongly consistent read is
   * assumed to take. On a multi-Region strongly consistent table a write returns only once
   * another region has it: 25-100 ms between the regions of one set (AWS publishes no figure;
   * the chaos suite's three regions add 25, 70 and 95 ms), plus jitter. 150 ms covers both
   * that and a region-local table (a few ms). What it sets: a refresh's budget per countdown
   * step, the least function timeout, and how long a counting lease version lasts
   * (`countingLeaseMs`). Safety never rests on it: a reader's proof runs from its read's send,
   * and the holder paces its steps from each write's answer (docs/protocol.md, "Timing").
   */
  readonly stepWriteAllowanceMs: number;
  /** Issuance duration assumed before one was measured, ms (two loopback-to-internet trips). */
  readonly defaultIssuanceMs: number;
  /** XFetch β, no unit: 1 is the value the paper shows optimal for a single recompute. */
  readonly xfetchBeta: number;
}

/** The timing every deployment runs: the protocol's constants as measured and argued. */
export const DEFAULT_TIMING: ProtocolTiming = Object.freeze({
  countdownStepMs: 250,
  proofMarginMs: 100,
  reuseMarginMs: 100,
  skewToleranceMs: 10_000,
  leaseMs: 3_000,
  leaseHeartbeatMs: 1_000,
  storeReserveMs: 300,
  minPostMs: 100,
  maxMemoryRecheckMs: 100_000,
  staleIfErrorMarginMs: 60_000,
  pollBaseMs: 25,
  pollCapMs: 500,
  maxStepWriteMs: 15,
  readReserveMs: 50,
  cutOverRereadMs: 1_000,
  answerMarginMs: 500,
  stepWriteAllowanceMs: 50,
  defaultIssuanceMs: 300,
  xfetchBeta: 1,
});

/** The fields of a timing that are durations (every one but XFetch's β). */
export const DURATION_FIELDS = (Object.keys(DEFAULT_TIMING) as (keyof ProtocolTiming)[]).filter(
  (field) => field !== 'xfetchBeta',
);

/** Where a timing travels: the settings objects that already flow to every side. */
export interface Timed {
  /** The protocol's timing; `DEFAULT_TIMING` when none was injected. */
  readonly timing?: ProtocolTiming | undefined;
}

/** The timing `settings` carry, or the default. */
export const timingOf = (settings: Timed | undefined): ProtocolTiming =>
  settings?.timing ?? DEFAULT_TIMING;
