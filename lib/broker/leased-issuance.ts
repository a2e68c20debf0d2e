/**
 * Issuance under a lease held in the shared store: one container at a time runs the upstream
 * flow for a connection; the others wait for its token. The lease is a conditional write on
 * the token item (see the DynamoDB store); writing the token releases it in the same step, and
 * only the holder may write (the fencing check on the far side).
 *
 *   read ─┬─ valid token, no lease on it ──────────────────────────────────────────▸ serve
 *         ├─ no live lease ─▸ take it ─┬─ won ─▸ [drain] ─▸ authorize ─▸ confirm ─▸ POST ─▸ write
 *         │                            └─ lost ─▸ the state that won ─▸ loop
 *         └─ live lease elsewhere ─▸ wait (full jitter, own deadline) ─▸ loop
 *
 * - A token with a lease on it, live or lapsed, is being replaced: its successor's request may
 *   already have revoked it, so it is never served (nor kept in memory) until the lease goes.
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
import type { TokenRecord, TokenState, TokenStore } from '../ports.js';
import type { Issue } from './credential-rotation.js';
import { afterFailedFlow } from './failed-flow.js';
import { HeldLease, LEASE_MS, MIN_POST_MS, STORE_RESERVE_MS } from './held-lease.js';
import { recordIssued } from './issued-token.js';
import { LeaseWatch } from './lease-watch.js';
import {
  DEFAULT_ISSUANCE_MS,
  DRAIN_MARGIN_MS,
  drainMs,
  type RefreshSettings,
  servableUnconfirmed,
  windowMs,
} from './refresh-policy.js';
import { withDeadline } from './single-flight.js';
import type { TokenMemory } from './token-memory.js';
import type { BrokerLogger, ServedToken } from './types.js';

/** Polling a lease held elsewhere: first wait and cap (full jitter in between). */
const POLL_BASE_MS = 25;
const POLL_CAP_MS = 500;

/** Validity a caller needs, in ms, or "not inside its refresh window" (the warm-up's need). */
export type Need = number | 'outside-window';

export interface LeasedIssuanceDeps {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly issue: Issue;
  readonly memory: TokenMemory;
  readonly settings: RefreshSettings & {
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
  /** The valid token this run replaces, if any: drained first, dropped if the POST is lost. */
  readonly replacing: TokenRecord | undefined;
  /** Local time at which the lease was written (its write was sent): lease time counts from here. */
  readonly leasedAt: number;
}

/** The lease was lost during a flow: the new holder's token wins. */
const LOST = Symbol('lost');

export class LeasedIssuance {
  readonly #containerId = randomUUID();
  #attempts = 0;
  /** Last measured issuance duration per connection: XFetch's δ. */
  readonly #issuanceMs = new Map<string, number>();
  readonly #watch = new LeaseWatch();

  constructor(private readonly deps: LeasedIssuanceDeps) {}

  /** The last measured issuance duration of a connection (a default before the first). */
  issuanceMs(connection: string): number {
    return this.#issuanceMs.get(connection) ?? DEFAULT_ISSUANCE_MS;
  }

