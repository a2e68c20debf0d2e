/**
 * The observer's driver: reads the store until it holds a token that meets the caller's need,
 * doing what `observer.ts` decides after each read (serve, read again, let a stale lease go,
 * refuse, take the lease and issue under it, or wait for the holder). The holder's side is
 * `issue-under-lease.ts` and `held-lease.ts`; what the container knows, `connection-view.ts`;
 * all timing, `timing/`. Deadlines are judged on the monotonic clock (I3).
 */
import type { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import {
  FunctionTimeoutTooShortError,
  ReplacementRefusedError,
  StoreUnavailableError,
} from '../../errors.js';
import { MetricName } from '../../metrics.js';
import type { TokenRecord, TokenState } from '../../ports.js';
import type { HolderDeps, LeasedFlow } from '../holder/index.js';
import { issueUnderLease, LeaseTaker, LOST } from '../holder/index.js';
import { IssuanceCause, isCallersWord, type Trigger, UNNAMED_TRIGGER } from '../issuance/index.js';
import {
  awaitCutOver,
  type Decision,
  decide,
  type Need,
  notEnoughTime,
  readStore,
  StoreReachability,
  storeFailure,
  waitTimedOut,
} from '../observer/index.js';
import { withDeadline } from '../single-flight.js';
import { leaseCountdown, leaseNeedsMs, readReserveMs, refreshBudgetMs } from '../timing/index.js';
import type { ServedToken } from '../types.js';
import { ConnectionView, type ReadSent } from '../view/index.js';

export type { Need } from '../observer/index.js';
export { unsatisfiable } from '../observer/index.js';

export type LeasedIssuanceDeps = Omit<HolderDeps, 'bounded' | 'view'> & {
  /** What this container knows of each connection (its own, unless shared with a facade). */
  readonly view?: ConnectionView;
};

export class LeasedIssuance {
  readonly #holder: HolderDeps;
  readonly #leases: LeaseTaker;
  /** Whether the store answered the last read (a short wait for the next one if not). */
  readonly #reachability = new StoreReachability();
  /** Why every issuance is refused, if it is (`refuseIssuance`). */
  #refusal: string | undefined;
  private readonly deps: HolderDeps;

  constructor(deps: LeasedIssuanceDeps) {
    this.deps = {
      ...deps,
      view: deps.view ?? new ConnectionView(deps.clock, deps.settings),
      held: new Set(),
      bounded: (operation, waitMs) => this.#bounded(operation, waitMs),
    };
    this.#holder = this.deps;
    this.#leases = new LeaseTaker(this.deps);
  }

  /**
   * Gives up every lease this container holds before its POST (its environment is shutting
   * down): those flows send nothing and release their leases. See `HeldLease.abandon`.
   */
  abandonLeases(reason: string): void {
    // Stryker disable next-line ArrayDeclaration: equivalent: the constructor always sets `held`
    for (const lease of this.deps.held ?? []) lease.abandon(reason);
  }

  /**
   * Refuses every issuance with `reason` (a function timeout too short for a refresh: the
   * edge's `timeout-gate.ts`), before any lease is taken; undefined lifts it. Readers are still
   * served whatever the store and memory prove.
   */
  refuseIssuance(reason: string | undefined): void {
    this.#refusal = reason;
  }

  /** What this container knows of each connection. */
  get view(): ConnectionView {
    return this.deps.view;
  }

  /** The last measured issuance duration of a connection (a default before the first). */
  issuanceMs(connection: string): number {
    return this.deps.view.issuanceMs(connection) ?? this.deps.settings.timing.defaultIssuanceMs;
  }

  /**
   * Reads the store until it holds a token that meets `need`, issuing it under the lease.
   * @param by the caller's deadline
   * @param bypassMemory never fall back to memory when the store is unreadable (the warm-up)
   * @param trigger who asked (logged with an issuance)
   * @param mayForce whether the caller may force a replacement (see `caller-bounds.ts`)
   */
  async obtain(
    connection: ConnectionConfig,
    need: Need,
    by: Deadline,
    bypassMemory: boolean,
    trigger: Trigger = UNNAMED_TRIGGER,
    mayForce = true,
  ): Promise<ServedToken> {
    const { name } = connection;
    const { clock, view, settings } = this.deps;
    let known: { state: TokenState; read: ReadSent } | undefined;
    let waits = 0;
    // Polls since the countdown last moved: the backoff starts again when it does, for the
    // token then comes within a step or the POST (a waiter whose backoff had grown at countdown
    // 1 slept 452 ms past the successor on a global table: `regions-three`, 2026-11-25).
    let polls = { countdown: undefined as number | undefined, since: 0 };
    const cutOverMs = await awaitCutOver(this.deps, name, by, {
      issuanceMs: this.issuanceMs(name),
      lastReadMs: view.readMs(name),
    });
    if (cutOverMs > 0) {
      this.deps.logger.debug('Waited for the announced cut-over', { connection: name, cutOverMs });
    }
    for (;;) {
      // 1. Read the store, or take the state that won a lost acquisition. What a read proves
      //    counts from when it was sent.
      const read = known?.read ?? { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
      const state =
        known?.state ??
        (await readStore(
          { ...this.deps, reachability: this.#reachability },
          name,
          bypassMemory ? undefined : need,
          by.leftMs(),
        ));
      const fresh = known === undefined;
      known = undefined;
      if ('source' in state) return state; // the store is down; memory had a usable token
      // 2. Keep what it says (I2's proof, the lease watch).
      const now = clock.now();
      const sinceReadMs = clock.monotonic() - read.sentAtMonotonic;
      // Stryker disable next-line StringLiteral: equivalent: `measured` tells only 'issuance' apart
      if (fresh) view.measured(name, 'read', sinceReadMs);
      const seen = view.observe(connection, state, read, now);
      if (state.lease?.countdown !== polls.countdown) {
        polls = { countdown: state.lease?.countdown, since: 0 };
      }
      // 3. Decide.
      const decision = decide({
        ...seen,
        state,
        need,
        now,
        sinceReadMs,
        leftMs: by.leftMs(),
        readReserveMs: readReserveMs(view.readMs(name), this.deps.settings.timing),
        lastReadMs: view.readMs(name),
        revokesOnReissue: connection.revokesOnReissue,
        mayForce,
        knownForMs: seen.valid ? view.knownFor(name, seen.valid.tokenDigest) : 0,
        waits: polls.since,
        issuanceMs: this.issuanceMs(name),
        draw: clock.random(),
        settings,
      });
      // Why a caller waited, read again or took the lease: DEBUG only (no credential in it).
      this.deps.logger.debug('Store read decided', {
        connection: name,
        decision: decision.do,
        ...(decision.do === 'wait' ? { waitMs: Math.round(decision.ms) } : {}),
        countdown: state.lease?.countdown,
        readMs: Math.round(sinceReadMs),
        waits,
      });
      // 4. Act.
      switch (decision.do) {
        case 'serve':
          return { record: decision.record, source: 'dynamodb' };
        // Stryker disable next-line StringLiteral: equivalent: a decision no case matches loops too
        case 'reread':
          continue;
        case 'refuse':
          if (decision.callersWord) this.#refused(name, decision.error, need, trigger);
          throw decision.error;
        case 'let-go':
          await this.#leases.letGo(name, decision.stale, decision.record, by);
          continue;
        case 'acquire': {
          const outcome = await this.#acquireAndIssue(connection, decision, by, trigger);
          if ('record' in outcome) return outcome;
          if (outcome.state) known = { state: outcome.state, read: outcome.read };
          continue;
        }
        case 'wait':
          if (waits === 0) {
            this.deps.metrics.record(MetricName.LeaseWaits, name);
            this.deps.logger.info('Waiting for another container to issue the token', {
              connection: name,
              leaseExpiresInMs: decision.lease.expiresAt - now,
            });
          }
          waits += 1;
          polls.since += 1;
          await clock.sleep(decision.ms);
          if (by.passed()) throw waitTimedOut(decision.suspect);
      }
    }
  }

  /**
   * Tries once for the lease to replace `current`, a token that is still valid, and issues its
   * successor once the countdown it announces has run out (the caller that started it is not
   * kept waiting: see the facade). Never waits for another holder: undefined when a
   * replacement is under way elsewhere, as seen at our last read (no write then) or now.
   */
  async refresh(
    connection: ConnectionConfig,
    current: TokenRecord,
    by: Deadline,
    trigger: Trigger = UNNAMED_TRIGGER,
    cause: IssuanceCause = IssuanceCause.RefreshAhead,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    const { clock, view, settings } = this.deps;
    // A countdown announced at our last read is left to its holder. Whether that holder died
    // only a read can tell (the same version seen again after its duration): that read comes
    // when the countdown has run out on our clock (`obtain`), which lets a dead one go (or, for
    // a caller the token does not satisfy inside its window, takes it over and goes on from its
    // countdown).
    const entry = view.entry(name);
    if (entry?.lease && entry.record.tokenDigest === current.tokenDigest) return undefined;
    const countdown = leaseCountdown(connection.revokesOnReissue, current, undefined, settings);
    if (leaseNeedsMs(countdown, settings.timing) >= by.leftMs()) throw notEnoughTime(countdown);
    const outcome = await this.#acquireAndIssue(
      connection,
      {
        countdown,
        takeOver: undefined,
        // Replace the token we saw, never a newer one another container wrote meanwhile.
        replacing: current.tokenDigest,
        replacingValid: current,
        suspect: false,
        needMs: 0,
        cause,
        forced: isCallersWord(cause),
      },
      by,
      trigger,
      cause === IssuanceCause.Invalidate
        ? 'Replacing a reported token'
        : 'Refreshing the token ahead of expiry',
    );
    if ('record' in outcome) return outcome;
    // What won is a read as good as any: no other try until it changes.
    if (outcome.state) view.observe(connection, outcome.state, outcome.read, clock.now());
    // Lost during the flow: our token request may have gone out and revoked `current`, which
    // must not be served; whatever the store holds now (ours, or the new holder's) is.
    return outcome.lost ? this.obtain(connection, 0, by, false, trigger) : undefined;
  }

  /** How long a refresh of `record` may take, and the least it needs (countdown, POST, write), ms. */
  refreshMs(connection: ConnectionConfig, record: TokenRecord): { budget: number; least: number } {
    const { revokesOnReissue } = connection;
    const countdown = leaseCountdown(revokesOnReissue, record, undefined, this.deps.settings);
    const { timing } = this.deps.settings;
    const budget = refreshBudgetMs(countdown, this.deps.settings.upstreamTimeoutMs, timing);
    return { budget, least: leaseNeedsMs(countdown, timing) };
  }

  /**
   * Takes the lease as `plan` says and, if won, issues under it. Otherwise: the state that won
   * (a read as good as any), or `sent` when our lease was lost after the POST left.
   */
  async #acquireAndIssue(
    connection: ConnectionConfig,
    plan: Omit<Extract<Decision, { do: 'acquire' }>, 'do'>,
    by: Deadline,
    trigger: Trigger,
    announce?: string,
  ): Promise<ServedToken | { state?: TokenState; read: ReadSent; lost?: boolean }> {
    const { name } = connection;
    const { clock } = this.deps;
    if (this.#refusal !== undefined) {
      this.deps.metrics.record(MetricName.IssuanceRefused, name);
      throw new FunctionTimeoutTooShortError(this.#refusal);
    }
    const ours = this.#leases.next();
    const read = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
    const attempt = await this.#leases
      .acquire(name, ours, by, {
        countdown: plan.countdown,
        takeOver: plan.takeOver,
        replacing: plan.replacing,
        forced: plan.forced,
      })
      .catch((error: unknown) => {
        throw error instanceof StoreUnavailableError
          ? error
          : storeFailure('take the lease', error);
      });
    // A write that was applied but whose answer was lost (then retried) shows our own version
    // in the state that won: the lease is ours.
    if (!attempt.acquired && attempt.state.lease?.version !== ours.version) {
      return { state: attempt.state, read };
    }
    if (announce) this.deps.logger.info(announce, { connection: name, countdown: plan.countdown });
    const flow: LeasedFlow = {
      lease: ours,
      needMs: plan.needMs,
      deadline: by,
      replacing: plan.replacingValid,
      suspect: plan.suspect,
      leasedAt: read.sentAtMonotonic,
      answeredAt: clock.monotonic(),
      countdown: plan.countdown,
      cause: plan.cause,
      forced: plan.forced,
      trigger,
    };
    const issued = await issueUnderLease(this.#holder, connection, flow, (ms) =>
      this.deps.view.measured(name, 'issuance', ms),
    );
    // Our lease was taken over while we ran: the new holder's token wins.
    return issued === LOST ? { read, lost: true } : issued;
  }

  /** Logs and counts a caller's word refused (I4). */
  #refused(name: string, error: Error, need: Need, trigger: Trigger): void {
    if (!(error instanceof ReplacementRefusedError)) return;
    this.deps.metrics.record(MetricName.ReplacementsRefused, name);
    this.deps.logger.info('Replacement on a caller’s word refused', {
      connection: name,
      caller: trigger,
      code: error.code,
      minValidity: typeof need === 'number' ? Math.ceil(need / 1000) : undefined,
      availableMinValidity: error.availableMinValidity,
    });
  }

  /** A store call cut to `waitMs` (I3; see `withDeadline`). */
  #bounded<T>(operation: Promise<T>, waitMs: number): Promise<T> {
    return withDeadline(operation, waitMs, this.deps.clock, () => storeFailure('answer in time'));
  }
}
