/**
 * Issuance under a lease held in the shared store: one container at a time runs the upstream
 * flow for a connection; the others wait for its token. The lease is a conditional write on
 * the token item (see the DynamoDB store); writing the token releases it in the same step, and
 * only the holder may write (the fencing check on the far side).
 *
 *   read ─┬─ valid token, no lease, or a lease still counting down ───────────────────▸ serve
 *         ├─ no live lease ─▸ take it ─┬─ won ─▸ authorize ‖ count down ─▸ confirm ─▸ POST ─▸ write
 *         │                            └─ lost ─▸ the state that won ─▸ loop
 *         └─ live lease elsewhere ─▸ wait (full jitter, own deadline) ─▸ loop
 *
 * - The cut-over is announced: a lease that replaces a valid token (of an upstream that revokes
 *   on re-issue) starts with a countdown longer than a memory re-check, lowered one step per
 *   lease write (see `Lease.countdown` and `held-lease.ts`). Every container keeps serving the
 *   old token, from memory, until the countdown it last read runs out, so no container reads
 *   faster than its re-check to learn of a refresh, and callers wait only at the cut-over.
 * - A token whose lease has counted down (live or lapsed) is being replaced: its successor's
 *   request may already have revoked it, so it is not served (nor kept) until the lease goes.
 * - The holder renews the lease every LEASE_HEARTBEAT_MS (the DynamoDB Lock Client's pattern)
 *   and aborts its upstream requests when a renewal fails or its lease time runs out.
 * - Just before the access-token POST it confirms the lease with a conditional write that
 *   covers the POST and a grace after it, and sends only if that confirmation is fresh: a
 *   holder paused past its lease never sends.
 * - A POST whose outcome is unknown (timed out, reset after sending) counts as issued: the token
 *   it replaces is dropped (compare-and-delete) and the lease is kept through the grace, so no
 *   other POST starts while this one could still land.
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import type { ConnectionConfig } from '../config.js';
import {
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  UpstreamUnavailableError,
} from '../errors.js';
import { type BrokerMetrics, MetricName } from '../metrics.js';
import type {
  Lease,
  LeaseAttempt,
  LeaseRequest,
  TokenRecord,
  TokenState,
  TokenStore,
} from '../ports.js';
import { type CallerBoundSettings, forcingRefusal } from './caller-bounds.js';
import type { Issue } from './credential-rotation.js';
import { afterFailedFlow } from './failed-flow.js';
import { HeldLease, LEASE_MS, MIN_POST_MS, STORE_RESERVE_MS } from './held-lease.js';
import {
  causeOf,
  IssuanceCause,
  isCallersWord,
  type Trigger,
  UNNAMED_TRIGGER,
} from './issuance-cause.js';
import { recordIssued } from './issued-token.js';
import { LeaseWatch } from './lease-watch.js';
import {
  COUNTDOWN_STEP_MS,
  countdownFor,
  DEFAULT_ISSUANCE_MS,
  DRAIN_MARGIN_MS,
  ownRecheckMs,
  replacementMayBeOut,
  SKEW_TOLERANCE_MS,
  servableUnconfirmed,
  servableUntil,
  windowMs,
} from './refresh-policy.js';
import { withDeadline } from './single-flight.js';
import type { TokenMemory } from './token-memory.js';
import type { BrokerLogger, ServedToken } from './types.js';

/** Polling a lease held elsewhere: first wait and cap (full jitter in between). */
const POLL_BASE_MS = 25;
const POLL_CAP_MS = 500;
/** The most a reader counts per countdown step for the holder's lease write. */
const MAX_STEP_WRITE_MS = 15;
/**
 * Kept before the deadline for the read that ends a cut-over wait (at least twice the last
 * measured read): a read sent with no time left could only fail.
 */
const READ_RESERVE_MS = 50;

/** Validity a caller needs, in ms, or "not inside its refresh window" (the warm-up's need). */
export type Need = number | 'outside-window';

