/**
 * Verified reports: before a caller's report about the token a connection holds is weighed by
 * age (`caller-bounds.ts`), the connection's probe asks the Open API whether it still accepts
 * that token. A container probes a given token at most once per `probe.intervalSeconds`, on its
 * monotonic clock: concurrent reports share the probe in flight, and later ones reuse its
 * verdict (`valid` or `revoked`; not one that proved nothing, and not `valid` while a lease is
 * on the token), so a storm of reports costs one probe. Only the token the broker itself holds is ever
 * probed (never a string a caller sent), and the probe takes at most half the time the report
 * has left, so the store calls after it still fit (I3).
 */
import { type Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { ProbeVerdict, TokenProbe, TokenRecord } from '../../ports.js';
import { withDeadline } from '../single-flight.js';

/** A probe shorter than this proves nothing worth waiting for: the age rules apply. */
const MIN_PROBE_MS = 50;

interface Probed {
  /** Until when its verdict is reused, on the monotonic clock (sent + the interval). */
  readonly until: number;
  readonly verdict: Promise<ProbeVerdict>;
}

const NO_TIME: ProbeVerdict = { verdict: 'unknown', reason: 'no time left' };

export class ProbeVerdicts {
  // A Map, not an object: the keys carry connection names from callers.
  readonly #probed = new Map<string, Probed>();

  constructor(
    private readonly probe: TokenProbe | undefined,
    private readonly clock: Clock,
    /** The upstream's per-request limit (BROKER_UPSTREAM_TIMEOUT_MS). */
    private readonly timeoutMs: number,
  ) {}

  /**
   * What the Open API says of `token` (held by this container or the store as `connection`'s
   * current token): undefined when the connection has no probe. Probed at most once per
   * interval per token in this container; waits at most half of what `deadline` leaves.
   */
  async check(
    connection: ConnectionConfig,
    token: TokenRecord,
    deadline: Deadline | undefined,
    { leased = false }: { readonly leased?: boolean } = {},
  ): Promise<ProbeVerdict | undefined> {
    const { probe } = connection;
    if (!probe || !this.probe) return undefined;
    const now = this.clock.monotonic();
    this.#forgetUntil(now);
    const key = `${connection.name}\u0000${token.tokenDigest}`;
    const waitMs = Math.floor(
      Math.min(this.timeoutMs, (deadline?.leftMs() ?? this.timeoutMs * 2) / 2),
    );
    let probed = this.#probed.get(key);
    // A replacement is under way (a lease on the token): its POST may have revoked the token
    // since a `valid` verdict, so that one is not reused; the token is asked about again.
    if (probed && leased && (await probed.verdict).verdict === 'valid') probed = undefined;
    if (!probed) {
      if (waitMs < MIN_PROBE_MS) return NO_TIME;
      const options = { deadline: Deadline.in(this.clock, waitMs) };
      const verdict = this.probe
        .probe(connection, token.accessToken, options)
        .catch((error: unknown): ProbeVerdict => {
          // The port never throws; an adapter that did says nothing of the token.
          const name = error instanceof Error ? error.name : 'unknown error';
          return { verdict: 'unknown', reason: name.slice(0, 40) };
        });
      const entry: Probed = { until: now + probe.intervalSeconds * 1000, verdict };
      probed = entry;
      this.#probed.set(key, entry);
      // Only a verdict is reused: a probe that proved nothing (a timeout cut short by the first
      // reporter's deadline, a 5xx) leaves the next report free to ask.
      void verdict.then(({ verdict: said }) => {
        if (said === 'unknown' && this.#probed.get(key) === entry) this.#probed.delete(key);
      });
    }
    // A report joining a probe in flight waits no longer than its own time allows.
    return withDeadline(probed.verdict, waitMs, this.clock, () => new Error('no time left')).catch(
      () => NO_TIME,
    );
  }

  /** Drops the verdicts no longer reused at `now`: the map holds only the last interval's. */
  #forgetUntil(now: number): void {
    for (const [key, probed] of this.#probed) if (probed.until <= now) this.#probed.delete(key);
  }
}
