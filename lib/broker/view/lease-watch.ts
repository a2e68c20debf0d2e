/**
 * How a container judges another's lease: on its own clock only (the DynamoDB Lock Client's
 * rule). Each write of a lease sets a fresh version; a lease is stale once this container has
 * seen the same version unchanged for its recorded duration.
 */
import { systemClock } from '../../clock.js';
import type { Lease } from '../../ports.js';

import { SKEW_TOLERANCE_MS } from '../timing/index.js';

export class LeaseWatch {
  /**
   * Per connection, the version last seen and when we first saw it: on our wall clock (what
   * `firstSeen` compares with reads) and on our monotonic clock (what staleness is judged on, so
   * that a wall clock stepped forward takes no live lease over).
   */
  readonly #seen = new Map<string, { key: string; seenAt: number; seenAtMonotonic: number }>();

  constructor(private readonly monotonic: () => number = () => systemClock.monotonic()) {}

  /**
   * Whether `lease`, just read for `connection`, is stale at `now` (when the read came back: the
   * version was written before then). A skewed clock elsewhere moves nothing here. Only a lease
   * whose own expiry is further in the past than any plausible skew is stale at first sight
   * (a holder that died long ago), so a new container need not wait out a lease nobody renews.
   */
  stale(
    connection: string,
    lease: Lease,
    now: number,
    skewToleranceMs = SKEW_TOLERANCE_MS,
  ): boolean {
    if (lease.expiresAt + skewToleranceMs < now) return true;
    const seen = this.#seen.get(connection);
    if (seen?.key !== keyOf(lease)) {
      this.#seen.set(connection, {
        key: keyOf(lease),
        seenAt: now,
        seenAtMonotonic: this.monotonic(),
      });
      return false;
    }
    return this.monotonic() - seen.seenAtMonotonic >= lease.durationMs;
  }

  /** When this container first saw `lease`'s version, if it is the one it last saw. */
  firstSeen(connection: string, lease: Lease): number | undefined {
    const seen = this.#seen.get(connection);
    return seen?.key === keyOf(lease) ? seen.seenAt : undefined;
  }
}

/**
 * What tells two writes apart: the version, and the holder and expiry too, which a release that
 * recorded no version changed on every write (its leases all read as one version).
 */
const keyOf = (lease: Lease): string => `${lease.version}|${lease.holder}|${lease.expiresAt}`;
