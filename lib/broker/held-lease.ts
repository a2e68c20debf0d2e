/**
 * The holder's driver (`holder-state.ts` is its state machine): the lease as its holder keeps
 * it while the flow runs. It renews the lease every LEASE_HEARTBEAT_MS (the DynamoDB Lock
 * Client's pattern), judges it on its own monotonic clock, counts it down to the announced
 * cut-over, and confirms it at the fence just before the access-token POST. Every way of losing
 * it aborts `signal`, which stops the upstream requests in flight.
 *
 * The countdown (see `Lease.countdown`): starting from the value the lease was written with,
 * each write lowers it by one, sent at least COUNTDOWN_STEP_MS after the previous write was
 * answered (monotonic); the confirmation writes 0. Writes never overlap and go out in order, so
 * a reader that saw r knows the POST leaves more than (r - 1) steps after its read was sent (I2).
 */
import { randomUUID } from 'node:crypto';
import type { Clock, Deadline } from '../clock.js';
import type { LeaseRef, LeaseTerms, TokenStore } from '../ports.js';
import { type HolderEvent, type HolderState, mayPost, transition } from './holder-state.js';
import {
  COUNTDOWN_STEP_MS,
  LEASE_HEARTBEAT_MS,
  LEASE_MS,
  leaseTerm,
  MIN_POST_MS,
  STORE_RESERVE_MS,
} from './timing/index.js';

/** The lease went elsewhere, or its time ran out, before the access-token POST: nothing sent. */
export class LeaseLost extends Error {
  override readonly name = 'LeaseLost';
}

export interface HeldLeaseOptions {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly connection: string;
  /** The lease as written when it was taken: its holder and first version. */
  readonly lease: LeaseRef;
  readonly deadline: Deadline;
  /** Monotonic instant at which the lease write was sent: its time counts from here. */
  readonly leasedAt: number;
  /** Monotonic instant at which that write was answered: the first step counts from here. */
  readonly answeredAt: number;
  /** The countdown the lease was written with (0 or 1: nothing left to announce). */
  readonly countdown: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** Bounds a store call to `waitMs` (the caller's deadline, or the POST budget). */
  readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
}

export class HeldLease {
  readonly #aborter = new AbortController();
  #state: HolderState;
  /** The lease is ours until this monotonic instant. */
  #ownedUntil: number;
  /** When the last lease write was answered (monotonic). */
  #answeredAt: number;
  /** The version last written: each write names it, and sets a new one. */
  #version: string;
  /** A version sent whose answer never came: it may have landed (a release names it too). */
  #unanswered: string | undefined;
  /** The lease write in flight, if any: writes go out one at a time, in order. */
  #writing: Promise<unknown> = Promise.resolve();
  /** Settles once the countdown is down to 1 (or the lease is lost, or the flow over). */
  readonly #counted: Promise<void>;
  #stopped = false;
  readonly #stopLastCall: () => void;
  /** Settles when the lease is lost: nothing waits on a write that never comes back. */
  readonly #lost: Promise<void>;
  readonly #stopHeartbeat: () => void;
  #stopPostTimer: (() => void) | undefined;
  #waitedMs = 0;
  /** What the confirmation reserved (kept past the flow's end: the grace counts from it). */
  #confirmedUntil: number | undefined;

  constructor(private readonly options: HeldLeaseOptions) {
    const { clock, deadline } = options;
    this.#state = { name: 'counting', countdown: options.countdown };
    this.#ownedUntil = options.leasedAt + LEASE_MS;
    this.#version = options.lease.version;
    this.#answeredAt = options.answeredAt;
    this.#stopHeartbeat = clock.every(LEASE_HEARTBEAT_MS, () => {
      // Judged here too: a renewal that never comes back must not keep the lease alive.
      if (clock.monotonic() >= this.#ownedUntil) return void this.#lose('Lease time ran out');
      // A countdown step renews the lease as a heartbeat does.
      if (clock.monotonic() - this.#answeredAt >= LEASE_HEARTBEAT_MS / 2) void this.#write();
    });
    this.#lost = new Promise((resolve) =>
      this.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    // A countdown (or a slow store) that has not reached the POST by the time the POST and the
    // write after it no longer fit: nothing will be sent, so the lease is given up now (I3).
    this.#stopLastCall = clock.after(
      Math.max(0, deadline.leftMs() - STORE_RESERVE_MS - MIN_POST_MS),
      () => {
        if (this.#state.name === 'counting')
          this.#lose('No time left for the access-token request');
      },
    );
    this.#counted = this.#countDown();
  }

