/**
 * Random protocol timings for property tests: the default, scaled ones, and timings drawn field
 * by field around the holder's constants (step, heartbeat, lease, reserves), kept to those that
 * satisfy every relation of `lib/broker/timing/relations.ts`.
 */
import fc from 'fast-check';
import {
  DEFAULT_TIMING,
  type ProtocolTiming,
  scaledTiming,
  TIMING_RELATIONS,
} from '../../lib/broker/timing/index.js';

const holds = (t: ProtocolTiming) => TIMING_RELATIONS.every((r) => r.slack(t) >= 0);

/** A timing drawn field by field (the holder's and the proof's), then checked. */
const drawn: fc.Arbitrary<ProtocolTiming> = fc
  .record({
    countdownStepMs: fc.integer({ min: 1, max: 600 }),
    stepWriteAllowanceMs: fc.integer({ min: 15, max: 300 }),
    maxStepWriteSlack: fc.integer({ min: 0, max: 200 }),
    heartbeatSlack: fc.integer({ min: 0, max: 1_500 }),
    leaseSlack: fc.integer({ min: 0, max: 4_000 }),
    storeReserveMs: fc.integer({ min: 1, max: 800 }),
    minPostMs: fc.integer({ min: 1, max: 300 }),
    proofMarginMs: fc.integer({ min: 1, max: 200 }),
  })
  .map(({ heartbeatSlack, leaseSlack, maxStepWriteSlack, ...t }) => {
    const leaseHeartbeatMs = t.countdownStepMs + t.stepWriteAllowanceMs + heartbeatSlack;
    // The longest re-check the margin covers, and whose countdown a reader believes.
    const maxMemoryRecheckMs = Math.min(
      100_000,
      t.proofMarginMs * 1_000,
      400 * t.countdownStepMs - t.proofMarginMs,
    );
    return {
      ...DEFAULT_TIMING,
      ...t,
      leaseHeartbeatMs,
      maxStepWriteMs: Math.max(1, t.stepWriteAllowanceMs - maxStepWriteSlack),
      leaseMs: 2 * leaseHeartbeatMs + leaseSlack,
      maxMemoryRecheckMs,
      reuseMarginMs: t.proofMarginMs,
    };
  })
  .filter(holds);

/** The default, a scaled one, or one drawn field by field: every one valid. */
export const validTimings: fc.Arbitrary<ProtocolTiming> = fc.oneof(
  fc.constant(DEFAULT_TIMING),
  fc.double({ min: 0.01, max: 1, noNaN: true }).map(scaledTiming),
  drawn,
);
