/**
 * The protocol's timing as one value (docs/protocol.md, "Timing assumptions" A1–A5): eight
 * independent constants, every other duration derived from them, the stored item's caps, and the
 * relations a timing must satisfy, checked once where a non-default one is built.
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
const CLOCK_RATE_TOLERANCE = 1_000;
/** Round trips of the token write after the POST: the item, then its read copies (ADR 0024). */
const TOKEN_WRITE_ROUND_TRIPS = 2;

// The derived durations, each `= formula: why` (their relations hold by construction).
/** = `proofMarginMs`: cuts a caller's reuse short of the proof, for clock drift (A5). I2.5. */
export const reuseMarginMs = (t: ProtocolTiming): number => t.proofMarginMs;
/** = `proofMarginMs` × `CLOCK_RATE_TOLERANCE`: the longest re-check the margin covers. I2.6. */
export const maxMemoryRecheckMs = (t: ProtocolTiming): number =>
  t.proofMarginMs * CLOCK_RATE_TOLERANCE;
/** = `leaseMs` / 3: the holder's renewal period, so a late renewal still lands in time. I1. */
export const leaseHeartbeatMs = (t: ProtocolTiming): number => t.leaseMs / 3;
/** = a heartbeat: how long after the fence's confirmation is sent its POST may still leave (A1). */
export const postSendWindowMs = (t: ProtocolTiming): number => leaseHeartbeatMs(t);
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

/** Countdown steps whose end lies more than `recheck` (plus the margin) after their start. */
export const stepsToCover = (recheck: number, timing: ProtocolTiming): number =>
  Math.ceil((recheck + timing.proofMarginMs) / timing.countdownStepMs);

/**
 * A1: the upstream processes an access-token POST, if at all, within this long of its send, ms
 * (twice the upstream timeout). Counted from the send, not from when the holder gave up. I1, I2.
 */
export const postLandsWithinMs = (upstreamTimeoutMs: number): number => 2 * upstreamTimeoutMs;

// The stored item's caps, fixed as every release reads the item: the largest values a writer
// records (the caps of `lib/config.ts`); a reader takes a larger one the safe way.
/** How long after a token's expiry TTL may delete its item, s: past any skew allowed. I1.5, I2. */
export const TTL_MARGIN_SECONDS = 60;
/** BROKER_MEMORY_RECHECK_SECONDS's cap, ms. */
export const MAX_MEMORY_RECHECK_MS = maxMemoryRecheckMs(DEFAULT_TIMING);
/** BROKER_UPSTREAM_TIMEOUT_MS is at most 60 s. */
const MAX_UPSTREAM_TIMEOUT_MS = 60_000;
/** The longest lease version: the fence, covering the POST's budget and A1's bound after it. */
export const MAX_LEASE_DURATION_MS =
  MAX_UPSTREAM_TIMEOUT_MS + postLandsWithinMs(MAX_UPSTREAM_TIMEOUT_MS);
/** Above this a recorded lease duration is absurd and read as this; below, as written (I1). */
export const ABSURD_LEASE_DURATION_MS = 10 * MAX_LEASE_DURATION_MS;
/** BROKER_MAX_TOKEN_LIFETIME_SECONDS is at most 365 days, ms. */
export const MAX_TOKEN_LIFETIME_MS = 365 * 86_400_000;
/** The longest countdown a lease announces (no valid timing announces more: the relations). */
export const MAX_COUNTDOWN = stepsToCover(MAX_MEMORY_RECHECK_MS, DEFAULT_TIMING);

/**
 * Every relation a timing must satisfy, over the independent constants, in the order of
 * docs/protocol.md's safety argument: the `step` it serves (`I2.6`, or `liveness`), and its
 * `slack`, >= 0 when it holds, else minus by how much it fails (in `formula`'s unit).
 */
export const TIMING_RELATIONS: readonly {
  readonly step: string;
  readonly name: string;
  readonly formula: string;
  readonly slack: (timing: ProtocolTiming) => number;
}[] = [
  {
    step: 'I1.2',
    name: 'a lease version is read as lasting as long as it was written',
    formula: `leaseMs <= ${MAX_LEASE_DURATION_MS} (the longest duration a reader believes)`,
    slack: (t) => MAX_LEASE_DURATION_MS - t.leaseMs,
  },
  {
    step: 'I1.3',
    name: 'a POST is never started without time to be answered',
    formula: 'minPostMs >= 1',
    slack: (t) => t.minPostMs - 1,
  },
  {
    step: 'I1.5',
    name: 'TTL never deletes a token that a slower clock still serves',
    formula: `skewToleranceMs < ${TTL_MARGIN_SECONDS * 1000} (TTL_MARGIN_SECONDS)`,
    slack: (t) => TTL_MARGIN_SECONDS * 1000 - 1 - t.skewToleranceMs,
  },
  {
    step: 'I2.2',
    name: 'a countdown lasts: each step takes time',
    formula: 'countdownStepMs >= 1',
    slack: (t) => t.countdownStepMs - 1,
  },
  {
    step: 'I2.2',
    name: 'the longest re-check is one a reader of the item believes',
    formula: `proofMarginMs * ${CLOCK_RATE_TOLERANCE} <= ${MAX_MEMORY_RECHECK_MS} (maxMemoryRecheckMs; a longer recorded re-check is read as 0)`,
    slack: (t) => MAX_MEMORY_RECHECK_MS - maxMemoryRecheckMs(t),
  },
  {
    step: 'I2.2',
    name: 'the longest countdown is one a reader of the item believes',
    formula: `ceil((proofMarginMs * ${CLOCK_RATE_TOLERANCE + 1}) / countdownStepMs) <= ${MAX_COUNTDOWN} (a longer one is read as ended)`,
    slack: (t) =>
      t.countdownStepMs >= 1 ? MAX_COUNTDOWN - stepsToCover(maxMemoryRecheckMs(t), t) : -1,
  },
  {
    step: 'I2.3',
    name: 'a reader stops serving a scheduling bound (A2) before the replacement may leave',
    formula: 'proofMarginMs >= 1',
    slack: (t) => t.proofMarginMs - 1,
  },
  {
    step: 'I3',
    name: 'the write after the POST and the read that ends a wait have time kept for them',
    formula: 'storeRoundTripMs >= 1 (storeReserveMs, readReserveFloorMs)',
    slack: (t) => t.storeRoundTripMs - 1,
  },
  {
    step: 'liveness',
    name: "a countdown's steps renew the lease at least as often as the heartbeat (leaseMs / 3)",
    formula: '3 * (countdownStepMs + storeRoundTripMs) <= leaseMs',
    slack: (t) => t.leaseMs - 3 * (t.countdownStepMs + t.storeRoundTripMs),
  },
];

