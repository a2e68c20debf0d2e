/**
 * The lease as its holder keeps it while the flow runs: renewed every LEASE_HEARTBEAT_MS (the
 * DynamoDB Lock Client's pattern), judged on the holder's own clock, and confirmed by the fence
 * just before the access-token POST. Every way of losing it aborts `signal`, which stops the
 * upstream requests in flight.
 */
import type { Clock } from '../clock.js';
import type { TokenStore } from '../ports.js';

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
  readonly holder: string;
  readonly deadline: number;
  /** Local time at which the lease write was sent: its time counts from here. */
  readonly leasedAt: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** Bounds a store call by an instant (the caller's deadline, or the POST budget). */
  readonly bounded: <T>(operation: Promise<T>, until: number) => Promise<T>;
}

export class HeldLease {
  readonly #aborter = new AbortController();
  /** The lease is ours until this local instant. */
  #until: number;
  readonly #stopHeartbeat: () => void;
  #stopPostTimer: (() => void) | undefined;
  #confirmedUntil: number | undefined;

  constructor(private readonly options: HeldLeaseOptions) {
    const { clock, store, connection, holder, deadline } = options;
    this.#until = options.leasedAt + LEASE_MS;
    this.#stopHeartbeat = clock.every(LEASE_HEARTBEAT_MS, () => {
      if (clock.now() >= this.#until) return this.#lose('Lease time ran out');
      const sentAt = clock.now();
      const until = Math.min(deadline, sentAt + LEASE_MS);
      store
        .renewLease(connection, holder, until, until - sentAt)
        .then((renewed) => {
          if (renewed) this.#until = Math.max(this.#until, sentAt + LEASE_MS);
          else this.#lose('Lease taken over');
        })
        .catch(() => this.#lose('Lease renewal failed'));
    });
  }

  /**
   * Local instant until which the fence's confirmation keeps every other container from taking
   * the lease over (none before it is confirmed).
   */
  get confirmedUntil(): number | undefined {
    return this.#confirmedUntil;
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
    const { clock, store, connection, holder, deadline, upstreamTimeoutMs } = this.options;
    this.#stopHeartbeat();
    if (this.signal.aborted) throw this.signal.reason;
    const sentAt = clock.now();
    const budget = Math.min(upstreamTimeoutMs, deadline - sentAt - STORE_RESERVE_MS);
    if (budget < MIN_POST_MS) throw new LeaseLost('No time left for the access-token request');
    const lasts = budget + upstreamTimeoutMs;
    const confirm = store.renewLease(connection, holder, sentAt + lasts, lasts);
    // Unconfirmed (taken over, or the store unreachable) means unsent: nothing to undo.
    const confirmed = await this.options.bounded(confirm, sentAt + budget).catch(() => false);
    if (!confirmed) throw new LeaseLost('Lease not confirmed before the access-token request');
    this.#confirmedUntil = sentAt + lasts;
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
    this.#stopHeartbeat();
    this.#stopPostTimer?.();
  }

  #lose(reason: string): void {
    this.#aborter.abort(new LeaseLost(reason));
  }
}
