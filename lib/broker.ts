/**
 * The broker core: serves a valid token for a connection from memory, else from the shared
 * store, else by running the upstream flow once and storing the result. It knows nothing of
 * AWS or of event shapes; adapters and handlers plug into its ports.
 */
import { createHash } from 'node:crypto';
import type { BrokerConfig, ConnectionConfig } from './config.js';
import {
  BadRequestError,
  type BrokerError,
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  toBrokerError,
  UnknownConnectionError,
  UpstreamUnavailableError,
} from './errors.js';
import type { SecretSource, TokenIssuer, TokenRecord, TokenStore } from './ports.js';

/** Where a served token came from: drives logs and, later, metrics. */
export type TokenSource = 'memory' | 'dynamodb' | 'upstream';

export interface ServedToken {
  readonly record: TokenRecord;
  readonly source: TokenSource;
}

/** The subset of a structured logger the core uses (Powertools Logger fits). */
export interface BrokerLogger {
  debug(message: string, ...attributes: Record<string, unknown>[]): void;
  info(message: string, ...attributes: Record<string, unknown>[]): void;
  warn(message: string, ...attributes: Record<string, unknown>[]): void;
  error(message: string, ...attributes: Record<string, unknown>[]): void;
}

export interface TokenBrokerDeps {
  readonly config: Pick<
    BrokerConfig,
    | 'connections'
    | 'defaultMinValiditySeconds'
    | 'refreshWindowSeconds'
    | 'memoryRecheckSeconds'
    | 'maxTokenLifetimeSeconds'
  >;
  readonly store: TokenStore;
  readonly secrets: SecretSource;
  readonly issuer: TokenIssuer;
  readonly logger: BrokerLogger;
  readonly now?: () => number;
}

export interface GetTokenOptions {
  /** Seconds the returned token must still be valid; defaults to the configured default. */
  readonly minValiditySeconds?: number | undefined;
  /** Epoch ms by which an answer is due (derived from the Lambda's remaining time). */
  readonly deadline: number;
}

export type WarmUpOutcome =
  | { readonly status: 'fresh' | 'issued'; readonly expiresAt: string; readonly expiresIn: number }
  | {
      readonly status: 'failed';
      readonly error: { readonly code: string; readonly message: string };
    };

export interface WarmUpReport {
  readonly connections: Readonly<Record<string, WarmUpOutcome>>;
  readonly issued: number;
  readonly failed: number;
}

interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the shared store last confirmed this token (local epoch ms). */
  readonly checkedAt: number;
}

/** Clock skew between us and the upstream beyond which a warning is logged. */
const SKEW_WARNING_MS = 5 * 60_000;

/** SHA-256 of an access token, base64url: what invalidate compares and logs may show. */
export const tokenDigest = (accessToken: string): string =>
  createHash('sha256').update(accessToken).digest('base64url');

export class TokenBroker {
  // Maps, not objects: connection names come from callers and must not reach prototype members.
  readonly #memory = new Map<string, MemoryEntry>();
  readonly #inflight = new Map<string, Promise<ServedToken>>();
  readonly #now: () => number;

  constructor(private readonly deps: TokenBrokerDeps) {
    this.#now = deps.now ?? (() => Date.now());
  }

  /** Names of every configured connection. */
  connectionNames(): IterableIterator<string> {
    return this.deps.config.connections.keys();
  }

  /** @throws {UnknownConnectionError} */
  connection(name: string): ConnectionConfig {
    const connection = this.deps.config.connections.get(name);
    if (!connection) throw new UnknownConnectionError(name);
    return connection;
  }