/** A timing that breaks a relation of the safety argument (or is not a timing at all). */
export class TimingRelationError extends Error {
  override readonly name = 'TimingRelationError';
  constructor(
    /** The step it serves, `liveness`, or `field` for a value that is no duration. */
    readonly step: string,
    readonly relation: string,
    readonly shortBy: number,
    message: string,
  ) {
    super(message);
  }
}

const fieldError = (field: string, message: string) =>
  new TimingRelationError('field', field, Number.NaN, message);

/**
 * Checks `timing` once: only `ProtocolTiming`'s fields, each a finite ms >= 0, then every relation.
 * @throws {TimingRelationError} naming the first field or relation that fails, and by how much.
 */
export const validateTiming = (timing: ProtocolTiming): ProtocolTiming => {
  for (const key of Object.keys(timing)) {
    if (!(key in DEFAULT_TIMING)) throw fieldError(key, `${key} is not a ProtocolTiming field`);
  }
  for (const field of Object.keys(DEFAULT_TIMING) as (keyof ProtocolTiming)[]) {
    const value = timing[field];
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      const must = `ProtocolTiming.${field} must be a finite number of ms >= 0`;
      throw fieldError(field, `${must}, not ${String(value)}`);
    }
  }
  for (const { step, name, formula, slack } of TIMING_RELATIONS) {
    const left = slack(timing);
    if (!(left >= 0)) {
      const message = `ProtocolTiming breaks ${step} (${name}): ${formula} fails by ${-left}`;
      throw new TimingRelationError(step, formula, -left, message);
    }
  }
  return timing;
};

/** The default timing with `overrides` (or `base`'s), validated and frozen. */
export const protocolTiming = (
  overrides: Partial<ProtocolTiming>,
  base: ProtocolTiming = DEFAULT_TIMING,
): ProtocolTiming => Object.freeze(validateTiming({ ...base, ...overrides }));

/** The factors `scaledTiming` takes: faster than real down to a hundredth, never slower. */
export const MIN_TIMING_SCALE = 0.01;
export const MAX_TIMING_SCALE = 1;

const up = Math.ceil;
const nearest = (ms: number) => Math.max(1, Math.round(ms));
/**
 * How each constant is rounded when scaled: up for more slack; the lease and issuance to the
 * nearest; the proof margin down (its 1,000-fold must stay a countdown the item believes).
 */
const ROUNDING: Readonly<Record<keyof ProtocolTiming, (ms: number) => number>> = {
  countdownStepMs: up,
  proofMarginMs: (ms) => Math.max(1, Math.floor(ms)),
  skewToleranceMs: up,
  leaseMs: nearest,
  storeRoundTripMs: up,
  minPostMs: up,
  answerMarginMs: up,
  defaultIssuanceMs: nearest,
};

/**
 * The default timing with every independent constant times `factor`, in whole ms (`ROUNDING`);
 * every relation holds at every factor. Tests and `npm start` only (`BROKER_TIMING_SCALE`).
 * @throws {RangeError} for a factor outside [0.01, 1].
 */
export const scaledTiming = (factor: number): ProtocolTiming => {
  if (!(factor >= MIN_TIMING_SCALE && factor <= MAX_TIMING_SCALE)) {
    throw new RangeError(
      `a timing scale must be from ${MIN_TIMING_SCALE} to ${MAX_TIMING_SCALE}, not ${factor}`,
    );
  }
  if (factor === 1) return DEFAULT_TIMING;
  const scaled: Record<keyof ProtocolTiming, number> = { ...DEFAULT_TIMING };
  for (const field of Object.keys(ROUNDING) as (keyof ProtocolTiming)[]) {
    // To a millionth of a ms first, against floating-point error.
    scaled[field] = ROUNDING[field](Math.round(DEFAULT_TIMING[field] * factor * 1e6) / 1e6);
  }
  return protocolTiming(scaled);
};