  /** The holder's state (see `holder-state.ts`). */
  get state(): HolderState {
    return this.#state;
  }

  /**
   * Wall-clock instant (the stored expiry) until which the fence's confirmation keeps every
   * other container from taking the lease over; none before it is confirmed.
   */
  get confirmedUntil(): number | undefined {
    return this.#confirmedUntil;
  }

  /** The lease as last written (the token write and a release name exactly it). */
  get ref(): LeaseRef {
    return {
      holder: this.options.lease.holder,
      version: this.#version,
      ...(this.#unanswered ? { unanswered: this.#unanswered } : {}),
    };
  }

  /** How long the flow waited for the countdown to end, in all (not part of an issuance). */
  get waitedMs(): number {
    return this.#waitedMs;
  }

  /** Aborted when the lease is lost: stops every upstream request in flight. */
  get signal(): AbortSignal {
    return this.#aborter.signal;
  }

  /**
   * The fence (I1): confirms the lease with a conditional write that covers the POST and a
   * grace after it, and throws LeaseLost (nothing is sent then) unless that confirmation is
   * fresh. Heartbeats stop here: the confirmed lease outlasts the POST. On return the POST may
   * leave (the holder is `posting`).
   */
  async fence(): Promise<void> {
    const { clock, store, connection, deadline, upstreamTimeoutMs } = this.options;
    // Fenced again while posting: the issue flow sends a second token request only after a
    // definite refusal of the first (rotated credentials), so nothing of the first can land.
    // The lease is confirmed afresh before the second leaves.
    if (this.#state.name === 'posting') this.#to({ type: 'post-refused' });
    const waitFrom = clock.monotonic();
    await Promise.race([this.#counted, this.#lost]);
    this.#stopHeartbeat();
    await Promise.race([this.#writing, this.#lost]);
    if (this.#countdown() > 0) await this.#stepGap(); // the confirmation is the last step
    if (this.signal.aborted) throw this.signal.reason;
    const sentAt = clock.now();
    const sentAtMonotonic = clock.monotonic();
    this.#waitedMs += sentAtMonotonic - waitFrom;
    const budget = Math.min(upstreamTimeoutMs, deadline.leftMs() - STORE_RESERVE_MS);
    if (budget < MIN_POST_MS) throw this.#loseNow('No time left for the access-token request');
    const expiresAt = sentAt + budget + upstreamTimeoutMs;
    const next: LeaseTerms = {
      version: randomUUID(),
      leaseExpiresAt: expiresAt,
      durationMs: expiresAt - sentAt,
      countdown: 0,
    };
    // Unconfirmed (taken over, or the store unreachable) means unsent: nothing to undo. An
    // answer that never came may hide a confirmation that landed: the release names it too.
    this.#unanswered = next.version;
    const confirmed = await this.options
      .bounded(store.renewLease(connection, this.ref, next), budget)
      .then(
        (answer) => {
          if (!answer) this.#unanswered = undefined;
          return answer;
        },
        () => false,
      );
    if (!confirmed) throw this.#loseNow('Lease not confirmed before the access-token request');
    this.#unanswered = undefined;
    this.#version = next.version;
    this.#confirmedUntil = expiresAt;
    this.#to({ type: 'confirmed', until: expiresAt });
    // Paused between the confirmation and here? Then the POST no longer fits its lease.
    const left = sentAtMonotonic + budget - clock.monotonic();
    if (left < MIN_POST_MS || !mayPost(this.#state)) {
      throw this.#loseNow('Lease confirmation is stale');
    }
    this.#stopPostTimer?.();
    this.#stopPostTimer = clock.after(left, () =>
      this.#lose('The access-token request outlived its lease'),
    );
    this.#to({ type: 'post-sent' });
  }

  /**
   * Gives the lease up before its POST (the execution environment is shutting down): a holder
   * still counting down, or fenced, sends nothing and its flow releases the lease, so that no
   * other container waits out its duration. A POST already out is left to its answer (I1).
   */
  abandon(reason: string): void {
    if (this.#state.name === 'counting' || this.#state.name === 'fenced') this.#lose(reason);
  }

  /** Records how the flow ended (the token written, or not) and stops every timer. */
  end(event: HolderEvent): void {
    this.#to(event);
    this.stop();
  }

  /** Stops the heartbeat and the POST's timer (the flow is over). */
  stop(): void {
    this.#stopped = true;
    this.#stopLastCall();
    this.#stopHeartbeat();
    this.#stopPostTimer?.();
  }

  #countdown(): number {
    return this.#state.name === 'counting' ? this.#state.countdown : 0;
  }

  /** Lowers the countdown one step at a time until 1; the confirmation writes the last step. */
  async #countDown(): Promise<void> {
    await undefined; // starts once the flow that holds the lease is under way
    while (this.#countdown() > 1 && !this.#stopped && !this.signal.aborted) {
      await this.#stepGap();
      if (this.#stopped || this.signal.aborted) return;
      if (!(await this.#write(this.#countdown() - 1))) return;
    }
  }

  /** Waits until a step has passed (monotonic) since the last write was answered. */
  async #stepGap(): Promise<void> {
    const wait = this.#answeredAt + COUNTDOWN_STEP_MS - this.options.clock.monotonic();
    if (wait > 0) await this.options.clock.sleep(wait);
  }

  /**
   * Writes a new version of the lease (a heartbeat keeps the countdown where it is), after the
   * write in flight is answered. False when the lease is lost (and `signal` then aborted).
   */
  #write(countdown?: number): Promise<boolean> {
    const { clock, store, connection, deadline } = this.options;
    const run = async (): Promise<boolean> => {
      if (this.signal.aborted || this.#state.name !== 'counting') return false;
      const sentAt = clock.monotonic();
      if (sentAt >= this.#ownedUntil) return this.#lose('Lease time ran out');
      const value = countdown ?? this.#countdown();
      const term = leaseTerm(clock.now(), deadline.leftMs());
      const next: LeaseTerms = {
        version: randomUUID(),
        leaseExpiresAt: term.expiresAt,
        durationMs: term.durationMs,
        countdown: value,
      };
      this.#unanswered = next.version;
      try {
        if (!(await store.renewLease(connection, this.ref, next))) {
          this.#unanswered = undefined;
          return this.#lose('Lease taken over');
        }
      } catch {
        // The write may have landed: `#unanswered` stays, for the release.
        return this.#lose('Lease renewal failed');
      }
      this.#unanswered = undefined;
      this.#version = next.version;
      // Ours for what this version says, cut to the deadline like its duration.
      this.#ownedUntil = Math.max(this.#ownedUntil, sentAt + next.durationMs);
      this.#to({ type: 'step-written', countdown: value });
      this.#answeredAt = clock.monotonic();
      return true;
    };
    const written = this.#writing.then(run);
    this.#writing = written;
    return written;
  }

  #to(event: HolderEvent): void {
    this.#state = transition(this.#state, event);
  }

  #lose(reason: string): false {
    this.#to({ type: 'lease-lost', reason });
    this.#aborter.abort(new LeaseLost(reason));
    return false;
  }

  /** Loses the lease and returns why, to be thrown (the fence: nothing is sent). */
  #loseNow(reason: string): LeaseLost {
    this.#lose(reason);
    return this.signal.reason as LeaseLost;
  }
}
