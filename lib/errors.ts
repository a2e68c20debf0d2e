/**
 * Typed errors of the broker. Every error carries a stable `code` (part of the public contract:
 * HTTP callers see it in `{ error: { code } }`, direct-invoke callers see the class `name` as
 * Lambda's `errorType`).
 *
 * Messages are written to be safe to show a caller: they never contain an access token, refresh
 * token, authorization code or client secret. `details` holds extra, equally safe context meant
 * for logs only (secret ids); what the upstream said is in typed fields. `cause` is kept for debugging but is never
 * serialised into a response or a log line by the broker.
 */
export const ErrorCode = {
  BAD_REQUEST: 'BAD_REQUEST',
  CALLER_NOT_ALLOWED: 'CALLER_NOT_ALLOWED',
  WRONG_QUALIFIER: 'WRONG_QUALIFIER',
  UNKNOWN_CONNECTION: 'UNKNOWN_CONNECTION',
  ROUTE_NOT_FOUND: 'ROUTE_NOT_FOUND',
  MIN_VALIDITY_UNSATISFIABLE: 'MIN_VALIDITY_UNSATISFIABLE',
  FORCE_NOT_ALLOWED: 'FORCE_NOT_ALLOWED',
  REPLACEMENT_TOO_SOON: 'REPLACEMENT_TOO_SOON',
  UPSTREAM_REJECTED: 'UPSTREAM_REJECTED',
  UPSTREAM_BAD_RESPONSE: 'UPSTREAM_BAD_RESPONSE',
  UPSTREAM_UNAVAILABLE: 'UPSTREAM_UNAVAILABLE',
  STORE_UNAVAILABLE: 'STORE_UNAVAILABLE',
  SECRET_UNAVAILABLE: 'SECRET_UNAVAILABLE',
  CONFIG_INVALID: 'CONFIG_INVALID',
  FUNCTION_TIMEOUT_TOO_SHORT: 'FUNCTION_TIMEOUT_TOO_SHORT',
  INTERNAL_ERROR: 'INTERNAL_ERROR',
} as const;
export type ErrorCode = (typeof ErrorCode)[keyof typeof ErrorCode];

export type ErrorDetails = Readonly<Record<string, string | number | boolean | undefined>>;

/** What every broker error takes besides its message. */
export interface BrokerErrorOptions extends ErrorOptions {
  /** Extra context for logs only (secret ids, …): never shown to a caller. */
  readonly details?: ErrorDetails;
}

/**
 * Base class of every error the broker raises on purpose. It carries no transport concern:
 * the HTTP status of each code is decided at the edge (`functions/broker/status.ts`).
 */
export abstract class BrokerError extends Error {
  abstract readonly code: ErrorCode;
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
}

/** The IAM principal that called is not in the connection's `callers` allowlist. */
export class CallerNotAllowedError extends BrokerError {
  override readonly name = 'CallerNotAllowedError';
  readonly code = ErrorCode.CALLER_NOT_ALLOWED;
}

/**
 * An event reached the function through a qualifier that does not serve its kind (issue 37): an
 * HTTP request other than through the Function URL's alias (`BROKER_URL_QUALIFIER`), whose
 * request context alone says who called, or any other event through that alias. A direct
 * invoker can send the event a Function URL would build, naming any IAM ARN: it is refused here
 * rather than served as the caller it names.
 */
export class WrongQualifierError extends BrokerError {
  override readonly name = 'WrongQualifierError';
  readonly code = ErrorCode.WRONG_QUALIFIER;
}

/** The connection name is not configured in `BROKER_CONNECTIONS`. */
export class UnknownConnectionError extends BrokerError {
  override readonly name = 'UnknownConnectionError';
  readonly code = ErrorCode.UNKNOWN_CONNECTION;
  /**
   * The name as the message shows it. The name itself is not kept on the error: Lambda's
   * runtime logs a thrown error's own fields, and the name may be a token pasted by mistake.
   */
  readonly connection: string;
  /**
   * @param usable the connections the caller may use, said after the name (at most
   * {@link MAX_LISTED}); none: nothing is said, not even that there are none. Only what the
   * caller may use: a caller must not learn the names of connections whose `callers` exclude it.
   */
  constructor(name: string, usable: readonly string[] = []) {
    const shown = givenName(name);
    const listed = usable.slice(0, MAX_LISTED).map((known) => printable(known));
    const more = usable.length > MAX_LISTED ? `, and ${usable.length - MAX_LISTED} more` : '';
    super(
      `Unknown connection ${shown}${listed.length > 0 ? `; this caller may use: ${listed.join(', ')}${more}` : ''}`,
    );
    this.connection = shown;
  }
}

