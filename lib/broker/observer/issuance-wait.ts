/**
 * The observer's wait for a token it does not have (the fleet's first, or one that expired)
 * while another container holds the lease: every container that finds the item empty is in
 * this wait at once, so it is where a fleet's cold start reads the item. It reads again when the
 * holder's token is expected, not in a backoff from a few milliseconds: a fleet that starts at
 * once reads the item about twice per container (the read that found it empty, the one that
 * finds the token), not five or six times.
 *
 * When the token is expected comes from the lease read: each version's `expiresAt` less its
 * `durationMs` is when its holder sent it (on the holder's clock); after it, the answer to that
 * lease write, the countdown it announces, one issuance (this container's last measured, else
 * the default) and the token's write. The lease write is guessed as long as the call that
 * brought this container the lease: its read, or its own lease write that lost (made at the
 * same moment as the holder's, on the same item, so as contended); the token write, as this
 * container's last read; a slow one (a cold connection) counts for at most half an issuance.
 * Without them the first wait fell short
 * of the token by those two round trips, which a fleet that raced for one item made long (8
 * containers on DynamoDB Local: lease writes answered in 170–245 ms, and every loser read three
 * times more, not once; `npm run bench -- hot-key`, 2026-11-26). A per-container jitter of a
 * quarter issuance on the late side spreads the reads. Liveness only: a wait is never past the
 * read reserve before the deadline, nor past the lease's staleness (`decide`); I1–I4 do not rest
 * on it, and a clock elsewhere set wrong only moves the read (never earlier than the round
 * trips and the jitter, never later than the countdown, two issuances and a quarter issuance).
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
    /**
     * Round trip of the call that brought the lease (the read, or this container's lease write
     * that lost), ms: the guess at the holder's lease write.
     */
    readonly leaseTripMs: number;
    /** This container's last measured read round trip, ms: the guess at the token write. */
    readonly readTripMs: number | undefined;
  },
  timing: ProtocolTiming,
): number => {
  const { lease, now, issuanceMs, waits, draw, leaseTripMs, readTripMs } = input;
  const spread = Math.max(pollBaseMs(timing), issuanceMs / 4);
  if (waits > 0) {
    // Later than expected (a slow upstream, a loaded holder): read again in a growing step,
    // from half an issuance, half of it jitter.
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
