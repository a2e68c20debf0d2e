/**
 * The lease as its holder keeps it while the flow runs: renewed every LEASE_HEARTBEAT_MS (the
 * DynamoDB Lock Client's pattern), judged on the holder's own clock, counted down to the
 * announced cut-over, and confirmed by the fence just before the access-token POST. Every way
 * of losing it aborts `signal`, which stops the upstream requests in flight.
 *
 * The countdown (see `Lease.countdown`): starting from the value the lease was written with,
 * each write lowers it by one, sent at least COUNTDOWN_STEP_MS after the previous write was
 * answered; the confirmation writes 0. Writes never overlap and go out in order, so a reader
 * that saw r knows the POST leaves more than (r - 1) steps after its read was sent.
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../clock.js';
import type { LeaseRef, TokenStore } from '../ports.js';
import { COUNTDOWN_STEP_MS } from './refresh-policy.js';

export const LEASE_MS = 3_000;
export const LEASE_HEARTBEAT_MS = 1_000;
/** Kept free after the access-token POST for the store write that follows it. */
export const STORE_RESERVE_MS = 300;
/** A POST is not started with less time than this: it would time out, outcome unknown. */
export const MIN_POST_MS = 100;

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
  readonly deadline: number;
  /** Local time at which the lease write was sent: its time counts from here. */
  readonly leasedAt: number;
  /** Local time at which the lease write was answered: the first step counts from here. */
  readonly answeredAt: number;
  /** The countdown the lease was written with (0 or 1: nothing left to announce). */
  readonly countdown: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** Bounds a store call by an instant (the caller's deadline, or the POST budget). */
  readonly bounded: <T>(operation: Promise<T>, until: number) => Promise<T>;
}

export class HeldLease {
  readonly #aborter = new AbortController();
  /** The lease is ours until this local instant. */
  #until: number;
  /** The countdown last written, and when that write (or a later one) was answered. */
  #countdown: number;
  #answeredAt: number;
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
  #confirmedUntil: number | undefined;
  #waitedMs = 0;
  /** The version last written: each write names it, and sets a new one. */
  #version: string;

