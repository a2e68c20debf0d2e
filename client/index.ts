/**
 * Typed client of the Open API token broker, for internal services.
 *
 * @example Three lines to an authenticated call
 * ```ts
 * import { createTokenClient } from 'open-api-token-broker/client';
 * const tokens = createTokenClient({ transport: { type: 'lambda', functionName: 'token-broker-prod-broker' } });
 * const orders = await tokens.withToken('production', (token) =>
 *   fetch('https://open-api.example.com/open-api/v3/orders', { headers: { 'x-access-token': token } }),
 * );
 * ```
 *
 * `withToken` retries once with a new token when the Open API answers 401 (or when your
 * `isRejected` says so), after reporting the rejected token to the broker.
 */
import { TokenBrokerError, TransportError } from './errors.js';
import {
  createTransport,
  type Operation,
  type Transport,
  type TransportOptions,
} from './transports.js';

export * from './errors.js';
export type {
  HttpTransportOptions,
  LambdaTransportOptions,
  TransportOptions,
} from './transports.js';

/** A token as the broker hands it out. */
export interface AccessToken {
  readonly connection: string;
  /** Send it as the `x-access-token` header. */
  readonly accessToken: string;
  readonly expiresAt: Date;
  /** Whole seconds left when the broker answered. */
  readonly expiresIn: number;
}

export interface TokenClientOptions {
  /** Direct Lambda invoke, or HTTP to the Function URL signed with SigV4. */
  readonly transport: TransportOptions | Transport;
  /**
   * A cached token is reused until this many seconds before it expires; default 60. The
   * broker's own validity default is 60 s too, so a fresh answer is never refused here.
   */
  readonly marginSeconds?: number;
  readonly now?: () => number;
}

export interface GetTokenOptions {
  /** The token must stay valid at least this many seconds (passed to the broker). */
  readonly minValidity?: number;
}

export interface WithTokenOptions extends GetTokenOptions {
  /**
   * Whether what `fn` threw or returned means the Open API rejected the token. Default: a
   * `Response` with status 401, or an error with `status`/`statusCode` 401.
   */
  readonly isRejected?: (outcome: unknown) => boolean;
}

// The wire types below restate the broker's (lib/broker.ts) because the client ships alone;
// test/client.test.ts checks at compile time that the two stay identical.

export interface ConnectionStatus {
  readonly connection: string;
  readonly variant: string;
  readonly token: {
    readonly expiresAt: string;
    readonly expiresIn: number;
    readonly issuedAt: string;
    readonly tokenDigest: string;
  } | null;
  readonly lease: { readonly holder: string; readonly expiresInMs: number } | null;
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

export interface TokenClient {
  /** A token valid for at least `minValidity` (or the margin), from the cache when it can. */
  getToken(connection: string, options?: GetTokenOptions): Promise<AccessToken>;
  /** Reports a token the Open API rejected; the broker drops it only if it is the current one. */
  invalidate(connection: string, accessToken: string): Promise<boolean>;
  /** Runs `fn(token)`; on a rejection, invalidates that exact token and retries once. */
  withToken<T>(
    connection: string,
    fn: (accessToken: string) => Promise<T>,
    options?: WithTokenOptions,
  ): Promise<T>;
  /** Operators: every connection's token metadata and lease (never a token). */
  status(): Promise<ConnectionStatus[]>;
  /** Operators: run the broker's warm-up now. */
  warmUp(): Promise<WarmUpReport>;
}

const isTransport = (value: TransportOptions | Transport): value is Transport =>
  typeof (value as Transport).send === 'function';

/** Default rejection test: HTTP 401 from the Open API, as a Response or an error. */
export const isUnauthorized = (outcome: unknown): boolean => {
  if (outcome instanceof Response) return outcome.status === 401;
  const status =
    (outcome as { status?: unknown; statusCode?: unknown } | null)?.status ??
    (outcome as { statusCode?: unknown } | null)?.statusCode;
  return status === 401;
};

const toAccessToken = (body: unknown): AccessToken => {
  const value = body as {
    connection?: unknown;
    accessToken?: unknown;
    expiresAt?: unknown;
    expiresIn?: unknown;
  };
  if (typeof value?.accessToken !== 'string' || typeof value.expiresAt !== 'string') {
    throw new TransportError('The broker answered without a token', 'TRANSPORT_FAILED');
  }
  return {
    connection: String(value.connection),
    accessToken: value.accessToken,
    expiresAt: new Date(value.expiresAt),
    expiresIn: Number(value.expiresIn),
  };
};

/** Creates a client; keep one per process: it holds the cache. */
export const createTokenClient = (options: TokenClientOptions): TokenClient => {
  const transport = isTransport(options.transport)
    ? options.transport
    : createTransport(options.transport);
  const marginMs = (options.marginSeconds ?? 60) * 1000;
  const now = options.now ?? (() => Date.now());
  // Maps, not objects: connection names must not reach prototype members.
  const cache = new Map<string, AccessToken>();
  const inflight = new Map<string, Promise<AccessToken>>();

  const send = (operation: Operation) => transport.send(operation);

  const fetchToken = (
    connection: string,
    minValidity: number | undefined,
  ): Promise<AccessToken> => {
    const key = `${connection}\u0000${minValidity ?? ''}`;
    let pending = inflight.get(key);
    if (!pending) {
      pending = (async () => {
        const token = toAccessToken(
          await send({
            action: 'getToken',
            connection,
            ...(minValidity === undefined ? {} : { minValidity }),
          }),
        );
        cache.set(connection, token);
        return token;
      })().finally(() => inflight.delete(key));
      inflight.set(key, pending);
    }
    return pending;
  };

  const client: TokenClient = {
    async getToken(connection, { minValidity } = {}) {
      const needMs = Math.max(marginMs, (minValidity ?? 0) * 1000);
      const cached = cache.get(connection);
      if (cached && cached.expiresAt.getTime() - now() > needMs) return cached;
      return fetchToken(connection, minValidity);
    },

    async invalidate(connection, accessToken) {
      if (cache.get(connection)?.accessToken === accessToken) cache.delete(connection);
      const body = (await send({ action: 'invalidate', connection, accessToken })) as {
        invalidated?: unknown;
      };
      return body?.invalidated === true;
    },

    async withToken(connection, fn, { isRejected = isUnauthorized, ...tokenOptions } = {}) {
      const attempt = async (): Promise<{
        token: string;
        rejected: boolean;
        value?: unknown;
        error?: unknown;
      }> => {
        const { accessToken } = await client.getToken(connection, tokenOptions);
        try {
          const value = await fn(accessToken);
          return { token: accessToken, rejected: isRejected(value), value };
        } catch (error) {
          if (error instanceof TokenBrokerError || !isRejected(error)) throw error;
          return { token: accessToken, rejected: true, error };
        }
      };
      const first = await attempt();
      if (!first.rejected) return first.value as Awaited<ReturnType<typeof fn>>;
      await client.invalidate(connection, first.token);
      const second = await attempt();
      if (second.error !== undefined) throw second.error;
      return second.value as Awaited<ReturnType<typeof fn>>;
    },

    async status() {
      const body = (await send({ action: 'status' })) as { connections?: ConnectionStatus[] };
      return body.connections ?? [];
    },

    async warmUp() {
      return (await send({ action: 'warmUp' })) as WarmUpReport;
    },
  };
  return client;
};
