/**
 * The relations between the protocol's constants that docs/protocol.md's safety argument rests
 * on (and a few for liveness), each named after its step. A non-default timing is validated once,
 * where it is built, then flows as a value.
 */
import {
  MAX_COUNTDOWN,
  MAX_LEASE_DURATION_MS,
  MAX_MEMORY_RECHECK_MS,
  stepsToCover,
  TTL_MARGIN_SECONDS,
} from './bounds.js';
import {
  CLOCK_RATE_TOLERANCE,
  DEFAULT_TIMING,
  maxMemoryRecheckMs,
  type ProtocolTiming,
} from './protocol-timing.js';

/** One relation: `holds` is the slack (ms, or steps), negative by how much it fails. */
interface TimingRelation {
  /** The step of docs/protocol.md's safety argument it serves (`I2.6`), or `liveness`. */
  readonly step: string;
  readonly name: string;
  readonly formula: string;
  /** Its slack: >= 0 when it holds; otherwise by how much it fails (the unit of `formula`). */
  readonly slack: (timing: ProtocolTiming) => number;
}

/**
 * Every relation a timing must satisfy, in the order of the safety argument, over the
 * independent constants only (those between derived values hold by their derivation).
 */
export const TIMING_RELATIONS: readonly TimingRelation[] = [
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

/**
 * Checks `timing` once: only `ProtocolTiming`'s fields, each a finite ms >= 0, then every relation.
 * @throws {TimingRelationError} naming the first field or relation that fails, and by how much.
 */
export const validateTiming = (timing: ProtocolTiming): ProtocolTiming => {
  for (const key of Object.keys(timing)) {
    if (!(key in DEFAULT_TIMING)) {
      throw new TimingRelationError(
        'field',
        key,
        Number.NaN,
        `${key} is not a ProtocolTiming field`,
      );
    }
  }
  for (const field of Object.keys(DEFAULT_TIMING) as (keyof ProtocolTiming)[]) {
    const value = timing[field];
    if (typeof value !== 'number' || !Number.isFinite(value) || value < 0) {
      throw new TimingRelationError(
        'field',
        field,
        Number.NaN,
        `ProtocolTiming.${field} must be a finite number of ms >= 0, not ${String(value)}`,
      );
    }
  }
  for (const relation of TIMING_RELATIONS) {
    const slack = relation.slack(timing);
    if (!(slack >= 0)) {
      throw new TimingRelationError(
        relation.step,
        relation.formula,
        -slack,
        `ProtocolTiming breaks ${relation.step} (${relation.name}): ${relation.formula} fails by ${-slack}`,
      );
    }
  }
  return timing;
};

/** The default timing with `overrides` (or `base`'s), validated and frozen. */
export const protocolTiming = (
  overrides: Partial<ProtocolTiming> = {},
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