  constructor(private readonly options: HeldLeaseOptions) {
    const { clock } = options;
    this.#until = options.leasedAt + LEASE_MS;
    this.#version = options.lease.version;
    this.#countdown = options.countdown;
    this.#answeredAt = options.answeredAt;
    this.#stopHeartbeat = clock.every(LEASE_HEARTBEAT_MS, () => {
      // Judged here too: a renewal that never comes back must not keep the lease alive.
      if (clock.now() >= this.#until) return void this.#lose('Lease time ran out');
      // A countdown step renews the lease as a heartbeat does.
      if (clock.now() - this.#answeredAt >= LEASE_HEARTBEAT_MS / 2) void this.#write();
    });
    this.#lost = new Promise((resolve) =>
      this.signal.addEventListener('abort', () => resolve(), { once: true }),
    );
    // A countdown (or a slow store) that has not reached the POST by the time the POST and the
    // write after it no longer fit: nothing will be sent, so the lease is given up now.
    this.#stopLastCall = clock.after(
      Math.max(0, options.deadline - STORE_RESERVE_MS - MIN_POST_MS - clock.now()),
      () => {
        if (this.#confirmedUntil === undefined)
          this.#lose('No time left for the access-token request');
      },
    );
    this.#counted = this.#countDown();
  }

  /**
   * Local instant until which the fence's confirmation keeps every other container from taking
   * the lease over (none before it is confirmed).
   */
  get confirmedUntil(): number | undefined {
    return this.#confirmedUntil;
  }

  /** The lease as last written (the token write and a release name exactly it). */
  get ref(): LeaseRef {
    return { holder: this.options.lease.holder, version: this.#version };
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
   * The fence: confirms the lease with a conditional write that covers the POST and a grace
   * after it, and throws LeaseLost (nothing is sent then) unless that confirmation is fresh.
   * Heartbeats stop here: the confirmed lease outlasts the POST.
   */
  async confirmForPost(): Promise<void> {
    const { clock, store, connection, deadline, upstreamTimeoutMs } = this.options;
    const waitFrom = clock.now();
    await Promise.race([this.#counted, this.#lost]);
    this.#stopHeartbeat();
    await Promise.race([this.#writing, this.#lost]);
    if (this.#countdown > 0) await this.#stepGap(); // the confirmation is the last step
    if (this.signal.aborted) throw this.signal.reason;
    const sentAt = clock.now();
    this.#waitedMs += sentAt - waitFrom;
    const budget = Math.min(upstreamTimeoutMs, deadline - sentAt - STORE_RESERVE_MS);
    if (budget < MIN_POST_MS) throw new LeaseLost('No time left for the access-token request');
    const expiresAt = sentAt + budget + upstreamTimeoutMs;
    const version = randomUUID();
    const confirm = store.renewLease(connection, this.ref, {
      version,
      leaseExpiresAt: expiresAt,
      durationMs: expiresAt - sentAt,
      countdown: 0,
    });
    // Unconfirmed (taken over, or the store unreachable) means unsent: nothing to undo.
    const confirmed = await this.options.bounded(confirm, sentAt + budget).catch(() => false);
    if (!confirmed) throw new LeaseLost('Lease not confirmed before the access-token request');
    this.#countdown = 0;
    this.#version = version;
    this.#confirmedUntil = expiresAt;
    // Paused between the confirmation and here? Then the POST no longer fits its lease.
    const left = sentAt + budget - clock.now();
    if (left < MIN_POST_MS) throw new LeaseLost('Lease confirmation is stale');
    this.#stopPostTimer?.();
    this.#stopPostTimer = clock.after(left, () =>
      this.#lose('The access-token request outlived its lease'),
    );
  }

  /** Stops the heartbeat and the POST's timer (the flow is over). */
  stop(): void {
    this.#stopped = true;
    this.#stopLastCall();
    this.#stopHeartbeat();
    this.#stopPostTimer?.();
  }

  /** Lowers the countdown one step at a time until 1; the confirmation writes the last step. */
  async #countDown(): Promise<void> {
    await undefined; // starts once the flow that holds the lease is under way
    while (this.#countdown > 1 && !this.#stopped && !this.signal.aborted) {
      await this.#stepGap();
      if (this.#stopped || this.signal.aborted) return;
      if (!(await this.#write(this.#countdown - 1))) return;
    }
  }

  /** Waits until a step has passed since the last write was answered. */
  async #stepGap(): Promise<void> {
    const wait = this.#answeredAt + COUNTDOWN_STEP_MS - this.options.clock.now();
    if (wait > 0) await this.options.clock.sleep(wait);
  }

  /**
   * Writes a new version of the lease (a heartbeat keeps the countdown where it is), after the
   * write in flight is answered. False when the lease is lost (and `signal` then aborted).
   */
  #write(countdown?: number): Promise<boolean> {
    const { clock, store, connection, deadline } = this.options;
    const run = async (): Promise<boolean> => {
      if (this.signal.aborted || this.#confirmedUntil !== undefined) return false;
      const sentAt = clock.now();
      if (sentAt >= this.#until) return this.#lose('Lease time ran out');
      const value = countdown ?? this.#countdown;
      const until = Math.min(deadline, sentAt + LEASE_MS);
      const version = randomUUID();
      const next = { version, leaseExpiresAt: until, durationMs: until - sentAt, countdown: value };
      try {
        if (!(await store.renewLease(connection, this.ref, next))) {
          return this.#lose('Lease taken over');
        }
      } catch {
        return this.#lose('Lease renewal failed');
      }
      this.#version = version;
      this.#until = Math.max(this.#until, sentAt + LEASE_MS);
      this.#countdown = value;
      this.#answeredAt = clock.now();
      return true;
    };
    const written = this.#writing.then(run);
    this.#writing = written;
    return written;
  }

  #lose(reason: string): false {
    this.#aborter.abort(new LeaseLost(reason));
    return false;
  }
}
