/** What the broker core hands out and reports: the types its callers (the handlers) see. */
import { createHash } from 'node:crypto';
import type { Deadline } from '../clock.js';
import type { TokenRecord } from '../ports.js';

export interface ServedToken {
  readonly record: TokenRecord;
  /** Where it came from: drives logs and metrics. */
  readonly source: 'memory' | 'dynamodb' | 'upstream';
}

/** A token as the facade answers a caller: with how long that caller may keep reusing it. */
export interface TokenAnswer extends ServedToken {
  /** Local epoch ms until which the caller may reuse the token (within the read's proof). */
  readonly reusableUntil: number;
  /** Ms after `reusableUntil` the caller may still use the token if the broker is unreachable. */
  readonly staleIfErrorMs: number;
}

type Log = (message: string, ...attributes: Record<string, unknown>[]) => void;

/** The subset of a structured logger the core uses (Powertools Logger fits). */
export type BrokerLogger = Record<'debug' | 'info' | 'warn' | 'error', Log>;

export interface GetTokenOptions {
  /** Seconds the returned token must still be valid; defaults to the configured default. */
  readonly minValiditySeconds?: number | undefined;
  /** By when an answer is due (made from the Lambda's remaining time: `deadlineIn`). */
  readonly deadline: Deadline;
  /** By when work this request starts after its answer (a refresh ahead) must be over. */
  readonly workUntil?: Deadline | undefined;
  /** Who asks (an HTTP caller's IAM ARN, `direct invoke`): logged with an issuance it causes. */
  readonly caller?: string | undefined;
  /** Whether this caller may force a replacement (`forceCallers`). Default true. */
  readonly mayForce?: boolean | undefined;
}

export interface InvalidateOutcome {
  /** The reported token was the stored one and is gone: the next request gets a new one. */
  readonly invalidated: boolean;
  /** Too young to replace on a caller's word: the report is kept, replaced in about this many s. */
  readonly deferredSeconds?: number;
  /** What the probe said of the reported token, if it answered; absent: the age rules decided. */
  readonly verified?: 'valid' | 'revoked';
}

/** A failed warm-up or readiness check: the broker's code and message (never a credential). */
export interface Failed {
  readonly status: 'failed';
  readonly error: { readonly code: string; readonly message: string };
}

export type WarmUpOutcome =
  | { readonly status: 'fresh' | 'issued'; readonly expiresAt: string; readonly expiresIn: number }
  | Failed;

/** What an operator may see of a connection: never the token. */
export interface ConnectionStatus {
  readonly connection: string;
  readonly variant: string;
  readonly token: {
    readonly expiresAt: string;
    readonly expiresIn: number;
    readonly issuedAt: string;
    readonly tokenDigest: string;
  } | null;
  readonly lease: {
    readonly holder: string;
    readonly expiresInMs: number;
    /** Lease writes left before its token request (0: the request may be out). */
    readonly countdown: number;
  } | null;
}

export interface WarmUpReport {
  readonly connections: Readonly<Record<string, WarmUpOutcome>>;
  readonly issued: number;
  readonly failed: number;
}

/** One readiness check; `skipped`: not run, as an earlier check of the connection failed. */
export type ReadinessCheck = { readonly status: 'ok' } | { readonly status: 'skipped' } | Failed;

export interface ConnectionReadiness {
  readonly ready: boolean;
  readonly secret: ReadinessCheck;
  readonly token: ReadinessCheck & { readonly expiresIn?: number; readonly source?: string };
}

export interface ReadinessReport {
  readonly ready: boolean;
  readonly connections: Readonly<Record<string, ConnectionReadiness>>;
}

/** SHA-256 of an access token, base64url: what invalidate compares and logs may show. */
export const tokenDigest = (accessToken: string): string =>
  createHash('sha256').update(accessToken).digest('base64url');
