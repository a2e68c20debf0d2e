/**
 * The two variants of the Open API: where each one's endpoints live, what its token request
 * carries and how its answers read. One flow runs over both (see `open-api.ts`).
 */
import type { ConnectionConfig, Variant } from '../config.js';
import { UpstreamBadResponseError } from '../errors.js';
import type { ClientCredentials, IssuedToken } from '../ports.js';
import {
  authorizationCode,
  isObject,
  type Json,
  type Sensitive,
  type TokenLimits,
  tokenFromPayload,
  unwrapV3Envelope,
} from './responses.js';

/** One variant of the protocol: how to build each request and read each response. */
export interface VariantProtocol {
  readonly prefix: string;
  parseAuthorize(body: unknown, connection: ConnectionConfig, sensitive: Sensitive): string;
  tokenBody(credentials: ClientCredentials, code: string): Json;
  parseToken(
    body: unknown,
    limits: TokenLimits,
    sensitive: Sensitive,
  ): Omit<IssuedToken, 'requestedAt'>;
}

const v3: VariantProtocol = {
  prefix: '/open-api/v3',
  parseAuthorize: (body, connection, sensitive) =>
    authorizationCode(unwrapV3Envelope(body, 'authorize', sensitive), connection.codeField, 'data'),
  // The current variant never receives the client secret.
  tokenBody: ({ clientId }, code) => ({ clientId, code }),
  parseToken: (body, limits, sensitive) =>
    tokenFromPayload(unwrapV3Envelope(body, 'access-token', sensitive), limits),
};

const legacy: VariantProtocol = {
  prefix: '/open-api',
  parseAuthorize: (body) => {
    if (!isObject(body)) {
      throw new UpstreamBadResponseError('Open API authorize response is not a JSON object');
    }
    return authorizationCode(body, 'code', 'body');
  },
  tokenBody: ({ clientId, clientSecret }, code) => ({ clientId, clientSecret, code }),
  parseToken: (body, limits) => {
    if (!isObject(body)) {
      throw new UpstreamBadResponseError('Open API access-token response is not a JSON object');
    }
    return tokenFromPayload(body, limits);
  },
};

export const PROTOCOLS: Readonly<Record<Variant, VariantProtocol>> = { v3, legacy };
