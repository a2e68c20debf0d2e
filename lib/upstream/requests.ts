/**
 * Building the two requests of the flow. A request is built (and, in strict mode, signed) for
 * each attempt, so that a retried attempt carries its own timestamp.
 */
import { systemClock } from '../clock.js';
import type { ConnectionConfig } from '../config.js';
import type { ClientCredentials } from '../ports.js';
import { DEFAULT_SIGNING, type SigningConfig, signingHeaders } from './signing.js';
import { PROTOCOLS } from './variants.js';

const USER_AGENT = 'open-api-token-broker/0.1';

/** Builds the authorize request (GET with `clientId` in the query); redirects are not followed. */
export const authorizeRequest = (connection: ConnectionConfig, clientId: string): Request => {
  const url = new URL(
    `${connection.baseUrl}${PROTOCOLS[connection.variant].prefix}/oauth/authorize`,
  );
  url.searchParams.set('clientId', clientId);
  return new Request(url, {
    method: 'GET',
    headers: { accept: 'application/json', 'user-agent': USER_AGENT },
    redirect: 'manual',
  });
};

/**
 * The connection's signing scheme, or `undefined` when its requests are not signed. Only v3
 * access-token requests are signed (Strict Access Token Mode); the legacy variant sends the secret.
 */
export const signingOf = (connection: ConnectionConfig): SigningConfig | undefined =>
  connection.variant !== 'v3' || connection.signing === false
    ? undefined
    : (connection.signing ?? DEFAULT_SIGNING);

/**
 * Builds the access-token request (POST with a JSON body that depends on the variant). A v3
 * request is signed with `X-Timestamp` and `X-Signature` at `nowMs` (the wall clock: the
 * upstream compares the timestamp with its own) unless signing is off.
 */
export const accessTokenRequest = (
  connection: ConnectionConfig,
  credentials: ClientCredentials,
  code: string,
  nowMs: number = systemClock.now(),
): Request => {
  const protocol = PROTOCOLS[connection.variant];
  const body = protocol.tokenBody(credentials, code);
  // Serialised once: `{body}` signs exactly the bytes that are sent.
  const bodyText = JSON.stringify(body);
  const signing = signingOf(connection);
  return new Request(`${connection.baseUrl}${protocol.prefix}/oauth/access-token`, {
    method: 'POST',
    headers: {
      accept: 'application/json',
      'content-type': 'application/json',
      'user-agent': USER_AGENT,
      ...(signing && signingHeaders(credentials.clientSecret, signing, { body, bodyText }, nowMs)),
    },
    body: bodyText,
    // A redirect is not followed: fetch would re-send the body (the legacy variant's client
    // secret) and a v3 signature to wherever it points, and take that host's answer as the
    // token. A 3xx is refused (`readJsonBody`).
    redirect: 'manual',
  });
};
