/**
 * The relations between the protocol's constants that the safety argument of docs/protocol.md
 * rests on (and a few that keep it live), each named after the step it serves. A timing other
 * than the default is validated once, where it is built (`protocolTiming`, `scaledTiming`), and
 * then flows as a value; `test/lib/broker/timing-relations.test.ts` property-tests that exactly
 * the timings satisfying these are accepted, and that every scaled timing is.
 *
 * Like client-go's leader election, which checks its durations' relations once, in its
 * constructor, and refuses the configuration naming the one that failed.
 */
import {
  MAX_COUNTDOWN,
  MAX_LEASE_DURATION_MS,
  MAX_MEMORY_RECHECK_MS,
  stepsToCover,
  TTL_MARGIN_SECONDS,
} from './bounds.js';
import { DEFAULT_TIMING, DURATION_FIELDS, type ProtocolTiming } from './protocol-timing.js';

/** Clock rates differ by at most 1 in this many (0.1 %): the assumption of docs/protocol.md. */
export const CLOCK_RATE_TOLERANCE = 1_000;

/** One relation: `holds` is the slack (ms, or steps), negative by how much it fails. */
export interface TimingRelation {
  /** The step of docs/protocol.md's safety argument it serves (`I2.6`), or `liveness`. */
  readonly step: string;
  /** What it keeps, as a sentence. */
  readonly name: string;
  /** The relation as a formula over `ProtocolTiming`'s fields. */
  readonly formula: string;
  /** Its slack: >= 0 when it holds; otherwise by how much it fails (the unit of `formula`). */
  readonly slack: (timing: ProtocolTiming) => number;
}

/** Every relation a timing must satisfy, in the order of the safety argument. */
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
    formula: `maxMemoryRecheckMs <= ${MAX_MEMORY_RECHECK_MS} (a longer recorded re-check is read as 0)`,
    slack: (t) => MAX_MEMORY_RECHECK_MS - t.maxMemoryRecheckMs,
  },
  {
    step: 'I2.2',
    name: 'the longest countdown is one a reader of the item believes',
    formula: `ceil((maxMemoryRecheckMs + proofMarginMs) / countdownStepMs) <= ${MAX_COUNTDOWN} (a longer one is read as ended)`,
    slack: (t) =>
      t.countdownStepMs >= 1 ? MAX_COUNTDOWN - stepsToCover(t.maxMemoryRecheckMs, t) : -1,
  },
  {
    step: 'I2.5',
    name: "the reuse margin covers the drift between this clock and a caller's over a re-check",
    formula: `reuseMarginMs * ${CLOCK_RATE_TOLERANCE} >= maxMemoryRecheckMs`,
    slack: (t) => t.reuseMarginMs - t.maxMemoryRecheckMs / CLOCK_RATE_TOLERANCE,
  },
  {
    step: 'I2.6',
    name: 'the proof margin covers the drift between two containers over a re-check',
    formula: `proofMarginMs * ${CLOCK_RATE_TOLERANCE} >= maxMemoryRecheckMs`,
    slack: (t) => t.proofMarginMs - t.maxMemoryRecheckMs / CLOCK_RATE_TOLERANCE,
  },
  {
    step: 'I3',
    name: 'the write after the POST and the read that ends a wait have time kept for them',
    formula: 'storeReserveMs >= 1 and readReserveMs >= 1',
    slack: (t) => Math.min(t.storeReserveMs, t.readReserveMs) - 1,
  },
  {
    step: 'liveness',
    name: 'the heartbeat renews the lease before it runs out (renewing at most half a beat late)',
    formula: '2 * leaseHeartbeatMs <= leaseMs',
    slack: (t) => t.leaseMs - 2 * t.leaseHeartbeatMs,
  },
  {
    step: 'liveness',
    name: "a countdown's steps renew the lease at least as often as the heartbeat",
    formula: 'countdownStepMs + stepWriteAllowanceMs <= leaseHeartbeatMs',
    slack: (t) => t.leaseHeartbeatMs - t.countdownStepMs - t.stepWriteAllowanceMs,
  },
  {
    step: 'liveness',
    name: "a reader expects no step slower than a refresh's budget allows",
    formula: 'maxStepWriteMs <= stepWriteAllowanceMs',
    slack: (t) => t.stepWriteAllowanceMs - t.maxStepWriteMs,
  },
  {
    step: 'liveness',
    name: 'a poll waits at least a millisecond, and its cap is above its base',
    formula: '1 <= pollBaseMs <= pollCapMs',
    slack: (t) => Math.min(t.pollBaseMs - 1, t.pollCapMs - t.pollBaseMs),
  },
];

