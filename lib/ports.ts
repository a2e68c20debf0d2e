/**
 * Ports: the broker core talks to the outside world only through these interfaces. Adapters in
 * `lib/adapters/` implement them for AWS; tests implement them in memory.
 */
import type { ConnectionConfig } from './config.js';

/** `clientId` / `clientSecret` of one connection, as stored in Secrets Manager. */
export interface ClientCredentials {
  readonly clientId: string;
  readonly clientSecret: string;
}

/** A cached access token. The refresh token is deliberately not part of it (see README). */
export interface TokenRecord {
  readonly connection: string;
  readonly accessToken: string;
  /** SHA-256 of the access token (base64url): compared on invalidate, safe to log. */
  readonly tokenDigest: string;
  /** Local epoch ms at which the token request was sent: expiry counts from here. */
  readonly issuedAt: number;
  /** Epoch ms after which the token must not be handed out. */
  readonly expiresAt: number;
}

/** Where tokens are shared between containers (DynamoDB in production). */
export interface TokenStore {
  /** The stored token, expired or not: the caller checks expiry. */
  get(connection: string): Promise<TokenRecord | undefined>;
  /**
   * Stores `record` unless the store already holds a token that lives longer. Returns the
   * token that is current after the call (the given one, or the longer-lived one kept).
   */
  put(record: TokenRecord): Promise<TokenRecord>;
  /** Deletes the token only if its digest is `tokenDigest`. Returns whether it deleted. */
  deleteIfMatches(connection: string, tokenDigest: string): Promise<boolean>;
}

/** Where connection credentials come from (Secrets Manager in production). */
export interface SecretSource {
  /** @throws {SecretUnavailableError} when the secret is missing, unreadable or malformed. */
  getCredentials(secretId: string): Promise<ClientCredentials>;
}

/** What the upstream returned for a successful flow. */
export interface IssuedToken {
  readonly accessToken: string;
  /** Seconds, as given by the upstream (validated positive integer). */
  readonly expiresIn: number;
  /** Upstream Unix seconds of issuance, when given: used only to detect clock skew. */
  readonly upstreamTimestamp: number | undefined;
  /** Local epoch ms at which the token request was sent. */
  readonly requestedAt: number;
}

/** Runs the two-step token flow against the Open API. */
export interface TokenIssuer {
  issue(
    connection: ConnectionConfig,
    credentials: ClientCredentials,
    options: { readonly deadline: number },
  ): Promise<IssuedToken>;
}