export interface LeasedIssuanceDeps {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly issue: Issue;
  readonly memory: TokenMemory;
  readonly settings: CallerBoundSettings & {
    /**
     * The upstream request timeout: the grace after a POST during which it may still land, and
     * during which no other POST for the connection starts.
     */
    readonly upstreamTimeoutMs: number;
  };
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
}

/** One run of the upstream flow under a lease. */
export interface LeasedFlow {
  readonly holder: string;
  /** Validity (ms) the caller needs from the new token. */
  readonly needMs: number;
  readonly deadline: number;
  /** The valid token this run replaces, if any: dropped if the POST is lost. */
  readonly replacing: TokenRecord | undefined;
  /** Local time at which the lease was written (its write was sent): lease time counts from here. */
  readonly leasedAt: number;
  /** Local time at which that write was answered: the countdown's first step counts from here. */
  readonly answeredAt: number;
  /** The countdown the lease was written with. */
  readonly countdown: number;
  /** Why the token is issued, and at whose request (logged and counted with the issuance). */
  readonly cause: IssuanceCause;
  /** Issued on a caller's word, or by taking over a lease that was (see `TokenRecord.forced`). */
  readonly forced: boolean;
  readonly trigger: Trigger;
}

/** The deadline came while another container held the lease. */
const waitTimedOut = (suspect: boolean) =>
  new UpstreamUnavailableError(
    'Timed out waiting for another container to issue the token',
    // While a replacement is under way the current token may already be revoked: it must not
    // be served as the last good one.
    { retryAfterSeconds: 1, refreshInProgress: suspect },
  );

/** The lease was lost during a flow: the new holder's token wins. */
const LOST = Symbol('lost');

export class LeasedIssuance {
  readonly #containerId = randomUUID();
  #attempts = 0;
  /** Last measured issuance duration per connection: XFetch's δ. */
  readonly #issuanceMs = new Map<string, number>();
  readonly #watch: LeaseWatch;
  /** Last measured store read round trip per connection: a countdown step takes that longer. */
  readonly #readMs = new Map<string, number>();

  constructor(private readonly deps: LeasedIssuanceDeps) {
    this.#watch = new LeaseWatch(() => deps.clock.monotonic());
  }

  /** The last measured issuance duration of a connection (a default before the first). */
  issuanceMs(connection: string): number {
    return this.#issuanceMs.get(connection) ?? DEFAULT_ISSUANCE_MS;
  }

