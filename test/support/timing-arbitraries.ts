/**
 * Random protocol timings for property tests: the default, scaled ones, and timings drawn field
 * by field around the holder's constants (step, store round trip, lease, margin), kept to those that
 * satisfy every relation of `lib/broker/timing/protocol-timing.ts`.
 */
import fc from 'fast-check';
import {
  DEFAULT_TIMING,
  type ProtocolTiming,
  scaledTiming,
} from '../../lib/broker/timing/index.js';
import { TIMING_RELATIONS } from '../../lib/broker/timing/protocol-timing.js';

const holds = (t: ProtocolTiming) => TIMING_RELATIONS.every((r) => r.slack(t) >= 0);

/** A timing drawn field by field (the holder's and the proof's independent constants), then checked. */
const drawn: fc.Arbitrary<ProtocolTiming> = fc
  .record({
    countdownStepMs: fc.integer({ min: 3, max: 600 }),
    storeRoundTripMs: fc.integer({ min: 1, max: 300 }),
    leaseSlack: fc.integer({ min: 0, max: 4_000 }),
    minPostMs: fc.integer({ min: 1, max: 300 }),
    proofShare: fc.double({ min: 0, max: 1, noNaN: true }),
  })
  .map(({ leaseSlack, proofShare, ...t }) => {
    // The widest margin whose re-check (its 1,000-fold) a reader believes, as a countdown too.
    const widest = Math.min(100, Math.floor((400 * t.countdownStepMs) / 1_001));
    return {
      ...DEFAULT_TIMING,
      ...t,
      proofMarginMs: Math.max(1, Math.round(proofShare * widest)),
      leaseMs: 3 * (t.countdownStepMs + t.storeRoundTripMs) + leaseSlack,
    };
  })
  .filter(holds);

/** The default, a scaled one, or one drawn field by field: every one valid. */
export const validTimings: fc.Arbitrary<ProtocolTiming> = fc.oneof(
  fc.constant(DEFAULT_TIMING),
  fc.double({ min: 0.01, max: 1, noNaN: true }).map(scaledTiming),
  drawn,
);