  /** Returns a token valid for at least `minValiditySeconds`, issuing one only when needed. */
  async getToken(name: string, options: GetTokenOptions): Promise<ServedToken> {
    const connection = this.connection(name);
    const { config } = this.deps;
    const minValidity = options.minValiditySeconds ?? config.defaultMinValiditySeconds;
    if (!Number.isInteger(minValidity) || minValidity < 0) {
      throw new BadRequestError('minValidity must be a whole number of seconds, 0 or more');
    }
    if (minValidity >= config.maxTokenLifetimeSeconds) {
      throw new BadRequestError(
        `minValidity must be below the maximum token lifetime (${config.maxTokenLifetimeSeconds}s)`,
      );
    }
    const needMs = minValidity * 1000;
    const now = this.#now();
    const cached = this.#memory.get(name);
    // Why re-check after memoryRecheckSeconds: another container may have invalidated or
    // replaced the shared token; a memory cache that never looks would keep serving it.
    if (
      cached &&
      cached.record.expiresAt - now > needMs &&
      now - cached.checkedAt < config.memoryRecheckSeconds * 1000
    ) {
      return { record: cached.record, source: 'memory' };
    }
    return this.#singleFlight(connection, needMs, options.deadline);
  }

  /**
   * Drops the cached token of `name` only if it is `accessToken` (compare-and-delete), so that a
   * late report about an older token cannot drop a fresh one. Returns whether it was dropped.
   */
  async invalidate(name: string, accessToken: string): Promise<boolean> {
    this.connection(name);
    const digest = tokenDigest(accessToken);
    if (this.#memory.get(name)?.record.tokenDigest === digest) this.#memory.delete(name);
    let deleted: boolean;
    try {
      deleted = await this.deps.store.deleteIfMatches(name, digest);
    } catch (error) {
      throw new StoreUnavailableError('The token store could not be updated; retry shortly', {
        cause: error,
      });
    }
    this.deps.logger.info('Invalidate request handled', {
      connection: name,
      tokenDigest: digest,
      invalidated: deleted,
    });
    return deleted;
  }

  /**
   * Makes sure every connection holds a token valid beyond the refresh window; issues only where
   * one is missing or about to expire. A failing connection does not stop the others.
   */
  async warmUp(deadline: number): Promise<WarmUpReport> {
    const windowMs = this.deps.config.refreshWindowSeconds * 1000;
    const outcomes = await Promise.all(
      [...this.deps.config.connections.values()].map(
        async (connection): Promise<[string, WarmUpOutcome]> => {
          try {
            const { record, source } = await this.#singleFlight(connection, windowMs, deadline, {
              bypassMemory: true,
            });
            return [
              connection.name,
              {
                status: source === 'upstream' ? 'issued' : 'fresh',
                expiresAt: new Date(record.expiresAt).toISOString(),
                expiresIn: Math.floor((record.expiresAt - this.#now()) / 1000),
              },
            ];
          } catch (error) {
            const failure = this.#warmUpFailure(error);
            this.deps.logger.error('Warm-up failed for connection', {
              connection: connection.name,
              error: { name: failure.name, code: failure.code, message: failure.message },
            });
            return [
              connection.name,
              { status: 'failed', error: { code: failure.code, message: failure.message } },
            ];
          }
        },
      ),
    );
    const connections = Object.fromEntries(outcomes);
    return {
      connections,
      issued: outcomes.filter(([, o]) => o.status === 'issued').length,
      failed: outcomes.filter(([, o]) => o.status === 'failed').length,
    };
  }

  #warmUpFailure(error: unknown): BrokerError {
    if (error instanceof MinValidityUnsatisfiableError) {
      return new MinValidityUnsatisfiableError(
        `Tokens of this connection do not outlive BROKER_REFRESH_WINDOW_SECONDS (${this.deps.config.refreshWindowSeconds}s); lower the window below the token lifetime`,
      );
    }
    return toBrokerError(error);
  }