/** A timing that breaks a relation of the safety argument (or is not a timing at all). */
export class TimingRelationError extends Error {
  override readonly name = 'TimingRelationError';
  constructor(
    /** The step it serves (`I2.6`), `liveness`, or `field` for a value that is no duration. */
    readonly step: string,
    /** The relation that failed (its formula), or the field. */
    readonly relation: string,
    /** By how much it fails, in the relation's unit (ms or steps). */
    readonly shortBy: number,
    message: string,
  ) {
    super(message);
  }
}

/**
 * Checks `timing` once: every duration a finite number >= 0 (β > 0), then every relation.
 *
 * @throws {TimingRelationError} naming the first field or relation that fails, and by how much.
 */
export const validateTiming = (timing: ProtocolTiming): ProtocolTiming => {
  for (const field of DURATION_FIELDS) {
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
  if (!(Number.isFinite(timing.xfetchBeta) && timing.xfetchBeta > 0)) {
    throw new TimingRelationError(
      'field',
      'xfetchBeta',
      Number.NaN,
      `ProtocolTiming.xfetchBeta must be a finite number > 0, not ${String(timing.xfetchBeta)}`,
    );
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

/**
 * The default timing with `overrides`, validated and frozen.
 *
 * @throws {TimingRelationError} (see `validateTiming`); a key that is not a field too.
 */
export const protocolTiming = (overrides: Partial<ProtocolTiming> = {}): ProtocolTiming => {
  for (const key of Object.keys(overrides)) {
    if (!(key in DEFAULT_TIMING)) {
      throw new TimingRelationError(
        'field',
        key,
        Number.NaN,
        `${key} is not a ProtocolTiming field`,
      );
    }
  }
  return Object.freeze(validateTiming({ ...DEFAULT_TIMING, ...overrides }));
};

/**
 * Round trips the token write after the POST may take: the write of the item, then its read
 * copies' puts (ADR 0024), and one retry of a replicated write conflict.
 */
export const TOKEN_WRITE_ROUND_TRIPS = 3;

/**
 * `timing` for a store whose writes and strong reads take up to `ms` (`BROKER_STORE_ROUND_TRIP_MS`;
 * a global table's stages set 150): each countdown step's write allowance, and the time kept for
 * the token write after the POST (`storeReserveMs`), at least {@link TOKEN_WRITE_ROUND_TRIPS} of
 * them, so that on a global table a write is not cut and its token kept in memory only (which
 * costs the fleet a second issuance once the lease runs out).
 *
 * @throws {TimingRelationError} when the timing cannot hold it (see `validateTiming`).
 */
export const storeRoundTripTiming = (timing: ProtocolTiming, ms: number): ProtocolTiming =>
  protocolTiming({
    ...timing,
    stepWriteAllowanceMs: ms,
    maxStepWriteMs: ms,
    storeReserveMs: Math.max(timing.storeReserveMs, TOKEN_WRITE_ROUND_TRIPS * ms),
  });

/** The factors `scaledTiming` takes: faster than real down to a hundredth, never slower. */
export const MIN_TIMING_SCALE = 0.01;
export const MAX_TIMING_SCALE = 1;

/** Margins and reserves: rounded up when scaled (more slack), never down. */
const ROUNDED_UP: ReadonlySet<keyof ProtocolTiming> = new Set([
  'countdownStepMs',
  'proofMarginMs',
  'reuseMarginMs',
  'skewToleranceMs',
  'storeReserveMs',
  'minPostMs',
  'readReserveMs',
  'answerMarginMs',
]);

/**
 * The default timing with every duration times `factor` (in [0.01, 1]), in whole ms: margins,
 * reserves and the step rounded up, the longest re-check down, the rest to the nearest (at
 * least 1). Every relation holds at every such factor (property-tested): each relation is
 * linear in the durations, and the rounding leans towards its slack. Tests and `npm start` run
 * the protocol faster with it (`BROKER_TIMING_SCALE`); a deployment never does.
 *
 * @throws {RangeError} for a factor outside [0.01, 1].
 */
export const scaledTiming = (factor: number): ProtocolTiming => {
  if (!(factor >= MIN_TIMING_SCALE && factor <= MAX_TIMING_SCALE)) {
    throw new RangeError(
      `a timing scale must be from ${MIN_TIMING_SCALE} to ${MAX_TIMING_SCALE}, not ${factor}`,
    );
  }
  if (factor === 1) return DEFAULT_TIMING;
  const scaled: Record<string, number> = { ...DEFAULT_TIMING };
  for (const field of DURATION_FIELDS) {
    // To a millionth of a ms first: 250 * 0.1 is 25.000000000000004 in floating point.
    const exact = Math.round(DEFAULT_TIMING[field] * factor * 1e6) / 1e6;
    scaled[field] = ROUNDED_UP.has(field)
      ? Math.ceil(exact)
      : field === 'maxMemoryRecheckMs'
        ? Math.floor(exact)
        : Math.max(1, Math.round(exact));
  }
  return protocolTiming(scaled as unknown as ProtocolTiming);
};
