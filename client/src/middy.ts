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
 * invocations reuse the token until it nears expiry, without calling the broker.
 */

import { ClientConfigError } from './errors.js';
import { createTokenClient, type GetTokenOptions, type TokenClient } from './index.js';
import type { Transport, TransportOptions } from './transports.js';

export interface TokenBrokerMiddlewareOptions<TKey extends string = string> {
  /** A client of your own (to share its cache with other code), or a transport to make one. */
  readonly client?: TokenClient;
  readonly transport?: TransportOptions | Transport;
  /** Where each token goes → which connection it is for, e.g. `{ openApiToken: 'production' }`. */
  readonly fetchData: Readonly<Record<TKey, string>>;
  /** Also set each token on the Lambda context (default `true`); it is always in `request.internal`. */
  readonly setToContext?: boolean;
  /** Passed to every `getToken`: `minValidity`, `timeoutMs`. */
  readonly tokenOptions?: Pick<GetTokenOptions, 'minValidity' | 'timeoutMs'>;
  /**
   * Leaves this much of the invocation's remaining time to the handler: the token request is
   * given at most what is left minus this (default 1000 ms), and never more than its own timeout.
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

/** The context type your handler sees: the Lambda context plus one string per key. */
export type TokenContext<TContext, TKey extends string> = TContext & Readonly<Record<TKey, string>>;

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
  if (!options.client === !options.transport) {
    throw new ClientConfigError('tokenBroker: give either "client" or "transport"');
  }
  const entries = Object.entries(options.fetchData ?? {}) as [TKey, string][];
  if (entries.length === 0) {
    throw new ClientConfigError('tokenBroker: "fetchData" must name at least one connection');
  }
  const client =
    options.client ?? createTokenClient({ transport: options.transport as TransportOptions });
  const setToContext = options.setToContext ?? true;
  const reserveMs = options.reserveMs ?? 1000;

  return {
    name: 'open-api-token-broker',
    async before(request) {
      const remaining = request.context.getRemainingTimeInMillis?.();
      const budget = remaining === undefined ? undefined : Math.max(1, remaining - reserveMs);
      const timeoutMs = Math.min(
        options.tokenOptions?.timeoutMs ?? Number.POSITIVE_INFINITY,
        budget ?? Number.POSITIVE_INFINITY,
      );
      const tokens = await Promise.all(
        entries.map(async ([key, connection]) => {
          const token = await client.getToken(connection, {
            ...options.tokenOptions,
            ...(Number.isFinite(timeoutMs) ? { timeoutMs } : {}),
          });
          return [key, token.accessToken] as const;
        }),
      );
      for (const [key, accessToken] of tokens) {
        request.internal[key] = accessToken;
        if (setToContext) Object.assign(request.context, { [key]: accessToken });
      }
    },
  };
};

export default tokenBroker;
