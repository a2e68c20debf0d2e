/**
 * A container's way to a token under the fleet's lease: the observer's loop with the holder's
 * side plugged in, taking the lease (each attempt under a holder id and first version of its
 * own), and the refresh of a still-valid token. Deadlines are monotonic (I3).
 */
import { randomUUID } from 'node:crypto';
import type { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { FunctionTimeoutTooShortError, StoreUnavailableError } from '../../errors.js';
import { MetricName } from '../../metrics.js';
import type {
  Lease,
  LeaseAttempt,
  LeaseRef,
  LeaseRequest,
  TokenRecord,
  TokenState,
} from '../../ports.js';
import { type HolderDeps, issueUnderLease, LOST } from '../holder/index.js';
import { IssuanceCause, isCallersWord, UNNAMED_CALLER } from '../issuance/index.js';
import {
  type AcquirePlan,
  notEnoughTime,
  obtain,
  StoreReachability,
  storeFailure,
} from '../observer/index.js';
import { withDeadline } from '../single-flight.js';
import { leaseCountdown, leaseNeedsMs, leaseTerm, refreshBudgetMs } from '../timing/index.js';
import type { ServedToken } from '../types.js';
import { ConnectionView, ownRequest, type ReadSent, type TokenRequest } from '../view/index.js';

/** `view`: its own, unless shared with a facade. */
type LeasedIssuanceDeps = Omit<HolderDeps, 'bounded' | 'view' | 'held'> & { view?: ConnectionView };

export class LeasedIssuance {
  readonly #containerId = randomUUID();
  #attempts = 0;
  /** Whether the store answered the last read (a short wait for the next one if not). */
  readonly #reachability = new StoreReachability();
  /** Why every issuance is refused before any lease is taken; undefined: none is. */
  refusal: string | undefined;
  private readonly deps: HolderDeps;

  constructor(deps: LeasedIssuanceDeps) {
    this.deps = {
      ...deps,
      view: deps.view ?? new ConnectionView(deps.clock, deps.settings),
      held: new Set(),
      bounded: (operation, waitMs) => this.#bounded(operation, waitMs),
    };
  }

  /** Gives up every lease held here before its POST (shutdown): see `HeldLease.abandon`. */
  abandonLeases(reason: string): void {
    for (const lease of this.deps.held) lease.abandon(reason);
  }

  get view(): ConnectionView {
    return this.deps.view;
  }

  /** Reads the store until it holds a token that meets `request`, issuing it under the lease. */
  obtain(connection: ConnectionConfig, request: TokenRequest): Promise<ServedToken> {
    return obtain({ ...this.deps, reachability: this.#reachability }, connection, request, {
      letGo: (stale, record) => this.#letGo(connection.name, stale, record, request.deadline),
      acquire: (plan) => this.#acquireAndIssue(connection, plan, request),
    });
  }

  /**
   * Tries once for the lease to replace `current`, a still-valid token, and issues its
   * successor. Never waits for another holder: undefined when a replacement is under way.
   */
  async refresh(
    connection: ConnectionConfig,
    current: TokenRecord,
    deadline: Deadline,
    caller: string = UNNAMED_CALLER,
    cause: IssuanceCause = IssuanceCause.RefreshAhead,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    const request = ownRequest(0, deadline, caller);
    const { clock, view } = this.deps;
    // A countdown announced at our last read is left to its holder (`obtain` finds a dead one).
    const entry = view.entry(name);
    if (entry?.lease && entry.record.tokenDigest === current.tokenDigest) return undefined;
    const { countdown, least } = this.refreshMs(connection, current);
    if (least >= deadline.leftMs()) throw notEnoughTime(countdown);
    // Replace the token we saw, never a newer one another container wrote meanwhile.
    const replacesDigest = current.tokenDigest;
    const forced = isCallersWord(cause);
    const plan = { countdown, takeOver: undefined, replacesDigest, replaced: current, forced };
    const announce =
      cause === IssuanceCause.Invalidate
        ? 'Replacing a reported token'
        : 'Refreshing the token ahead of expiry';
    const outcome = await this.#acquireAndIssue(
      connection,
      { ...plan, suspect: false, needMs: 0, cause },
      request,
      announce,
    );
    if ('record' in outcome) return outcome;
    // What won is a read as good as any: no other try until it changes.
    if (outcome.state) view.observe(connection, outcome.state, outcome.read, clock.now());
    // Lost during the flow: `current` may be revoked; whatever the store holds now is served.
    return outcome.lost ? this.obtain(connection, request) : undefined;
  }

  /** A refresh of `record`'s countdown, how long it may take and the least it needs (ms). */
  refreshMs(connection: ConnectionConfig, record: TokenRecord) {
    const { settings } = this.deps;
    const countdown = leaseCountdown(connection.revokesOnReissue, record, undefined, settings);
    const budget = refreshBudgetMs(countdown, settings.upstreamTimeoutMs, settings.timing);
    return { countdown, budget, least: leaseNeedsMs(countdown, settings.timing) };
  }

  /** Takes the lease as `plan` says and issues under it; else the state that won, or `lost`. */
  async #acquireAndIssue(
    connection: ConnectionConfig,
    plan: AcquirePlan,
    { deadline, caller }: TokenRequest,
    announce?: string,
  ): Promise<ServedToken | { state?: TokenState; read: ReadSent; lost?: boolean }> {
    const { name } = connection;
    const { clock } = this.deps;
    if (this.refusal !== undefined) {
      this.deps.metrics.record(MetricName.IssuanceRefused, name);
      throw new FunctionTimeoutTooShortError(this.refusal);
    }
    const ours = this.#nextLease();
    const read = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
    const { countdown, takeOver, replacesDigest, forced } = plan;
    const terms = { countdown, takeOver, replacesDigest, forced };
    const attempt = await this.#acquire(name, ours, deadline, terms).catch((error: unknown) => {
      throw error instanceof StoreUnavailableError ? error : storeFailure('take the lease', error);
    });
    // A write applied but whose answer was lost shows our own version: the lease is ours.
    if (!attempt.acquired && attempt.state.lease?.version !== ours.version) {
      return { state: attempt.state, read };
    }
    if (announce) this.deps.logger.info(announce, { connection: name, countdown });
    const leasedAt = read.sentAtMonotonic;
    const answeredAt = clock.monotonic();
    const flow = { ...plan, lease: ours, deadline, leasedAt, answeredAt, caller };
    const issued = await issueUnderLease(this.deps, connection, flow);
    // Our lease was taken over while we ran: the new holder's token wins.
    return issued === LOST ? { read, lost: true } : issued;
  }

  /** A new attempt's lease: a holder id of its own, and its first version. */
  #nextLease(): LeaseRef {
    this.#attempts += 1;
    return { holder: `${this.#containerId}:${this.#attempts}`, version: randomUUID() };
  }

  /** Asks for the lease as `ours` (`leaseMs`, cut to the deadline), within the deadline. */
  #acquire(
    name: string,
    ours: LeaseRef,
    deadline: Deadline,
    terms: Pick<LeaseRequest, 'countdown' | 'takeOver' | 'replacesDigest' | 'forced'>,
  ): Promise<LeaseAttempt> {
    // A lease that starts a countdown is renewed by its first step a step after its answer.
    const { timing } = this.deps.settings;
    const durationMs = leaseTerm(deadline.leftMs(), timing, terms.countdown > 1);
    const leaseExpiresAt = this.deps.clock.now() + durationMs;
    // The take announces its step too (ADR 0032): the wait and this container's last read.
    const stepMs = timing.countdownStepMs + (this.deps.view.readMs(name) ?? 0);
    const request: LeaseRequest = { ...ours, leaseExpiresAt, durationMs, stepMs, ...terms };
    const acquired = this.deps.store.acquireLease(name, request, { deadline });
    return this.#bounded(acquired, deadline.leftMs());
  }

  /** Takes a stale lease over exactly and releases it at once, best effort. */
  async #letGo(name: string, stale: Lease, valid: TokenRecord, deadline: Deadline): Promise<void> {
    const ours = this.#nextLease();
    try {
      const attempt = await this.#acquire(name, ours, deadline, {
        countdown: stale.countdown,
        takeOver: stale,
        replacesDigest: valid.tokenDigest,
      });
      if (attempt.acquired) {
        const release = this.deps.store.releaseLease(name, ours, { deadline });
        await this.#bounded(release, deadline.leftMs());
      }
      this.deps.logger.info('Stale lease let go', { connection: name, countdown: stale.countdown });
    } catch {
      // The next read tries again, or finds it gone.
    }
  }

  /** A store call cut to `waitMs` (I3; see `withDeadline`). */
  #bounded<T>(operation: Promise<T>, waitMs: number): Promise<T> {
    return withDeadline(operation, waitMs, this.deps.clock, () => storeFailure('answer in time'));
  }
}