/** The most connection names an unknown connection's message lists. */
const MAX_LISTED = 20;

/** No HTTP route matches the method and path. */
export class RouteNotFoundError extends BrokerError {
  override readonly name = 'RouteNotFoundError';
  readonly code = ErrorCode.ROUTE_NOT_FOUND;
}

/** The upstream's token lifetime is shorter than the validity the caller asked for. */
export class MinValidityUnsatisfiableError extends BrokerError {
  override readonly name = 'MinValidityUnsatisfiableError';
  readonly code = ErrorCode.MIN_VALIDITY_UNSATISFIABLE;
}

/** What a caller refused a replacement may ask for instead. */
export interface ReplacementRefusalOptions extends BrokerErrorOptions {
  /**
   * The largest `minValidity` (whole seconds) the current token gives, at the time of the
   * answer: a request for this much or less is served without a replacement.
   */
  readonly availableMinValidity: number;
}

/**
 * A `minValidity` that would have replaced the current token was refused: one of the two
 * classes below, each with what the caller can have instead.
 */
export abstract class ReplacementRefusedError extends BrokerError {
  readonly availableMinValidity: number;
  constructor(message: string, options: ReplacementRefusalOptions) {
    super(message, options);
    this.availableMinValidity = options.availableMinValidity;
  }
}

/**
 * The caller asked for more validity than the current token has, outside its refresh window,
 * and may not force a replacement (the connection's `forceCallers`).
 */
export class ForceNotAllowedError extends ReplacementRefusedError {
  override readonly name = 'ForceNotAllowedError';
  readonly code = ErrorCode.FORCE_NOT_ALLOWED;
}

/**
 * A replacement at a caller's word would come too soon after the last one: no caller's word
 * replaces a token more than once per refresh window (see `caller-bounds.ts`).
 */
