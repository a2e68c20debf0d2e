/**
 * The observer's wait for a token it does not have while another container holds the lease (a
 * fleet's cold start): read again when the holder's token is expected (its lease write's send,
 * countdown, one issuance, the round trips), with a jitter. Liveness only.
 */
import type { Lease } from '../../ports.js';
import { type ProtocolTiming, pollBaseMs, pollCapMs } from '../timing/index.js';

export const issuanceWaitMs = (
  input: {
    readonly lease: Lease;
    /** Wall clock when the read that saw `lease` was answered. */
    readonly now: number;
    /** The last measured issuance duration (countdown excluded), ms. */
    readonly issuanceMs: number;
    /** Waits for a holder so far in this request. */
    readonly waits: number;
    /** Uniform in [0, 1): the jitter. */
    readonly draw: number;
    /** Round trip of the call that brought the lease, ms: the guess at the holder's lease write. */
    readonly leaseTripMs: number;
    /** This container's last measured read round trip, ms: the guess at the token write. */
    readonly readTripMs: number | undefined;
  },
  timing: ProtocolTiming,
): number => {
  const { lease, now, issuanceMs, waits, draw, leaseTripMs, readTripMs } = input;
  const spread = Math.max(pollBaseMs(timing), issuanceMs / 4);
  if (waits > 0) {
    // Later than expected: read again in a growing step, half of it jitter.
    const ceiling = Math.min(pollCapMs(timing), spread * 2 ** waits);
    return Math.max(1, ceiling * (0.5 + draw / 2));
  }
  const sentAt = lease.expiresAt - lease.durationMs;
  const age = Math.min(Math.max(0, now - sentAt), issuanceMs);
  // The answer to the holder's lease write before its flow, and its token write after it.
  const trip = (ms: number) => Math.min(Math.max(0, ms), issuanceMs / 2);
  const trips = trip(leaseTripMs) + trip(readTripMs ?? leaseTripMs);
  const expected = lease.countdown * timing.countdownStepMs + issuanceMs + trips - age;
  return Math.max(1, expected + draw * spread);
};
