/**
 * Verified reports: the connection's probe asks the Open API whether it still accepts a reported
 * token, at most once per `probe.intervalSeconds` per token (reports share the probe in flight
 * and reuse its verdict). Only the broker's own token is probed, within half the time left (I3).
 */
import { type Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { ProbeVerdict, TokenProbe, TokenRecord } from '../../ports.js';
import { withDeadline } from '../single-flight.js';
import type { ConnectionView } from '../view/index.js';

/** A probe shorter than this proves nothing worth waiting for: the age rules apply. */
const MIN_PROBE_MS = 50;

const NO_TIME: ProbeVerdict = { verdict: 'unknown', reason: 'no time left' };

export class ProbeVerdicts {
  /** The probes in flight, per connection and token (a Map: names come from callers). */
  readonly #inFlight = new Map<string, Promise<ProbeVerdict>>();

  constructor(
    private readonly probe: TokenProbe | undefined,
    private readonly clock: Clock,
    /** The upstream's per-request limit (BROKER_UPSTREAM_TIMEOUT_MS). */
    private readonly timeoutMs: number,
    /** Where the verdicts are kept, with the rest of what this container knows. */
    private readonly view: ConnectionView,
  ) {}

  /**
   * What the Open API says of `token`: undefined when the connection has no probe. Waits at most
   * half of what `deadline` leaves.
   */
  async check(
    connection: ConnectionConfig,
    token: TokenRecord,
    deadline: Deadline | undefined,
    { leased = false }: { readonly leased?: boolean } = {},
  ): Promise<ProbeVerdict | undefined> {
    const { probe } = connection;
    if (!probe || !this.probe) return undefined;
    const { name } = connection;
    const digest = token.tokenDigest;
    const key = `${name}\u0000${digest}`;
    const waitMs = Math.floor(
      Math.min(this.timeoutMs, (deadline?.leftMs() ?? this.timeoutMs * 2) / 2),
    );
    const said = this.view.verdict(name, digest);
    let verdict = this.#inFlight.get(key) ?? (said && Promise.resolve(said));
    // With a lease on the token, a `valid` verdict may be out of date: asked again.
    if (verdict && leased && (await verdict).verdict === 'valid') verdict = undefined;
    if (!verdict) {
      if (waitMs < MIN_PROBE_MS) return NO_TIME;
      const until = this.clock.monotonic() + probe.intervalSeconds * 1000;
      const options = { deadline: Deadline.in(this.clock, waitMs) };
      const sent = this.probe
        .probe(connection, token.accessToken, options)
        .catch((error: unknown): ProbeVerdict => {
          // The port never throws; an adapter that did says nothing of the token.
          const name = error instanceof Error ? error.name : 'unknown error';
          return { verdict: 'unknown', reason: name.slice(0, 40) };
        });
      verdict = sent;
      this.#inFlight.set(key, sent);
      // Settled: kept in the view, unless a probe since sent in its place governs.
      void sent.then((settled) => {
        if (this.#inFlight.get(key) !== sent) return;
        this.#inFlight.delete(key);
        const at = this.clock.monotonic();
        this.view.apply(name, { type: 'probe-settled', digest, verdict: settled, until, at });
      });
    }
    // A report joining a probe in flight waits no longer than its own time allows.
    return withDeadline(verdict, waitMs, this.clock, () => new Error('no time left')).catch(
      () => NO_TIME,
    );
  }
}
