/**
 * A caller's report that the upstream rejected a token (invalidate), acting on that token only
 * (compare-and-delete). With a `probe`, the Open API is asked first; else a token old enough
 * (`caller-bounds.ts`) is dropped, and a younger one kept with the report until it is (`due`).
 */
import { type Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { StoreUnavailableError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { Lease, ProbeVerdict, TokenProbe, TokenRecord, TokenStore } from '../../ports.js';
import { UNNAMED_CALLER } from '../issuance/index.js';
import { type CallerBoundSettings, waitBeforeReplacing } from '../observer/index.js';
import { withDeadline } from '../single-flight.js';
import { type BrokerLogger, type InvalidateOutcome, tokenDigest } from '../types.js';
import type { ConnectionView } from '../view/index.js';

/** A probe shorter than this proves nothing worth waiting for: the age rules apply. */
const MIN_PROBE_MS = 50;

const NO_TIME: ProbeVerdict = { verdict: 'unknown', reason: 'no time left' };

interface ReportsDeps {
  readonly store: TokenStore;
  readonly view: ConnectionView;
  readonly clock: Clock;
  /** With BROKER_UPSTREAM_TIMEOUT_MS: the longest a probe may take. */
  readonly settings: CallerBoundSettings & { readonly upstreamTimeoutMs: number };
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  readonly probe?: TokenProbe | undefined;
}

export class Reports {
  /** The probes in flight, per connection and token (a Map: names come from callers). */
  readonly #probes = new Map<string, Promise<ProbeVerdict>>();

  constructor(private readonly deps: ReportsDeps) {}

  /** Acts on a report about `accessToken`; the store calls answer by `deadline` (or it fails). */
  async invalidate(
    connection: ConnectionConfig,
    accessToken: string,
    caller: string | undefined,
    deadline: Deadline | undefined,
  ): Promise<InvalidateOutcome> {
    const { view, clock, settings, logger } = this.deps;
    const { name } = connection;
    const digest = tokenDigest(accessToken);
    const reportedBy = caller ?? UNNAMED_CALLER;
    const now = clock.now();
    const entry = view.entry(name);
    // Held only while memory still proves it: past that it may have been replaced unseen.
    const current = entry?.record.tokenDigest === digest ? entry : undefined;
    const proved = view.servable(name, { minValidityMs: 0, explicit: false }).why === 'proved';
    const held = proved ? current : undefined;
    // The token as held here, else as stored: a report about any other token changes nothing.
    let { record: token, lease } = held ?? {};
    if (!held) {
      ({ token, lease } = await this.#store(() => this.deps.store.read(name), deadline));
      if (token?.tokenDigest !== digest || token.expiresAt <= clock.now()) token = undefined;
      // Learned here, if not before: its age on a caller's word (I4) counts from this read.
      else view.learned(token);
    }
    // No probe, no wait: the age rules run in the same turn as without the feature.
    const probed =
      token && connection.probe
        ? await this.#probe(connection, token, deadline, lease !== undefined)
        : undefined;
    let outcome: InvalidateOutcome = { invalidated: false };
    if (token && probed?.verdict === 'valid') {
      // The Open API accepts it: the caller's 401 came from something else.
      outcome = { invalidated: false, verified: 'valid' };
    } else if (token) {
      const revoked = probed?.verdict === 'revoked';
      // Whom the report is about: another issuer, if it came early in the token's life.
      if (current || revoked) this.#suspectAnotherIssuer(token, lease, now, reportedBy);
      if (revoked) {
        outcome = { invalidated: await this.#drop(token, now, deadline), verified: 'revoked' };
      } else {
        const waitMs = waitBeforeReplacing(token, view.knownFor(name, digest), settings);
        outcome =
          waitMs <= 0
            ? { invalidated: await this.#drop(token, now, deadline) }
            : await this.#keep(token, waitMs, deadline);
      }
    }
    logger.info('Invalidate request handled', {
      connection: name,
      tokenDigest: digest,
      ...outcome,
      ...(probed?.verdict === 'unknown' ? { probeInconclusive: probed.reason } : {}),
      reportedBy,
    });
    return outcome;
  }

  /** Whether a report kept about `record` is due: old enough to be replaced on a caller's word. */
  due(record: TokenRecord): boolean {
    const { view, settings } = this.deps;
    const entry = view.entry(record.connection);
    if (!entry?.reported || entry.record.tokenDigest !== record.tokenDigest) return false;
    const knownForMs = view.knownFor(record.connection, record.tokenDigest);
    return waitBeforeReplacing(record, knownForMs, settings) <= 0;
  }

  /**
   * What the Open API says of `token` (undefined without a probe), asked at most once per
   * `probe.intervalSeconds` per token: reports share the probe in flight and reuse its verdict.
   * Only the broker's own token is probed, within half of what `deadline` leaves (I3).
   */
  async #probe(
    connection: ConnectionConfig,
    token: TokenRecord,
    deadline: Deadline | undefined,
    leased: boolean,
  ): Promise<ProbeVerdict | undefined> {
    const { probe: port, clock, settings, view } = this.deps;
    const timeoutMs = settings.upstreamTimeoutMs;
    const { probe, name } = connection;
    if (!probe || !port) return undefined;
    const digest = token.tokenDigest;
    const key = `${name}\u0000${digest}`;
    const waitMs = Math.floor(Math.min(timeoutMs, (deadline?.leftMs() ?? timeoutMs * 2) / 2));
    const said = view.verdict(name, digest);
    let verdict = this.#probes.get(key) ?? (said && Promise.resolve(said));
    // With a lease on the token, a `valid` verdict may be out of date: asked again.
    if (verdict && leased && (await verdict).verdict === 'valid') verdict = undefined;
    if (!verdict) {
      if (waitMs < MIN_PROBE_MS) return NO_TIME;
      const until = clock.monotonic() + probe.intervalSeconds * 1000;
      const options = { deadline: Deadline.in(clock, waitMs) };
      const sent = port
        .probe(connection, token.accessToken, options)
        .catch((error: unknown): ProbeVerdict => {
          // The port never throws; an adapter that did says nothing of the token.
          const name = error instanceof Error ? error.name : 'unknown error';
          return { verdict: 'unknown', reason: name.slice(0, 40) };
        });
      verdict = sent;
      this.#probes.set(key, sent);
      // Settled: kept in the view, unless a probe since sent in its place governs.
      void sent.then((settled) => {
        if (this.#probes.get(key) !== sent) return;
        this.#probes.delete(key);
        const at = clock.monotonic();
        view.apply(name, { type: 'probe-settled', digest, verdict: settled, until, at });
      });
    }
    // A report joining a probe in flight waits no longer than its own time allows.
    const late = () => new Error('no time left');
    return withDeadline(verdict, waitMs, clock, late).catch(() => NO_TIME);
  }

  /** Drops `token` here and in the store (if still the stored one). */
  async #drop(token: TokenRecord, now: number, deadline: Deadline | undefined): Promise<boolean> {
    this.deps.view.forget(token);
    const options = { reportedAt: now, deadline };
    const drop = () =>
      this.deps.store.deleteIfMatches(token.connection, token.tokenDigest, options);
    return this.#store(drop, deadline);
  }

  /** Keeps the report in the store and here: the token is replaced once it is old enough. */
  async #keep(token: TokenRecord, waitMs: number, deadline?: Deadline): Promise<InvalidateOutcome> {
    const { connection, tokenDigest } = token;
    const mark = () => this.deps.store.markReported(connection, tokenDigest, { deadline });
    if (!(await this.#store(mark, deadline))) return { invalidated: false };
    this.deps.view.report(connection, tokenDigest);
    this.deps.metrics.record(MetricName.InvalidateDeferred, connection);
    return { invalidated: false, deferredSeconds: Math.ceil(waitMs / 1000) };
  }

  /** A store call, answered by the deadline (I3) or failed as the store being unavailable. */
  async #store<T>(call: () => Promise<T>, deadline: Deadline | undefined): Promise<T> {
    const failed = (cause?: unknown) =>
      new StoreUnavailableError('The token store could not be updated; retry shortly', { cause });
    try {
      return deadline === undefined
        ? await call()
        : await withDeadline(call(), deadline.leftMs(), this.deps.clock, failed);
    } catch (error) {
      throw error instanceof StoreUnavailableError ? error : failed(error);
    }
  }

  /**
   * A believed report in the first half of the token's life, with no replacement of ours under
   * way (no lease): only another issuer for the client ID revokes it then.
   */
  #suspectAnotherIssuer(held: TokenRecord, lease: Lease | undefined, now: number, by: string) {
    if (lease !== undefined || now - held.issuedAt >= (held.expiresAt - held.issuedAt) / 2) return;
    this.deps.metrics.record(MetricName.AnotherIssuerSuspected, held.connection);
    this.deps.logger.error('Another system may be issuing tokens for this client ID', {
      connection: held.connection,
      tokenDigest: held.tokenDigest,
      tokenAgeSeconds: Math.round((now - held.issuedAt) / 1000),
      reportedBy: by,
      runbook: 'One client ID, one broker (docs/operations.md)',
    });
  }
}