  /**
   * Reads the store until it holds a token that meets `need`, issuing it under the lease.
   * @param bypassMemory never fall back to memory when the store is unreadable (the warm-up)
   * @param trigger who asked (logged with an issuance)
   * @param mayForce whether the caller may force a replacement (see `caller-bounds.ts`)
   */
  async obtain(
    connection: ConnectionConfig,
    need: Need,
    deadline: number,
    bypassMemory: boolean,
    trigger: Trigger = UNNAMED_TRIGGER,
    mayForce = true,
  ): Promise<ServedToken> {
    const { name } = connection;
    const { clock, settings } = this.deps;
    let known: { state: TokenState; sentAt: number; sentAtMonotonic: number } | undefined;
    let waits = 0;
    await this.#awaitCutOver(name, deadline);
    for (;;) {
      // A read reflects the store at some instant after it was sent: memory counts from then.
      const sentAt = known?.sentAt ?? clock.now();
      const sentAtMonotonic = known?.sentAtMonotonic ?? clock.monotonic();
      const state = known?.state ?? (await this.#read(name, need, bypassMemory, deadline));
      const fresh = known === undefined;
      known = undefined;
      if ('source' in state) return state; // the store is down; memory had a usable token
      const now = clock.now();
      const nowMonotonic = clock.monotonic();
      // Durations on the monotonic clock: a stepped wall clock skews no reserve or estimate.
      if (fresh) this.#readMs.set(name, nowMonotonic - sentAtMonotonic);
      const { token, lease } = state;
      // DynamoDB deletes expired items late (up to days): expiry is always checked here.
      const valid = token && token.expiresAt > now ? token : undefined;
      const needMs = need === 'outside-window' ? (valid ? windowMs(valid, settings) : 0) : need;
      const { suspect, until } = this.#remember(connection, state, sentAt, now, sentAtMonotonic);
      if (valid && !suspect && lease && this.#watch.stale(name, lease, now)) {
        // A countdown nobody advances (its holder died before the cut-over): readers would
        // re-read at each of its ends. It is taken over and let go, so they are back to one
        // read per re-check; any later replacement counts down afresh from the top.
        await this.#letGo(name, lease, valid, deadline);
        continue;
      }
      if (valid && !suspect && valid.expiresAt - now > needMs) {
        // An answer that took longer than its proof lasts may predate a replacement that has
        // since revoked the token (a slow link): ask again rather than serve it.
        if (now < until) return { record: valid, source: 'dynamodb' };
        if (now >= deadline) {
          throw new StoreUnavailableError('The token store answered too slowly; retry shortly');
        }
        continue;
      }
      // Refused before any upstream call: a new token would live as long as this one did.
      if (token && token.expiresAt - token.issuedAt <= needMs) throw unsatisfiable(token, needMs);

      const leaseLive = lease !== undefined && !this.#watch.stale(name, lease, now);
      // A caller's validity that only a replacement gives, with none under way: bounded.
      if (valid && !suspect && !leaseLive && need !== 'outside-window') {
        const refusal = forcingRefusal(
          {
            record: valid,
            needMs,
            now,
            knownForMs: this.deps.memory.knownFor(name, valid.tokenDigest),
            mayForce,
          },
          settings,
        );
        if (refusal) {
          this.deps.metrics.record(MetricName.ReplacementsRefused, name);
          this.deps.logger.info('Replacement on a caller’s word refused', {
            connection: name,
            caller: trigger,
            code: refusal.code,
            minValidity: Math.ceil(needMs / 1000),
            availableMinValidity: refusal.availableMinValidity,
          });
          throw refusal;
        }
      }
      if (!leaseLive) {
        if (deadline <= now) {
          throw new UpstreamUnavailableError('No time left to issue a token', {
            retryAfterSeconds: 1,
            refreshInProgress: suspect,
          });
        }
        // A token that expired a moment ago on this clock may still be valid on a container
        // whose clock runs behind: its replacement is announced too.
        const recent = token && token.expiresAt + SKEW_TOLERANCE_MS > now ? token : undefined;
        const countdown = this.#countdown(connection, recent, lease);
        this.#checkTimeForCountdown(countdown, now, deadline);
        const holder = this.#nextHolder();
        const cause = causeOf({
          state,
          valid,
          suspect,
          takeOver: lease,
          warmUp: need === 'outside-window',
        });
        // A lease taken over from a caller's replacement (stopped, or its outcome unknown)
        // finishes it: its token is the caller's word too.
        const forced = isCallersWord(cause) || lease?.forced === true;
        const attempt = await this.#store('take the lease', () =>
          this.#acquire(name, holder, now, deadline, {
            countdown,
            takeOver: lease,
            // Replace exactly the token we saw (a suspect one whatever its expiry), or none if
            // we saw none: a token written by another container since our read may be served
            // elsewhere already, and nothing announced its replacement.
            replaceIfExpiresBefore: token ? token.expiresAt + 1 : 0,
            forced,
          }),
        );
        // A write that was applied but whose answer was lost (then retried) shows our own
        // holder in the state that won: the lease is ours.
        if (attempt.acquired || attempt.state.lease?.holder === holder) {
          const issued = await this.#issueUnderLease(connection, {
            holder,
            needMs,
            deadline,
            replacing: valid,
            leasedAt: now,
            answeredAt: clock.now(),
            countdown,
            cause,
            forced,
            trigger,
          });
          if (issued !== LOST) return issued;
          continue; // our lease was taken over while we ran: wait for the new holder's token
        }
        known = { state: attempt.state, sentAt: now, sentAtMonotonic: nowMonotonic };
        continue;
      }

      // Another container holds a live lease: wait for its token, within our own deadline.
      if (waits === 0) {
        this.deps.metrics.record(MetricName.LeaseWaits, name);
        this.deps.logger.info('Waiting for another container to issue the token', {
          connection: name,
          leaseExpiresInMs: lease.expiresAt - now,
        });
      }
      if (deadline - now <= 0) throw waitTimedOut(suspect);
      // Full jitter below a doubling ceiling, at least 1 ms, never past the deadline; and no
      // sooner than the lease's countdown runs out (no token can come before). At a cut-over
      // the token comes one access-token round trip (about half an issuance) after the
      // countdown ends: the ceiling starts there, so a waiter reads a few times, not a dozen.
      const base = valid ? Math.max(POLL_BASE_MS, this.issuanceMs(name) / 2) : POLL_BASE_MS;
      const ceiling = Math.min(POLL_CAP_MS, base * 2 ** waits);
      const counting = (lease.countdown - 1) * COUNTDOWN_STEP_MS - (now - sentAt);
      // I3. The next read is sent with time left for it; past that, a read sent could not answer
      // in time: the caller is told what kept it waiting (the holder), not that the store
      // failed (R3).
      const readBy = deadline - this.#readReserveMs(name);
      if (now >= readBy) throw waitTimedOut(suspect);
      const wait = Math.min(Math.max(1, clock.random() * ceiling, counting), readBy - now);
      waits += 1;
      await clock.sleep(wait);
      if (clock.now() >= deadline) throw waitTimedOut(suspect);
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
    deadline: number,
    trigger: Trigger = UNNAMED_TRIGGER,
    cause: IssuanceCause = IssuanceCause.RefreshAhead,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    const { clock, memory } = this.deps;
    const now = clock.now();
    const nowMonotonic = clock.monotonic();
    const entry = memory.get(name);
    // A countdown announced at our last read is left to its holder. Whether that holder died
    // only a read can tell (the same version seen again after its duration): that read comes
    // when the countdown has run out on our clock (`obtain`), which lets a dead one go. A
    // write here would be a failed conditional write per busy container per countdown.
    if (entry?.lease && entry.record.tokenDigest === current.tokenDigest) return undefined;
    const countdown = this.#countdown(connection, current, undefined);
    this.#checkTimeForCountdown(countdown, now, deadline);
    const forced = isCallersWord(cause);
    const holder = this.#nextHolder();
    const attempt = await this.#acquire(name, holder, now, deadline, {
      countdown,
      // Replace the token we saw, never a newer one another container wrote meanwhile.
      replaceIfExpiresBefore: current.expiresAt + 1,
      forced,
    });
    if (!attempt.acquired && attempt.state.lease?.holder !== holder) {
      // What won is a read as good as any: no other try until it changes.
      this.#remember(connection, attempt.state, now, clock.now(), nowMonotonic);
      return undefined;
    }
    this.deps.logger.info(
      cause === IssuanceCause.Invalidate
        ? 'Replacing a reported token'
        : 'Refreshing the token ahead of expiry',
      { connection: name, countdown },
    );
    const issued = await this.#issueUnderLease(connection, {
      holder,
      needMs: 0,
      deadline,
      replacing: current,
      leasedAt: now,
      answeredAt: clock.now(),
      countdown,
      cause,
      forced,
      trigger,
    });
    // Lost after our token request went out: it has revoked `current`, which must not be served;
    // whatever the store holds now (ours, or the new holder's) is.
    return issued === LOST ? this.obtain(connection, 0, deadline, false, trigger) : issued;
  }

  /** How long a refresh of `record` may take, announced countdown included (ms). */
  refreshBudgetMs(connection: ConnectionConfig, record: TokenRecord): number {
    const countdown = this.#countdown(connection, record, undefined);
    // Each step is a store round trip after a step's wait; then authorize and the POST.
    return (
      countdown * (COUNTDOWN_STEP_MS + 50) +
      2 * this.deps.settings.upstreamTimeoutMs +
      STORE_RESERVE_MS
    );
  }

  /**
   * A token whose announced countdown this container read has just run out: its successor comes
   * one access-token request (about half an issuance) after the countdown's last step. Reading
   * before then would only find the countdown ending, so the first read waits for it (within
   * the deadline): at a cut-over a busy container reads about once, not once per step.
   */
  async #awaitCutOver(name: string, deadline: number): Promise<void> {
    const { clock, memory } = this.deps;
    const entry = memory.get(name);
    if (!entry?.lease) return;
    // A countdown that did not move between two reads (its holder gone or starved) announces
    // nothing to wait for.
    const since = this.#watch.firstSeen(name, entry.lease);
    if (since === undefined || since < entry.checkedAt - COUNTDOWN_STEP_MS) return;
    const now = clock.now();
    // The access-token round trip, as last measured here (a slow one is not waited for whole).
    const roundTrip = Math.min(this.issuanceMs(name) / 2, POLL_CAP_MS);
    // Each step is a lease write after the step's wait, and the token a write after the POST:
    // about a store round trip each (as last measured here; a slow one is not counted whole).
    const write = Math.min(this.#readMs.get(name) ?? 0, MAX_STEP_WRITE_MS);
    const expected =
      entry.checkedAt + entry.lease.countdown * (COUNTDOWN_STEP_MS + write) + roundTrip + write;
    if (now < entry.until || now >= expected) return;
    // I3. Wake with time left for the read: a caller whose deadline comes first reads what the
    // store holds then (the successor, often), or is told it timed out waiting (R3).
    const wakeAt = Math.min(expected, deadline - this.#readReserveMs(name));
    if (wakeAt > now) await clock.sleep(wakeAt - now);
  }

  /** Time kept before a deadline for one more read of the store (see READ_RESERVE_MS). */
  #readReserveMs(name: string): number {
    return Math.max(READ_RESERVE_MS, 2 * (this.#readMs.get(name) ?? 0));
  }

  /**
   * Keeps what a read (sent at `sentAt`, answered at `now`) says of the connection's token: a
   * valid token with the time the read proves it safe, and the lease on it (first seen now, on
   * our clock). A token whose replacement's request may be out (its lease counted down, live
   * or lapsed) is suspect: neither served nor kept.
   */
  #remember(
    connection: ConnectionConfig,
    state: TokenState,
    sentAt: number,
    now: number,
    sentAtMonotonic: number,
  ): { suspect: boolean; until: number } {
    const { token, lease } = state;
    const { memory, settings } = this.deps;
    if (lease) this.#watch.stale(connection.name, lease, now);
    const valid = token && token.expiresAt > now ? token : undefined;
    // Where the upstream does not revoke on re-issue, a replacement harms nobody.
    const announced = connection.revokesOnReissue ? lease : undefined;
    const suspect = valid !== undefined && replacementMayBeOut(announced);
    if (!valid || suspect) {
      memory.delete(connection.name);
      return { suspect, until: sentAt };
    }
    const until = servableUntil(valid, announced, sentAt, settings);
    memory.set({
      record: valid,
      checkedAt: sentAt,
      checkedAtMonotonic: sentAtMonotonic,
      until,
      lease: announced,
      ...(state.reported ? { reported: true } : {}),
    });
    return { suspect, until };
  }

  /**
   * The countdown a lease that replaces `valid` is written with: a fresh one lasts past every
   * container's re-check; one that takes over a stale lease goes on from where that one was
   * seen, never higher than any reader was told; nothing to announce without a token that some
   * container may still serve, or where the upstream does not revoke on re-issue.
   */
  #countdown(
    connection: ConnectionConfig,
    valid: TokenRecord | undefined,
    takeOver: Lease | undefined,
  ): number {
    if (!connection.revokesOnReissue || !valid) return 0;
    return takeOver ? takeOver.countdown : countdownFor(valid, this.deps.settings);
  }

  /** Asks for the lease for `holder` (LEASE_MS, cut to the deadline), within the deadline. */
  #acquire(
    name: string,
    holder: string,
    now: number,
    deadline: number,
    terms: Pick<LeaseRequest, 'countdown' | 'takeOver' | 'replaceIfExpiresBefore' | 'forced'>,
  ): Promise<LeaseAttempt> {
    return this.#bounded(
      this.deps.store.acquireLease(name, {
        holder,
        leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
        durationMs: Math.min(deadline - now, LEASE_MS),
        ...terms,
      }),
      deadline,
    );
  }

  /** Takes a stale lease over and releases it at once; best effort (another may do it). */
  async #letGo(name: string, stale: Lease, valid: TokenRecord, deadline: number): Promise<void> {
    const { clock, store, logger } = this.deps;
    const holder = this.#nextHolder();
    const now = clock.now();
    try {
      const attempt = await this.#acquire(name, holder, now, deadline, {
        countdown: stale.countdown,
        takeOver: stale,
        replaceIfExpiresBefore: valid.expiresAt + 1,
      });
      if (attempt.acquired) await this.#bounded(store.releaseLease(name, holder), deadline);
      logger.info('Stale lease let go', { connection: name, countdown: stale.countdown });
    } catch {
      // The next read tries again, or finds it gone.
    }
  }

  /**
   * A lease whose countdown and token request cannot end before the deadline is not taken
   * (nothing would be sent).
   */
  #checkTimeForCountdown(countdown: number, now: number, deadline: number): void {
    if (now + countdown * COUNTDOWN_STEP_MS + MIN_POST_MS + STORE_RESERVE_MS < deadline) return;
    // Without this, a lease taken with too little time left for the POST was let go by the
    // fence before sending, and taken again at once, in a loop, until the deadline (the model
    // test found it).
    throw new UpstreamUnavailableError(
      countdown > 1
        ? 'Not enough time left to replace the token safely; retry shortly'
        : 'Not enough time left to issue a token; retry shortly',
      { retryAfterSeconds: 1 },
    );
  }

  /** Reads the store; when it is down, falls back to a usable token in memory. */
  async #read(
    name: string,
    need: Need,
    bypassMemory: boolean,
    deadline: number,
  ): Promise<TokenState | ServedToken> {
    try {
      return await this.#bounded(this.deps.store.read(name), deadline);
    } catch (error) {
      const cached = this.deps.memory.get(name);
      const needMs = need === 'outside-window' ? Number.POSITIVE_INFINITY : need;
      const now = this.deps.clock.now();
      if (
        !bypassMemory &&
        cached &&
        cached.record.expiresAt - now > needMs &&
        servableUnconfirmed(cached, now, this.deps.settings)
      ) {
        this.deps.logger.warn('Token store unreadable; serving the token held in memory', {
          connection: name,
        });
        return { record: cached.record, source: 'memory' };
      }
      throw new StoreUnavailableError('The token store could not be read; retry shortly', {
        cause: error,
      });
    }
  }

  /**
   * A store call that answers by `deadline` or fails: a stalled connection must not keep the
   * caller past its Lambda deadline (the SDK's own time limits bound each attempt as well).
   */
  #bounded<T>(operation: Promise<T>, deadline: number): Promise<T> {
    return withDeadline(
      operation,
      deadline - this.deps.clock.now(),
      this.deps.clock,
      () => new StoreUnavailableError('The token store did not answer in time; retry shortly'),
    );
  }

  async #store<T>(what: string, operation: () => Promise<T>): Promise<T> {
    try {
      return await operation();
    } catch (error) {
      throw new StoreUnavailableError(`The token store failed to ${what}; retry shortly`, {
        cause: error,
      });
    }
  }

  /**
   * Runs the flow while holding the lease and writes the token, which releases the lease.
   * LOST when the lease was lost meanwhile (the new holder's token wins).
   */
  async #issueUnderLease(
    connection: ConnectionConfig,
    flow: LeasedFlow,
  ): Promise<ServedToken | typeof LOST> {
    const { name } = connection;
    const { clock, store, logger, settings } = this.deps;
    const lease = new HeldLease({
      store,
      clock,
      connection: name,
      holder: flow.holder,
      deadline: flow.deadline,
      leasedAt: flow.leasedAt,
      answeredAt: flow.answeredAt,
      countdown: flow.countdown,
      upstreamTimeoutMs: settings.upstreamTimeoutMs,
      bounded: (operation, until) => this.#bounded(operation, until),
    });
    let record: TokenRecord;
    try {
      // The authorization code is asked for while the lease counts down; the fence before the
      // access-token request waits for the countdown's end (see HeldLease).
      const started = clock.monotonic();
      const issued = await this.deps
        .issue(connection, {
          deadline: flow.deadline - STORE_RESERVE_MS,
          signal: lease.signal,
          fence: () => lease.confirmForPost(),
        })
        .finally(() => lease.stop());
      const took = clock.monotonic() - started;
      this.#issuanceMs.set(name, took - lease.waitedMs);
      const issuedRecord = recordIssued(connection, issued, took, this.deps, flow);
      // The re-check this container's readers apply travels with the token (mixed settings).
      record = { ...issuedRecord, recheckMs: ownRecheckMs(issuedRecord, settings) };
    } catch (error) {
      lease.stop();
      await afterFailedFlow(
        { ...this.deps, bounded: (operation) => this.#bounded(operation, flow.deadline) },
        connection,
        { ...flow, confirmedUntil: lease.confirmedUntil },
        error,
      );
      return LOST;
    }
    let written: boolean;
    // When memory may vouch for the token: a re-check from now, or, if it could not be
    // written, only until other containers may take the confirmed lease over (and revoke it by
    // issuing again).
    const writtenAt = clock.now();
    const writtenAtMonotonic = clock.monotonic();
    let until = servableUntil(record, undefined, writtenAt, settings);
    try {
      written = await this.#bounded(store.putToken(record, flow.holder), flow.deadline);
    } catch (error) {
      // The token is valid: serve it rather than fail the caller, and keep it in memory only
      // while the confirmed lease keeps everyone else from replacing it.
      logger.error('Token store write failed; token kept in memory only', {
        connection: name,
        error: { name: (error as Error)?.name },
      });
      written = true;
      until = Math.min(until, (lease.confirmedUntil ?? writtenAt) - DRAIN_MARGIN_MS);
    }
    if (!written) {
      logger.warn('Lease was taken over while issuing; using the new holder’s token', {
        connection: name,
        tokenDigest: record.tokenDigest,
      });
      // Our token request went out: the token it replaced is revoked, wherever it is held.
      if (flow.replacing) this.deps.memory.forget(flow.replacing);
      return LOST;
    }
    this.deps.memory.set({
      record,
      checkedAt: writtenAt,
      checkedAtMonotonic: writtenAtMonotonic,
      until,
    });
    if (record.expiresAt - clock.now() <= flow.needMs) throw unsatisfiable(record, flow.needMs);
    return { record, source: 'upstream' };
  }

  #nextHolder(): string {
    this.#attempts += 1;
    return `${this.#containerId}:${this.#attempts}`;
  }
}

/** A token whose whole lifetime is shorter than what the caller asked for. */
export const unsatisfiable = (
  record: TokenRecord,
  needMs: number,
): MinValidityUnsatisfiableError => {
  const lifetime = Math.floor((record.expiresAt - record.issuedAt) / 1000);
  return new MinValidityUnsatisfiableError(
    `The Open API issues tokens valid for ${lifetime}s, which cannot satisfy a validity of ${Math.ceil(needMs / 1000)}s`,
  );
};
