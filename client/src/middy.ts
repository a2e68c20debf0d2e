/**
 * A middy middleware for Lambda functions that call the Open API: it gets the token before the
 * handler runs, the way `@middy/secrets-manager` fetches secrets.
 *
 * ```ts
 * import middy from '@middy/core';
 * import { tokenBroker } from '@open-api-token-broker/client/middy';
 *
 * export const handler = middy(async (event, context) => {
 *   const response = await fetch(url, { headers: { 'x-access-token': context.openApiToken } });
 * }).use(tokenBroker({
 *   transport: { type: 'lambda', functionName: 'token-broker-prod-broker' },
 *   fetchData: { openApiToken: 'production' },
 * }));
 * ```
 *
 * The client (and so its cache) is created once, with the middleware, at module scope: warm
 * invocations reuse the token for as long as the broker lets it be reused (`maxAgeMs`, a few
 * seconds), then ask again; a warm broker answers that from memory.
 *
 * When the Open API rejects the token (401), `await context.tokenRejected('openApiToken')`
 * reports exactly that token to the broker and returns a fresh one (also set on the context),
 * as `withToken` does: once per key and invocation, never in a loop, and never the reported
 * token (the client remembers it: a later invocation is not handed it either).
 */

import { ClientConfigError, TokenAcceptedError, TokenRejectedAgainError } from './errors.js';
import type { FailoverOptions } from './failover.js';
import {
  type BrokerTarget,
  createTokenClient,
  DEFAULT_TIMEOUT_MS,
  type GetTokenOptions,
  type TokenClient,
} from './index.js';
import type { Transport, TransportOptions } from './transports.js';

export interface TokenBrokerMiddlewareOptions<TKey extends string = string> {
  /**
   * A client of your own (to share its cache with other code), or a transport (one broker) or
   * `brokers` (a list, with failover: see the client's `brokers`) to make one.
   */
  readonly client?: TokenClient;
  readonly transport?: TransportOptions | Transport;
  readonly brokers?: readonly BrokerTarget[];
  /** With `brokers`: how long a broker that could not answer is skipped. */
  readonly failover?: FailoverOptions;
  /** Where each token goes → which connection it is for, e.g. `{ openApiToken: 'production' }`. */
  readonly fetchData: Readonly<Record<TKey, string>>;
  /** Also set each token on the Lambda context (default `true`); it is always in `request.internal`. */
  readonly setToContext?: boolean;
  /** Passed to every `getToken`: `minValidity`, `timeoutMs`. */
  readonly tokenOptions?: Pick<GetTokenOptions, 'minValidity' | 'timeoutMs'>;
  /**
   * Leaves this much of the invocation's remaining time to the handler: the token request is
   * given at most what is left minus this (default 1000 ms), and never more than its own timeout
   * (`tokenOptions.timeoutMs`, else the client's default, 10 s: with a client of your own whose
   * default differs, set `tokenOptions.timeoutMs`). Read again before each call.
   */
  readonly reserveMs?: number;
}

/** What middy hands a middleware; structural, so that any middy version fits. */
export interface MiddyRequestLike {
  context: object & { getRemainingTimeInMillis?: () => number };
  internal: Record<string, unknown>;
}

export interface TokenBrokerMiddleware {
  readonly name: string;
  before(request: MiddyRequestLike): Promise<void>;
}

/** What the middleware adds to the context besides the tokens. */
export interface TokenBrokerContextControls<TKey extends string> {
  /**
   * Reports that the Open API rejected the token this invocation was given under `key`, and
   * returns a fresh one, which also replaces it on the context and in `request.internal`. The
   * same semantics as `withToken`: that exact token is invalidated at the broker, the token is
   * fetched once more (never the reported one: while the broker still serves it, this throws a
   * `TokenReportedError` with `retryAfterSeconds`), and a second report for the same key in the
   * same invocation throws a `TokenRejectedAgainError` instead of looping.
   */
  tokenRejected(key: TKey): Promise<string>;
}

/** The context type your handler sees: the Lambda context, one string per key, `tokenRejected`. */
export type TokenContext<TContext, TKey extends string> = TContext &
  Readonly<Record<TKey, string>> &
  TokenBrokerContextControls<TKey>;

/**
 * Fetches every token in `fetchData` before the handler. When one cannot be had, the invocation
 * fails with the client's typed error (`UnknownConnectionError`, `TransportError`, …).
 */
