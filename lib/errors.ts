/**
 * Typed errors of the broker. Every error carries a stable `code` (part of the public contract:
 * HTTP callers see it in `{ error: { code } }`, direct-invoke callers see the class `name` as
 * Lambda's `errorType`).
 *
 * Messages are written to be safe to show a caller: they never contain an access token, refresh
 * token, authorization code or client secret. `details` holds extra, equally safe context meant
 * for logs only (secret ids, upstream HTTP status). `cause` is kept for debugging but is never
 * serialised into a response or a log line by the broker.
 */
export const ErrorCode = {
  BAD_REQUEST: 'BAD_REQUEST',
  CALLER_NOT_ALLOWED: 'CALLER_NOT_ALLOWED',
  UNKNOWN_CONNECTION: 'UNKNOWN_CONNECTION',
  ROUTE_NOT_FOUND: 'ROUTE_NOT_FOUND',
  MIN_VALIDITY_UNSATISFIABLE: 'MIN_VALIDITY_UNSATISFIABLE',
  UPSTREAM_REJECTED: 'UPSTREAM_REJECTED',
  UPSTREAM_BAD_RESPONSE: 'UPSTREAM_BAD_RESPONSE',
  UPSTREAM_UNAVAILABLE: 'UPSTREAM_UNAVAILABLE',
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  SECRET_UNAVAILABLE: 'SECRET_UNAVAILABLE',
  CONFIG_INVALID: 'CONFIG_INVALID',
  INTERNAL_ERROR: 'INTERNAL_ERROR',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export type ErrorDetails = Readonly<Record<string, string | number | boolean | undefined>>;

interface BrokerErrorOptions extends ErrorOptions {
  details?: ErrorDetails;
}

/** Base class of every error the broker raises on purpose. */
export abstract class BrokerError extends Error {
  abstract readonly code: ErrorCode;
  /** HTTP status used at the HTTP edge; the core never looks at it. */
  abstract readonly httpStatus: number;
  readonly details: ErrorDetails;

  constructor(message: string, options: BrokerErrorOptions = {}) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.details = Object.freeze({ ...options.details });
  }
}

// `name` is set explicitly on every class: a minifier renames classes, and Lambda reports
// `name` as the `errorType` that direct-invoke callers branch on.

/** The caller sent something malformed: bad JSON, wrong types, out-of-range values. */
export class BadRequestError extends BrokerError {
  override readonly name = 'BadRequestError';
  readonly code = ErrorCode.BAD_REQUEST;
  readonly httpStatus = 400;
}

/** The IAM principal that called is not in the connection's `callers` allowlist. */
export class CallerNotAllowedError extends BrokerError {
  override readonly name = 'CallerNotAllowedError';
  readonly code = ErrorCode.CALLER_NOT_ALLOWED;
  readonly httpStatus = 403;
}

/** The connection name is not configured in `BROKER_CONNECTIONS`. */
export class UnknownConnectionError extends BrokerError {
  override readonly name = 'UnknownConnectionError';
  readonly code = ErrorCode.UNKNOWN_CONNECTION;
  readonly httpStatus = 404;
  constructor(readonly connection: string) {
    super(`Unknown connection '${printable(connection)}'`);
  }
}

/** No HTTP route matches the method and path. */
export class RouteNotFoundError extends BrokerError {
  override readonly name = 'RouteNotFoundError';
  readonly code = ErrorCode.ROUTE_NOT_FOUND;
  readonly httpStatus = 404;
}

/** The upstream's token lifetime is shorter than the validity the caller asked for. */
export class MinValidityUnsatisfiableError extends BrokerError {
  override readonly name = 'MinValidityUnsatisfiableError';
  readonly code = ErrorCode.MIN_VALIDITY_UNSATISFIABLE;
  readonly httpStatus = 400;
}

/** The upstream answered but refused the flow (envelope code other than `000000`, or a 4xx). */
export class UpstreamRejectedError extends BrokerError {
  override readonly name = 'UpstreamRejectedError';
  readonly code = ErrorCode.UPSTREAM_REJECTED;
  readonly httpStatus = 502;
  constructor(
    message: string,
    readonly upstreamCode: string | undefined,
    readonly upstreamMessage: string | undefined,
    options: BrokerErrorOptions = {},
  ) {
    super(message, options);
  }
}

/** The upstream answered with something that does not follow the protocol. */
export class UpstreamBadResponseError extends BrokerError {
  override readonly name = 'UpstreamBadResponseError';
  readonly code = ErrorCode.UPSTREAM_BAD_RESPONSE;
  readonly httpStatus = 502;
}

/** The upstream could not be reached, timed out, or answered 5xx/429. Safe to retry later. */
export class UpstreamUnavailableError extends BrokerError {
  override readonly name = 'UpstreamUnavailableError';
  readonly code = ErrorCode.UPSTREAM_UNAVAILABLE;
  readonly httpStatus = 503;
  constructor(
    message: string,
    /** Seconds after which a retry makes sense, when known. */
    readonly retryAfterSeconds?: number,
    options: BrokerErrorOptions = {},
  ) {
    super(message, options);
  }
}

/** DynamoDB could not be read or written and no usable token was in memory. */
export class StoreUnavailableError extends BrokerError {
  override readonly name = 'StoreUnavailableError';
  readonly code = ErrorCode.STORE_UNAVAILABLE;
  readonly httpStatus = 503;
}

/** The connection's secret is missing, unreadable or not `{ clientId, clientSecret }`. */
export class SecretUnavailableError extends BrokerError {
  override readonly name = 'SecretUnavailableError';
  readonly code = ErrorCode.SECRET_UNAVAILABLE;
  readonly httpStatus = 500;
}

/** A configuration variable is missing or malformed; raised at cold start. */
export class ConfigError extends BrokerError {
  override readonly name = 'ConfigError';
  readonly code = ErrorCode.CONFIG_INVALID;
  readonly httpStatus = 500;
}

/** Anything unexpected, with internals withheld from the caller. */
export class InternalError extends BrokerError {
  override readonly name = 'InternalError';
  readonly code = ErrorCode.INTERNAL_ERROR;
  readonly httpStatus = 500;
}

/** Wraps anything that is not a BrokerError, so callers only ever see our own types. */
export const toBrokerError = (error: unknown): BrokerError =>
  error instanceof BrokerError ? error : new InternalError('Internal error', { cause: error });

/** Caller-supplied text echoed in a message: cut and stripped of control characters. */
export const printable = (value: string, max = 64): string => {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping them is the point
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
};
