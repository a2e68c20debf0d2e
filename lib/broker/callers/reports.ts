/**
 * A caller's report that the upstream rejected a token (invalidate). Only that token is acted
 * on (compare-and-delete: a late report about an older token cannot drop a fresh one). A token
 * old enough to be replaced on a caller's word (`caller-bounds.ts`, measured on this
 * container's own clock) is dropped, and the next request issues its successor; a younger one
 * is kept with the report (in the store and in memory) and replaced, once, when it is old
 * enough (`due`). A report about the token this container holds as current, early in its
 * life, also says that another system may be issuing tokens for the same client ID.
 *
 * On a connection with a `probe`, the report is checked first (`probe-verdicts.ts`): a token
 * the Open API accepts is not replaced, and a token it rejects is dropped at once, whatever its
 * age (its successor is issued by the next request, under the lease: one issuance however many
 * report it). A probe that proves nothing leaves the report to the age rules.
 */
import type { Clock, Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { StoreUnavailableError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { Lease, TokenProbe, TokenRecord, TokenStore } from '../../ports.js';
import { UNNAMED_CALLER } from '../issuance/index.js';
import { type CallerBoundSettings, waitBeforeReplacing } from '../observer/index.js';
import { withDeadline } from '../single-flight.js';
import { type BrokerLogger, type InvalidateOutcome, tokenDigest } from '../types.js';
import type { ConnectionView } from '../view/index.js';
import { ProbeVerdicts } from './probe-verdicts.js';

interface ReportsDeps {
  readonly store: TokenStore;
  readonly view: ConnectionView;
  readonly clock: Clock;
  readonly settings: CallerBoundSettings;
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  /** Asks the Open API about a reported token, on connections with a `probe`. */
  readonly probe?: TokenProbe | undefined;
  /** BROKER_UPSTREAM_TIMEOUT_MS: the longest a probe may take. */
  readonly upstreamTimeoutMs: number;
}

export class Reports {
  readonly #verdicts: ProbeVerdicts;

  constructor(private readonly deps: ReportsDeps) {
    this.#verdicts = new ProbeVerdicts(deps.probe, deps.clock, deps.upstreamTimeoutMs, deps.view);
  }

  /**
   * Acts on a report about `accessToken` of `connection`.
   * @param deadline by when the store calls are answered (or it fails)
   */
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
    // Held only while memory still proves it: past that, another region may have replaced it
    // under a lease this container never saw, and a `valid` verdict would be reused for a
    // revoked token (review 3).
    const current = entry?.record.tokenDigest === digest ? entry : undefined;
    const proved = view.servable(name, { minValidityMs: 0, explicit: false }).why === 'proved';
    const held = current && proved ? current : undefined;
    // The token as this container holds it, else as the store does (its `forced` mark decides
    // how long it is kept): a report about any other token changes nothing, and is not probed.
    const { token, lease } = held
      ? { token: held.record, lease: held.lease }
      : await this.#storedToken(name, digest, deadline);
    // No probe, no wait: the age rules run in the same turn as without the feature.
    const probed =
      token && connection.probe
        ? await this.#verdicts.check(connection, token, deadline, { leased: lease !== undefined })
        : undefined;
    let outcome: InvalidateOutcome = { invalidated: false };
    if (token && probed?.verdict !== 'valid') {
      // Whom the report is about: another issuer, if it came early in the token's life.
      this.#suspectAnotherIssuer(
        token,
        lease,
        now,
        reportedBy,
        !!current || probed?.verdict === 'revoked',
      );
    }
    if (token && probed?.verdict === 'valid') {
      // The Open API accepts it: the caller's 401 came from something else.
      outcome = { invalidated: false, verified: 'valid' };
    } else if (token && probed?.verdict === 'revoked') {
      outcome = { invalidated: await this.#drop(token, now, deadline), verified: 'revoked' };
    } else if (token) {
      const waitMs = waitBeforeReplacing(token, view.knownFor(name, digest), settings);
      outcome =
        waitMs <= 0
          ? { invalidated: await this.#drop(token, now, deadline) }
          : await this.#keep(token, waitMs, deadline);
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

  /**
   * Whether a report kept about `record` is due: the token may now be replaced on a caller's
   * word, as this container measures its age.
   */
  due(record: TokenRecord): boolean {
    const { view, settings } = this.deps;
    const entry = view.entry(record.connection);
    if (!entry?.reported || entry.record.tokenDigest !== record.tokenDigest) return false;
    const knownForMs = view.knownFor(record.connection, record.tokenDigest);
    return waitBeforeReplacing(record, knownForMs, settings) <= 0;
  }

  /** The stored token of `name` if its digest is `digest` and it is valid, and the lease. */
  async #storedToken(
    name: string,
    digest: string,
    deadline: Deadline | undefined,
  ): Promise<{ token: TokenRecord | undefined; lease: Lease | undefined }> {
    const { token, lease } = await this.#store(() => this.deps.store.read(name), deadline);
    if (token?.tokenDigest !== digest || token.expiresAt <= this.deps.clock.now()) {
      return { token: undefined, lease };
    }
    // Learned here, if not before: its age on a caller's word (I4) counts from this read.
    this.deps.view.learned(token);
    return { token, lease };
  }

  /** Drops `token` here and in the store (if still the stored one). */
  async #drop(token: TokenRecord, now: number, deadline: Deadline | undefined): Promise<boolean> {
    this.deps.view.forget(token);
    return this.#store(
      () =>
        this.deps.store.deleteIfMatches(token.connection, token.tokenDigest, {
          reportedAt: now,
          deadline,
        }),
      deadline,
    );
  }

  /** Keeps the report in the store and here: the token is replaced once it is old enough. */
  async #keep(
    token: TokenRecord,
    waitMs: number,
    deadline: Deadline | undefined,
  ): Promise<InvalidateOutcome> {
    const kept = await this.#store(
      () => this.deps.store.markReported(token.connection, token.tokenDigest, { deadline }),
      deadline,
    );
    if (!kept) return { invalidated: false };
    this.deps.view.report(token.connection, token.tokenDigest);
    this.deps.metrics.record(MetricName.InvalidateDeferred, token.connection);
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
   * The upstream rejected the current token, with no replacement of ours under way that could
   * have revoked it, in the first half of its life: only another issuance for the same client
   * ID, elsewhere, revokes it then. Believed when this container holds the token as current, or
   * when the probe confirmed the rejection (a caller's word alone about a token it only read
   * from the store is not).
   */
  #suspectAnotherIssuer(
    held: TokenRecord,
    lease: Lease | undefined,
    now: number,
    reportedBy: string,
    believed: boolean,
  ): void {
    if (!believed || lease !== undefined) return;
    if (now - held.issuedAt >= (held.expiresAt - held.issuedAt) / 2) return;
    this.deps.metrics.record(MetricName.AnotherIssuerSuspected, held.connection);
    this.deps.logger.error('Another system may be issuing tokens for this client ID', {
      connection: held.connection,
      tokenDigest: held.tokenDigest,
      tokenAgeSeconds: Math.round((now - held.issuedAt) / 1000),
      reportedBy,
      runbook: 'One client ID, one broker (docs/operations.md)',
    });
  }
}
