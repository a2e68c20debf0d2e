/**
 * Issuance under a lease held in the shared store: one container at a time runs the upstream
 * flow for a connection; the others wait for its token. The lease is a conditional write on
 * the token item (see the DynamoDB store); writing the token releases it in the same step.
 *
 *   read ─┬─ valid token, no refresh in progress ─────────────────────────▸ serve
 *         ├─ no live lease ─▸ take it ─┬─ won ─▸ [drain] ─▸ issue ─▸ write ─▸ serve
 *         │                            └─ lost ─▸ the state that won ─▸ loop
 *         └─ live lease elsewhere ─▸ wait (full jitter, own deadline) ─▸ loop
 *
 * The holder renews the lease every LEASE_HEARTBEAT_MS (the DynamoDB Lock Client's pattern): a
 * holder that dies frees the connection within LEASE_MS instead of a whole Lambda timeout.
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
import { recordIssued } from './issued-token.js';
import { DEFAULT_ISSUANCE_MS, DRAIN_MS, inWindow, type RefreshSettings } from './refresh-policy.js';
import type { TokenMemory } from './token-memory.js';
import type { BrokerLogger, ServedToken } from './types.js';

export const LEASE_MS = 3_000;
export const LEASE_HEARTBEAT_MS = 1_000;
/** Polling a lease held elsewhere: first wait and cap (full jitter in between). */
const POLL_BASE_MS = 25;
const POLL_CAP_MS = 500;

export interface LeasedIssuanceDeps {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly issue: Issue;
  readonly memory: TokenMemory;
  readonly settings: RefreshSettings;
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
}

/** One run of the upstream flow under a lease. */
interface LeasedFlow {
  readonly holder: string;
  /** Validity (ms) the caller needs from the new token. */
  readonly needMs: number;
  readonly deadline: number;
  /** A valid token is being replaced: drain first if the upstream may revoke it. */
  readonly replacingValidToken: boolean;
}

export class LeasedIssuance {
  readonly #containerId = randomUUID();
  #attempts = 0;
  /** Last measured issuance duration per connection: XFetch's δ. */
  readonly #issuanceMs = new Map<string, number>();

  constructor(private readonly deps: LeasedIssuanceDeps) {}

  /** The last measured issuance duration of a connection (a default before the first). */
  issuanceMs(connection: string): number {
    return this.#issuanceMs.get(connection) ?? DEFAULT_ISSUANCE_MS;
  }