export class ReplacementTooSoonError extends ReplacementRefusedError {
  override readonly name = 'ReplacementTooSoonError';
  readonly code = ErrorCode.REPLACEMENT_TOO_SOON;
  /** Seconds after which this container would replace the token on such a request. */
  readonly retryAfterSeconds: number;
  constructor(
    message: string,
    options: ReplacementRefusalOptions & { readonly retryAfterSeconds: number },
  ) {
    super(message, options);
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** What the upstream said when it refused or failed a request. */
export interface UpstreamAnswerOptions extends BrokerErrorOptions {
  /** The upstream's HTTP status, when it answered at all. */
  readonly upstreamStatus?: number | undefined;
}

export interface UpstreamRejectedOptions extends UpstreamAnswerOptions {
  /** The upstream's own error code (envelope `code`, or a flat body's `code`/`error`). */
  readonly upstreamCode?: string | undefined;
  /** The upstream's own error message, with any credential value redacted. */
  readonly upstreamMessage?: string | undefined;
}

/** The upstream answered but refused the flow (envelope code other than `000000`, or a 4xx). */
export class UpstreamRejectedError extends BrokerError {
  override readonly name = 'UpstreamRejectedError';
  readonly code = ErrorCode.UPSTREAM_REJECTED;
  readonly upstreamStatus: number | undefined;
  readonly upstreamCode: string | undefined;
  readonly upstreamMessage: string | undefined;
  constructor(message: string, options: UpstreamRejectedOptions = {}) {
    super(message, options);
    this.upstreamStatus = options.upstreamStatus;
    this.upstreamCode = options.upstreamCode;
    this.upstreamMessage = options.upstreamMessage;
  }
}

/** The upstream answered with something that does not follow the protocol. */
export class UpstreamBadResponseError extends BrokerError {
  override readonly name = 'UpstreamBadResponseError';
  readonly code = ErrorCode.UPSTREAM_BAD_RESPONSE;
  /**
   * The answer to an access-token request could not be read (too large, not JSON, no token):
   * the request was processed, so a token may have been issued (and the earlier ones revoked).
   */
  readonly outcomeUnknown: boolean;

  constructor(message: string, options: BrokerErrorOptions & { outcomeUnknown?: boolean } = {}) {
    super(message, options);
    this.outcomeUnknown = options.outcomeUnknown ?? false;
  }
}

/**
 * Whether a failed flow's token request may have issued a token all the same (and so revoked
 * the earlier ones): timed out, reset after sending, answered 5xx, or answered unreadably.
 */
export const isOutcomeUnknown = (error: unknown): boolean =>
  (error instanceof UpstreamUnavailableError || error instanceof UpstreamBadResponseError) &&
  error.outcomeUnknown;

export interface UpstreamUnavailableOptions extends UpstreamAnswerOptions {
  /** Seconds after which a caller's retry makes sense, when known. */
  readonly retryAfterSeconds?: number | undefined;
  /** What the upstream's own `Retry-After` asked for, in seconds, when it sent one. */
  readonly upstreamRetryAfterSeconds?: number | undefined;
  /**
   * A refresh of a revoking upstream was in progress elsewhere when this was raised: the token
   * held until now may already be revoked, so it must not be served as the last good one.
   */
  readonly refreshInProgress?: boolean | undefined;
  /**
   * An access-token request may have reached the upstream without its answer reaching us:
   * it may still be processed, issuing a token and revoking the earlier ones. Never retried
   * (its code is single-use), and the token it may have revoked is never served again.
   */
  readonly outcomeUnknown?: boolean | undefined;
}

/** The upstream could not be reached, timed out, or answered 5xx/429. Safe to retry later. */
export class UpstreamUnavailableError extends BrokerError {
  override readonly name = 'UpstreamUnavailableError';
  readonly code = ErrorCode.UPSTREAM_UNAVAILABLE;
  readonly retryAfterSeconds: number | undefined;
  readonly upstreamStatus: number | undefined;
  readonly upstreamRetryAfterSeconds: number | undefined;
  /** Said only where it was judged (a wait for another container's lease). */
  readonly refreshInProgress: boolean | undefined;
  readonly outcomeUnknown: boolean;
  constructor(message: string, options: UpstreamUnavailableOptions = {}) {
    super(message, options);
    this.retryAfterSeconds = options.retryAfterSeconds;
    this.upstreamStatus = options.upstreamStatus;
    this.upstreamRetryAfterSeconds = options.upstreamRetryAfterSeconds;
    this.refreshInProgress = options.refreshInProgress;
    this.outcomeUnknown = options.outcomeUnknown ?? false;
  }
}

/** DynamoDB could not be read or written and no usable token was in memory. */
export class StoreUnavailableError extends BrokerError {
  override readonly name = 'StoreUnavailableError';
  readonly code = ErrorCode.STORE_UNAVAILABLE;
}

/** The connection's secret is missing, unreadable or not `{ clientId, clientSecret }`. */
export class SecretUnavailableError extends BrokerError {
  override readonly name = 'SecretUnavailableError';
  readonly code = ErrorCode.SECRET_UNAVAILABLE;
}

/** A configuration variable is missing or malformed; raised at cold start. */
export class ConfigError extends BrokerError {
  override readonly name = 'ConfigError';
  readonly code = ErrorCode.CONFIG_INVALID;
}

/**
 * The function's timeout cannot hold a refresh's countdown and POST under the configured
 * re-check (`settings-check.ts`, `timeoutProblem`): found at an environment's first invocation,
 * whose time left is the timeout, and every invocation of that environment is refused with it.
 * The message names both settings.
 */
export class FunctionTimeoutTooShortError extends BrokerError {
  override readonly name = 'FunctionTimeoutTooShortError';
  readonly code = ErrorCode.FUNCTION_TIMEOUT_TOO_SHORT;
}

/** Anything unexpected, with internals withheld from the caller. */
export class InternalError extends BrokerError {
  override readonly name = 'InternalError';
  readonly code = ErrorCode.INTERNAL_ERROR;
}

/** Wraps anything that is not a BrokerError, so callers only ever see our own types. */
export const toBrokerError = (error: unknown): BrokerError =>
  error instanceof BrokerError ? error : new InternalError('Internal error', { cause: error });

/**
 * A name a caller gave (a connection, a field, a query parameter), for a message or a log line:
 * quoted whole when it is as short as names are, else only its length, for a token or secret
 * pasted where a name goes must not reach a log. Names of this contract are at most 24
 * characters; a connection's may be longer, and is then not repeated either.
 */
export const givenName = (value: string, quote = "'", max = 24): string =>
  value.length <= max
    ? `${quote}${printable(value)}${quote}`
    : `(${value.length} characters, not repeated)`;

/** Caller-supplied text echoed in a message: cut and stripped of control characters. */
export const printable = (value: string, max = 64): string => {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: stripping them is the point
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
};