export const tokenBroker = <TKey extends string>(
  options: TokenBrokerMiddlewareOptions<TKey>,
): TokenBrokerMiddleware => {
  const allowed = new Set([
    'client',
    'transport',
    'brokers',
    'failover',
    'fetchData',
    'setToContext',
    'tokenOptions',
    'reserveMs',
  ]);
  // Unknown keys are refused: a typo must not silently change what the middleware does.
  for (const key of Object.keys(options)) {
    if (!allowed.has(key)) throw new ClientConfigError(`tokenBroker: unknown option "${key}"`);
  }
  // tokenOptions too: `{ minvalidity: 5 }` must not pass as no option at all.
  const allowedTokenOptions = new Set(['minValidity', 'timeoutMs']);
  for (const key of Object.keys(options.tokenOptions ?? {})) {
    if (!allowedTokenOptions.has(key)) {
      throw new ClientConfigError(`tokenBroker: unknown option "tokenOptions.${key}"`);
    }
  }
  const given = [options.client, options.transport, options.brokers].filter(
    (value) => value !== undefined,
  );
  if (given.length !== 1) {
    throw new ClientConfigError('tokenBroker: give one of "client", "transport" or "brokers"');
  }
  if (options.client && options.failover) {
    throw new ClientConfigError('tokenBroker: "failover" is the client\'s option: give it there');
  }
  const entries = Object.entries(options.fetchData ?? {}) as [TKey, string][];
  if (entries.length === 0) {
    throw new ClientConfigError('tokenBroker: "fetchData" must name at least one connection');
  }
  const client =
    options.client ??
    createTokenClient({
      ...(options.transport ? { transport: options.transport } : {}),
      ...(options.brokers ? { brokers: options.brokers } : {}),
      ...(options.failover ? { failover: options.failover } : {}),
    });
  const setToContext = options.setToContext ?? true;
  const reserveMs = options.reserveMs ?? 1000;
  if (!(Number.isFinite(reserveMs) && reserveMs >= 0)) {
    throw new ClientConfigError('reserveMs must be a number of milliseconds, 0 or more');
  }
  // Each token request's own limit: `tokenOptions.timeoutMs`, else the client's default.
  const ownTimeoutMs = options.tokenOptions?.timeoutMs ?? DEFAULT_TIMEOUT_MS;

  return {
    name: 'open-api-token-broker',
    async before(request) {
      const remaining = request.context.getRemainingTimeInMillis?.();
      const budget = remaining === undefined ? undefined : Math.max(1, remaining - reserveMs);
      // Never more than the request's own limit: a budget of minutes would also hold off a
      // fail-over to the next broker for half of it.
      const timeoutMs = Math.min(ownTimeoutMs, budget ?? Number.POSITIVE_INFINITY);
      const tokenOptions = { ...options.tokenOptions, timeoutMs };
      /** What is left of the invocation now, less the reserve, within the request's own limit. */
      const timeLeft = () => {
        const left = request.context.getRemainingTimeInMillis?.();
        return left === undefined ? timeoutMs : Math.max(1, Math.min(timeoutMs, left - reserveMs));
      };
      const set = (key: TKey, accessToken: string) => {
        request.internal[key] = accessToken;
        if (setToContext) Object.assign(request.context, { [key]: accessToken });
      };
      const tokens = await Promise.all(
        entries.map(async ([key, connection]) => {
          const token = await client.getToken(connection, tokenOptions);
          return [key, token.accessToken] as const;
        }),
      );
      const given = new Map<TKey, string>(tokens);
      for (const [key, accessToken] of tokens) set(key, accessToken);
      const reported = new Set<TKey>();
      const controls: TokenBrokerContextControls<TKey> = {
        async tokenRejected(key) {
          const connection = options.fetchData[key];
          const rejected = given.get(key);
          if (connection === undefined || rejected === undefined) {
            throw new ClientConfigError(
              `tokenRejected: "${String(key)}" is not a key of fetchData`,
            );
          }
          if (reported.has(key)) {
            throw new TokenRejectedAgainError(
              `The Open API rejected a fresh token for "${String(key)}" (connection '${connection}') too; not retrying again`,
            );
          }
          reported.add(key);
          // The handler's own time: what is left of the invocation now, less the reserve, read
          // again before each call (the report's answer took some of it).
          const answer = await client.invalidate(connection, rejected, { timeoutMs: timeLeft() });
          if (answer.verified === 'valid') {
            throw new TokenAcceptedError(
              `The Open API still accepts the token reported for "${String(key)}" (connection '${connection}'; the broker's probe asked): nothing was replaced, the rejection came from something else`,
            );
          }
          const fresh = await client.getToken(connection, {
            ...options.tokenOptions,
            timeoutMs: timeLeft(),
          });
          given.set(key, fresh.accessToken);
          set(key, fresh.accessToken);
          return fresh.accessToken;
        },
      };
      Object.assign(request.context, controls);
    },
  };
};

export default tokenBroker;