  /** Concurrent misses for one connection in this container share one load. */
  async #singleFlight(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
    options: { bypassMemory?: boolean } = {},
  ): Promise<ServedToken> {
    const existing = this.#inflight.get(connection.name);
    if (!existing) {
      const load = this.#load(connection, needMs, deadline, options).finally(() =>
        this.#inflight.delete(connection.name),
      );
      this.#inflight.set(connection.name, load);
      return load;
    }
    const shared = await withDeadline(existing, deadline - this.#now());
    if (shared.record.expiresAt - this.#now() > needMs) return shared;
    // The shared load asked for less validity than this caller needs.
    if (shared.source === 'upstream') throw this.#unsatisfiable(shared.record, needMs);
    return this.#load(connection, needMs, deadline, options);
  }

  async #load(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
    { bypassMemory = false }: { bypassMemory?: boolean },
  ): Promise<ServedToken> {
    const { name } = connection;
    let stored: TokenRecord | undefined;
    try {
      stored = await this.deps.store.get(name);
    } catch (error) {
      const cached = this.#memory.get(name);
      if (!bypassMemory && cached && cached.record.expiresAt - this.#now() > needMs) {
        this.deps.logger.warn('Token store unreadable; serving the token held in memory', {
          connection: name,
        });
        return { record: cached.record, source: 'memory' };
      }
      throw new StoreUnavailableError('The token store could not be read; retry shortly', {
        cause: error,
      });
    }
    const now = this.#now();
    // DynamoDB deletes expired items late (up to days): expiry is always checked here.
    if (stored && stored.expiresAt - now > needMs) {
      this.#memory.set(name, { record: stored, checkedAt: now });
      return { record: stored, source: 'dynamodb' };
    }
    if (!stored) this.#memory.delete(name);
    return this.#issue(connection, needMs, deadline);
  }

  async #issue(
    connection: ConnectionConfig,
    needMs: number,
    deadline: number,
  ): Promise<ServedToken> {
    const { name } = connection;
    const credentials = await this.deps.secrets.getCredentials(connection.secretId);
    const issued = await this.deps.issuer.issue(connection, credentials, { deadline });
    const record: TokenRecord = {
      connection: name,
      accessToken: issued.accessToken,
      tokenDigest: tokenDigest(issued.accessToken),
      issuedAt: issued.requestedAt,
      expiresAt: issued.requestedAt + issued.expiresIn * 1000,
    };
    const skewMs =
      issued.upstreamTimestamp === undefined
        ? undefined
        : issued.upstreamTimestamp * 1000 - issued.requestedAt;
    if (skewMs !== undefined && Math.abs(skewMs) > SKEW_WARNING_MS) {
      this.deps.logger.warn('Upstream clock differs from ours; expiry counts from our clock', {
        connection: name,
        skewSeconds: Math.round(skewMs / 1000),
      });
    }
    let current: TokenRecord;
    try {
      current = await this.deps.store.put(record);
    } catch (error) {
      // The token is valid: serve it from memory rather than fail the caller. Other containers
      // will not see it, which costs at worst one more issuance.
      this.deps.logger.error('Token store write failed; token kept in memory only', {
        connection: name,
        error: { name: (error as Error)?.name },
      });
      current = record;
    }
    this.#memory.set(name, { record: current, checkedAt: this.#now() });
    this.deps.logger.info('Token issued by the Open API', {
      connection: name,
      variant: connection.variant,
      tokenDigest: record.tokenDigest,
      expiresIn: issued.expiresIn,
      keptExisting: current !== record,
    });
    if (current.expiresAt - this.#now() <= needMs) throw this.#unsatisfiable(current, needMs);
    return { record: current, source: current === record ? 'upstream' : 'dynamodb' };
  }

  #unsatisfiable(record: TokenRecord, needMs: number): MinValidityUnsatisfiableError {
    const lifetime = Math.floor((record.expiresAt - record.issuedAt) / 1000);
    return new MinValidityUnsatisfiableError(
      `The Open API issues tokens valid for ${lifetime}s, which cannot satisfy a validity of ${Math.ceil(needMs / 1000)}s`,
    );
  }
}

/** Waits for `promise` at most `wait` ms: the caller must be answered before its deadline. */
const withDeadline = <T>(promise: Promise<T>, wait: number): Promise<T> => {
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<never>((_, reject) => {
    timer = setTimeout(
      () =>
        reject(
          new UpstreamUnavailableError(
            'Timed out waiting for a token being issued concurrently',
            1,
          ),
        ),
      Math.max(0, wait),
    );
  });
  return Promise.race([promise, timeout]).finally(() => clearTimeout(timer));
};