  /**
   * Reads the store until it holds a token valid for `needMs`, issuing it under the lease.
   * @param bypassMemory never fall back to memory when the store is unreadable (the warm-up)
   */
  async obtain(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
    bypassMemory: boolean,
  ): Promise<ServedToken> {
    const { name } = connection;
    const { clock, memory } = this.deps;
    let known: TokenState | undefined;
    let waits = 0;
    for (;;) {
      const state = known ?? (await this.#read(name, needMs, bypassMemory));
      known = undefined;
      if ('source' in state) return state; // the store is down; memory had a usable token
      const now = clock.now();
      const { token, lease } = state;
      // DynamoDB deletes expired items late (up to days): expiry is always checked here.
      memory.confirm(name, token, now);
      const leaseLive = lease !== undefined && lease.expiresAt >= now;
      // A live lease on a token inside its window is a refresh in progress: the token may be
      // revoked upstream at any moment, so wait for its successor instead of serving it.
      const refreshing =
        connection.revokesOnReissue &&
        leaseLive &&
        token !== undefined &&
        inWindow(token, now, this.deps.settings);
      if (token && token.expiresAt - now > needMs && !refreshing) {
        return { record: token, source: 'dynamodb' };
      }

      if (!leaseLive) {
        if (deadline <= now) {
          throw new UpstreamUnavailableError('No time left to issue a token', {
            retryAfterSeconds: 1,
          });
        }
        const holder = this.#nextHolder();
        const attempt = await this.#store('take the lease', () =>
          this.deps.store.acquireLease(name, {
            holder,
            leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
            now,
            replaceIfExpiresBefore: now + needMs + 1,
          }),
        );
        if (attempt.acquired) {
          const issued = await this.#issueUnderLease(connection, {
            holder,
            needMs,
            deadline,
            replacingValidToken: token !== undefined && token.expiresAt > now,
          });
          if (issued) return issued;
          continue; // our lease was taken over while we ran: wait for the new holder's token
        }
        known = attempt.state;
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
          // While a refresh of a revoking upstream is in progress, the current token may
          // already be revoked: it must not be served as the last good one.
          { retryAfterSeconds: 1, refreshInProgress: refreshing },
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
    const attempt = await this.deps.store.acquireLease(connection.name, {
      holder,
      leaseExpiresAt: Math.min(deadline, now + LEASE_MS),
      now,
      // Replace the token we saw, never a newer one another container wrote meanwhile.
      replaceIfExpiresBefore: current.expiresAt + 1,
    });
    if (!attempt.acquired) return undefined;
    this.deps.logger.info('Refreshing the token ahead of expiry', { connection: connection.name });
    return this.#issueUnderLease(connection, {
      holder,
      needMs: 0,
      deadline,
      replacingValidToken: true,
    });
  }

  /** Reads the store; when it is down, falls back to a usable token in memory. */
  async #read(
    name: string,
    needMs: number,
    bypassMemory: boolean,
  ): Promise<TokenState | ServedToken> {
    try {
      return await this.deps.store.read(name);
    } catch (error) {
      const cached = this.deps.memory.get(name);
      if (!bypassMemory && cached && cached.record.expiresAt - this.deps.clock.now() > needMs) {
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
   * Runs the flow while holding the lease, renewing it by heartbeats, and writes the token,
   * which releases the lease. Undefined when the lease was lost meanwhile (the new holder's
   * token wins).
   */
  async #issueUnderLease(
    connection: ConnectionConfig,
    flow: LeasedFlow,
  ): Promise<ServedToken | undefined> {
    const { clock, store } = this.deps;
    const stop = clock.every(LEASE_HEARTBEAT_MS, () => {
      const leaseExpiresAt = Math.min(flow.deadline, clock.now() + LEASE_MS);
      store.renewLease(connection.name, flow.holder, leaseExpiresAt).catch(() => undefined);
    });
    try {
      return await this.#runUnderLease(connection, flow);
    } finally {
      stop();
    }
  }

  async #runUnderLease(
    connection: ConnectionConfig,
    { holder, needMs, deadline, replacingValidToken }: LeasedFlow,
  ): Promise<ServedToken | undefined> {
    const { name } = connection;
    const { clock, store, logger } = this.deps;
    let record: TokenRecord;
    try {
      if (replacingValidToken && connection.revokesOnReissue) await clock.sleep(DRAIN_MS);
      const started = clock.now();
      const issued = await this.deps.issue(connection, deadline);
      const took = clock.now() - started;
      this.#issuanceMs.set(name, took);
      record = recordIssued(connection, issued, took, this.deps);
    } catch (error) {
      // The flow failed: free the lease now rather than make others wait for it to expire.
      await store.releaseLease(name, holder).catch(() => undefined);
      throw error;
    }
    let written: boolean;
    try {
      written = await store.putToken(record, holder);
    } catch (error) {
      // The token is valid: serve it from memory rather than fail the caller. Other containers
      // will wait out the lease, which costs at worst one more issuance.
      logger.error('Token store write failed; token kept in memory only', {
        connection: name,
        error: { name: (error as Error)?.name },
      });
      written = true;
    }
    if (!written) {
      logger.warn('Lease was taken over while issuing; using the new holder’s token', {
        connection: name,
        tokenDigest: record.tokenDigest,
      });
      return undefined;
    }
    this.deps.memory.set(record, clock.now());
    if (record.expiresAt - clock.now() <= needMs) throw unsatisfiable(record, needMs);
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