  /**
   * Reads the store until it holds a token that meets `need`, issuing it under the lease.
   * @param bypassMemory never fall back to memory when the store is unreadable (the warm-up)
   */
  async obtain(
    connection: ConnectionConfig,
    need: Need,
    deadline: number,
    bypassMemory: boolean,
  ): Promise<ServedToken> {
    const { name } = connection;
    const { clock, memory, settings } = this.deps;
    let known: { state: TokenState; sentAt: number } | undefined;
    let waits = 0;
    for (;;) {
      // A read reflects the store at some instant after it was sent: memory counts from then.
      const sentAt = known?.sentAt ?? clock.now();
      const state = known?.state ?? (await this.#read(name, need, bypassMemory, deadline));
      known = undefined;
      if ('source' in state) return state; // the store is down; memory had a usable token
      const now = clock.now();
      const { token, lease } = state;
      // DynamoDB deletes expired items late (up to days): expiry is always checked here.
      const valid = token && token.expiresAt > now ? token : undefined;
      const needMs = need === 'outside-window' ? (valid ? windowMs(valid, settings) : 0) : need;
      // A lease on a valid token, live or lapsed, is a replacement under way or abandoned
      // mid-flight: its POST may have revoked the token, so it is neither served nor kept.
      const suspect = connection.revokesOnReissue && lease !== undefined && valid !== undefined;
      if (valid && !suspect) memory.set(valid, sentAt);
      else memory.delete(name);
      if (valid && !suspect && valid.expiresAt - now > needMs) {
        // An answer that took longer than a drain may predate a replacement that has since
        // revoked the token (a slow link): ask again rather than serve it.
        if (now - sentAt < drainMs(valid, now, settings))
          return { record: valid, source: 'dynamodb' };
        if (now >= deadline) {
          throw new StoreUnavailableError('The token store answered too slowly; retry shortly');
        }
        continue;
      }
      // Refused before any upstream call: a new token would live as long as this one did.
      if (token && token.expiresAt - token.issuedAt <= needMs) throw unsatisfiable(token, needMs);

      const leaseLive = lease !== undefined && !this.#watch.stale(name, lease, now);
      if (!leaseLive) {
        if (deadline <= now) {
          throw new UpstreamUnavailableError('No time left to issue a token', {
            retryAfterSeconds: 1,
            refreshInProgress: suspect,
          });
        }
        const holder = this.#nextHolder();
        const attempt = await this.#store('take the lease', () =>
          this.#bounded(
            this.deps.store.acquireLease(name, {
              holder,
              leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
              durationMs: Math.min(deadline - now, LEASE_MS),
              takeOver: lease,
              // Replace the token we saw (a suspect one whatever its expiry), never a newer one.
              replaceIfExpiresBefore: valid && suspect ? valid.expiresAt + 1 : now + needMs + 1,
            }),
            deadline,
          ),
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
          });
          if (issued !== LOST) return issued;
          continue; // our lease was taken over while we ran: wait for the new holder's token
        }
        known = { state: attempt.state, sentAt: now };
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
      if (deadline - now <= 0) {
        throw new UpstreamUnavailableError(
          'Timed out waiting for another container to issue the token',
          // While a replacement is under way the current token may already be revoked: it
          // must not be served as the last good one.
          { retryAfterSeconds: 1, refreshInProgress: suspect },
        );
      }
      // Full jitter below a doubling ceiling, at least 1 ms, never past the deadline.
      const ceiling = Math.min(POLL_CAP_MS, POLL_BASE_MS * 2 ** waits);
      const wait = Math.min(Math.max(1, clock.random() * ceiling), deadline - now);
      waits += 1;
      await clock.sleep(wait);
    }
  }

  /**
   * Tries once for the lease to replace `current`, a token that is still valid, and issues its
   * successor. Never waits for another holder: undefined when the lease went elsewhere.
   */
  async refresh(
    connection: ConnectionConfig,
    current: TokenRecord,
    deadline: number,
  ): Promise<ServedToken | undefined> {
    const now = this.deps.clock.now();
    const holder = this.#nextHolder();
    const attempt = await this.#bounded(
      this.deps.store.acquireLease(connection.name, {
        holder,
        leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
        durationMs: Math.min(deadline - now, LEASE_MS),
        // Replace the token we saw, never a newer one another container wrote meanwhile.
        replaceIfExpiresBefore: current.expiresAt + 1,
      }),
      deadline,
    );
    if (!attempt.acquired && attempt.state.lease?.holder !== holder) return undefined;
    this.deps.logger.info('Refreshing the token ahead of expiry', { connection: connection.name });
    const issued = await this.#issueUnderLease(connection, {
      holder,
      needMs: 0,
      deadline,
      replacing: current,
      leasedAt: now,
    });
    // Lost after our token request went out: it has revoked `current`, which must not be served;
    // whatever the store holds now (ours, or the new holder's) is.
    return issued === LOST ? this.obtain(connection, 0, deadline, false) : issued;
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
      upstreamTimeoutMs: settings.upstreamTimeoutMs,
      bounded: (operation, until) => this.#bounded(operation, until),
    });
    let record: TokenRecord;
    try {
      if (flow.replacing && connection.revokesOnReissue) {
        // Every container re-reads within its re-check interval, sees the lease, and stops
        // serving the token this run replaces, before the upstream can revoke it.
        const drain = drainMs(flow.replacing, clock.now(), settings);
        if (clock.now() + drain + MIN_POST_MS + STORE_RESERVE_MS >= flow.deadline) {
          throw new UpstreamUnavailableError(
            'Not enough time left to replace the token safely; retry shortly',
            { retryAfterSeconds: 1 },
          );
        }
        await clock.sleep(drain);
      }
      const started = clock.now();
      const issued = await this.deps
        .issue(connection, {
          deadline: flow.deadline - STORE_RESERVE_MS,
          signal: lease.signal,
          beforeAccessToken: () => lease.confirmForPost(),
        })
        .finally(() => lease.stop());
      const took = clock.now() - started;
      this.#issuanceMs.set(name, took);
      record = recordIssued(connection, issued, took, this.deps);
    } catch (error) {
      lease.stop();
      await afterFailedFlow(
        { ...this.deps, bounded: (operation) => this.#bounded(operation, flow.deadline) },
        connection,
        flow,
        error,
      );
      return LOST;
    }
    let written: boolean;
    // When memory may vouch for the token: now, or, if it could not be written, only until
    // other containers may take the confirmed lease over (and revoke it by issuing again).
    let confirmedAt = clock.now();
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
      const until = lease.confirmedUntil ?? clock.now();
      confirmedAt = Math.min(clock.now(), until - DRAIN_MARGIN_MS - settings.memoryRecheckMs);
    }
    if (!written) {
      logger.warn('Lease was taken over while issuing; using the new holder’s token', {
        connection: name,
        tokenDigest: record.tokenDigest,
      });
      // Our token request went out: the token it replaced is revoked, wherever it is held.
      if (
        flow.replacing &&
        this.deps.memory.get(name)?.record.tokenDigest === flow.replacing.tokenDigest
      ) {
        this.deps.memory.delete(name);
      }
      return LOST;
    }
    this.deps.memory.set(record, confirmedAt);
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
