/**
 * Errors of the token client. Every failure the client raises is a {@link TokenBrokerError}:
 * either the broker's own error, as the class of the same name with the broker's stable `code`
 * (HTTP `error.code`, or Lambda's `errorType` for direct invoke), or one of the client's own:
 * {@link TransportError} (the broker was not reached in time), {@link ClientConfigError} (the
 * client cannot even try: no region, no credentials, a malformed URL).
 */

/**
 * The codes the broker answers with. A copy of the broker's `ErrorCode` (lib/errors.ts), because
 * the client ships alone; test/client.test.ts checks at compile time that the two are identical.
 */
export const BrokerErrorCode = {
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
export type BrokerErrorCode = (typeof BrokerErrorCode)[keyof typeof BrokerErrorCode];

/** The codes of failures on the client's side, before or instead of a broker answer. */
export const ClientErrorCode = {
  /** The broker could not be reached, or answered outside its protocol. */
  TRANSPORT_FAILED: 'TRANSPORT_FAILED',
  /** No answer within the call's timeout. */
  TIMEOUT: 'TIMEOUT',
  /** The caller's `AbortSignal` fired. */
  ABORTED: 'ABORTED',
  /** Region, credentials, URL or an option of the client is missing or malformed. */
  CLIENT_CONFIG_INVALID: 'CLIENT_CONFIG_INVALID',
  /** A token was reported rejected twice in one invocation: the fresh one was rejected too. */
  TOKEN_REJECTED_AGAIN: 'TOKEN_REJECTED_AGAIN',
  /** The broker still answers with a token this client reported; retry after `retryAfterSeconds`. */
  TOKEN_REPORTED: 'TOKEN_REPORTED',
  /** The broker's probe found the reported token accepted by the Open API: nothing replaced. */
  TOKEN_ACCEPTED: 'TOKEN_ACCEPTED',
} as const;
export type ClientErrorCode = (typeof ClientErrorCode)[keyof typeof ClientErrorCode];

export type TokenBrokerErrorCode = BrokerErrorCode | ClientErrorCode;

export interface TokenBrokerErrorOptions extends ErrorOptions {
  /** HTTP status, when the HTTP transport was used. */
  readonly status?: number | undefined;
  /** Seconds to wait before retrying, when the broker said. */
  readonly retryAfterSeconds?: number | undefined;
  /**
   * A refused replacement: the largest `minValidity` to be had now (HTTP: the error's field;
   * direct invoke: read from the broker's message).
   */
  readonly availableMinValidity?: number | undefined;
}

// `name` is set explicitly on every class: a minifier renames classes.

/** Base of every error the client raises. */
export class TokenBrokerError extends Error {
  override readonly name: string = 'TokenBrokerError';
  /** HTTP status, when the HTTP transport was used. */
  readonly status: number | undefined;
  /** Seconds to wait before retrying, when the broker said. */
  readonly retryAfterSeconds: number | undefined;
  constructor(
    message: string,
    /** The broker's stable code, e.g. `UPSTREAM_UNAVAILABLE`, or one of {@link ClientErrorCode}. */
    readonly code: TokenBrokerErrorCode | (string & {}),
    options: TokenBrokerErrorOptions = {},
  ) {
    super(message, options.cause === undefined ? undefined : { cause: options.cause });
    this.status = options.status;
    this.retryAfterSeconds = options.retryAfterSeconds;
  }
}

/** Malformed input (400), from the broker or refused by the client as the broker would. */
export class BadRequestError extends TokenBrokerError {
  override readonly name = 'BadRequestError';
}
/** The asked validity is longer than the Open API's token lifetime (400). */
export class MinValidityUnsatisfiableError extends TokenBrokerError {
  override readonly name = 'MinValidityUnsatisfiableError';
}
/**
 * The broker refused a `minValidity` that would have replaced the current token: one of the two
 * classes below. Ask for `availableMinValidity` or less. Not retried by the client.
 */
export abstract class ReplacementRefusedError extends TokenBrokerError {
  /**
   * The largest `minValidity` the current token gave when the broker answered: over HTTP the
   * error's field, over direct invoke read from its message; undefined when it said none.
   */
  readonly availableMinValidity: number | undefined;
  constructor(message: string, code: string, options: TokenBrokerErrorOptions = {}) {
    super(message, code, options);
    this.availableMinValidity = options.availableMinValidity;
  }
}
/** This caller may not force a replacement (the connection's `forceCallers`, 403). */
export class ForceNotAllowedError extends ReplacementRefusedError {
  override readonly name = 'ForceNotAllowedError';
}
/**
 * A replacement on a caller's word would come sooner than once per refresh window (429): ask
 * for `availableMinValidity` or less now, or retry after `retryAfterSeconds`.
 */
export class ReplacementTooSoonError extends ReplacementRefusedError {
  override readonly name = 'ReplacementTooSoonError';
}
/** This caller is not in the connection's `callers` (403). */
export class CallerNotAllowedError extends TokenBrokerError {
  override readonly name = 'CallerNotAllowedError';
}
/** No such connection (404). */
export class UnknownConnectionError extends TokenBrokerError {
  override readonly name = 'UnknownConnectionError';
}
/** The Open API refused the flow (502). */
export class UpstreamRejectedError extends TokenBrokerError {
  override readonly name = 'UpstreamRejectedError';
}
/** The Open API answered outside the protocol (502). */
export class UpstreamBadResponseError extends TokenBrokerError {
  override readonly name = 'UpstreamBadResponseError';
}
/** The Open API is down, slow or paused; retry after `retryAfterSeconds` (503). */
export class UpstreamUnavailableError extends TokenBrokerError {
  override readonly name = 'UpstreamUnavailableError';
}
/** The broker's store is failing; retry shortly (503). */
export class StoreUnavailableError extends TokenBrokerError {
  override readonly name = 'StoreUnavailableError';
}
/** The broker failed internally; its logs have the details (500). */
export class InternalError extends TokenBrokerError {
  override readonly name = 'InternalError';
}
/**
 * The broker could not be reached, did not answer within the timeout (`TIMEOUT`), the call was
 * aborted (`ABORTED`), or the answer is not the broker's protocol (`TRANSPORT_FAILED`): among
 * those, an HTTP error AWS answered in front of the broker (a Function URL's 403 IAM denial,
 * 429 throttling, an API Gateway 502 or 504), with its `status` and AWS's message, and a
 * redirect, which the client does not follow.
 */
export class TransportError extends TokenBrokerError {
  override readonly name = 'TransportError';
}
/**
 * The client could not try at all: no AWS region or credentials, a malformed URL or option. The
 * message says what to set. Nothing was sent.
 */
export class ClientConfigError extends TokenBrokerError {
  override readonly name = 'ClientConfigError';
  constructor(message: string, options: ErrorOptions = {}) {
    super(message, ClientErrorCode.CLIENT_CONFIG_INVALID, options);
  }
}

/**
 * The middleware's `tokenRejected` was called a second time for one key in one invocation: the
 * Open API rejected the fresh token too. Nothing was sent; the client does not loop. A fresh
 * token refused at once points elsewhere (the wrong client ID for this API, a missing scope, a
 * second system issuing tokens for the same client ID).
 */
export class TokenRejectedAgainError extends TokenBrokerError {
  override readonly name = 'TokenRejectedAgainError';
  constructor(message: string) {
    super(message, ClientErrorCode.TOKEN_REJECTED_AGAIN);
  }
}

/**
 * The broker answered with a token this client reported with `invalidate` (it is rejected by the
 * Open API), also when asked once more. The client never hands out a token it reported: it
 * fails instead. `retryAfterSeconds` is when the broker should have replaced it: its
 * `deferredSeconds` for a report it kept for later, else the longest time a broker container may
 * still serve it from memory (its `maxAgeMs`). The message never includes the token.
 */
export class TokenReportedError extends TokenBrokerError {
  override readonly name = 'TokenReportedError';
  constructor(message: string, retryAfterSeconds: number) {
    super(message, ClientErrorCode.TOKEN_REPORTED, { retryAfterSeconds });
  }
}

/**
 * The middleware's `tokenRejected` reported a token that the broker's probe found the Open API
 * still accepts (`verified: "valid"`, a connection with a `probe`): nothing was replaced, and a
 * fresh token would be the same one. The rejection came from something else: a missing scope or
 * permission, another header, the wrong client ID for this API. The message never includes the
 * token.
 */
export class TokenAcceptedError extends TokenBrokerError {
  override readonly name = 'TokenAcceptedError';
  constructor(message: string) {
    super(message, ClientErrorCode.TOKEN_ACCEPTED);
  }
}

type ErrorClass = new (
  message: string,
  code: string,
  options?: TokenBrokerErrorOptions,
) => TokenBrokerError;

// Keyed by every broker code: a code added to the broker (and so to BrokerErrorCode, see above)
// does not compile until it is mapped here.
const BY_CODE: { readonly [code in BrokerErrorCode]: ErrorClass } = {
  BAD_REQUEST: BadRequestError,
  ROUTE_NOT_FOUND: BadRequestError,
  // The function was invoked through an alias that does not serve the request's kind: the
  // client's functionName names the Function URL's alias (use live), or its url another alias.
  WRONG_QUALIFIER: BadRequestError,
  MIN_VALIDITY_UNSATISFIABLE: MinValidityUnsatisfiableError,
  FORCE_NOT_ALLOWED: ForceNotAllowedError,
  REPLACEMENT_TOO_SOON: ReplacementTooSoonError,
  CALLER_NOT_ALLOWED: CallerNotAllowedError,
  UNKNOWN_CONNECTION: UnknownConnectionError,
  UPSTREAM_REJECTED: UpstreamRejectedError,
  UPSTREAM_BAD_RESPONSE: UpstreamBadResponseError,
  UPSTREAM_UNAVAILABLE: UpstreamUnavailableError,
  STORE_UNAVAILABLE: StoreUnavailableError,
  SECRET_UNAVAILABLE: InternalError,
  CONFIG_INVALID: InternalError,
  FUNCTION_TIMEOUT_TOO_SHORT: InternalError,
  INTERNAL_ERROR: InternalError,
};

// Lambda reports a thrown error's `name` as `errorType`; these are the broker's class names.
const CODE_BY_NAME = new Map<string, BrokerErrorCode>([
  ['BadRequestError', 'BAD_REQUEST'],
  ['RouteNotFoundError', 'ROUTE_NOT_FOUND'],
  ['MinValidityUnsatisfiableError', 'MIN_VALIDITY_UNSATISFIABLE'],
  ['ForceNotAllowedError', 'FORCE_NOT_ALLOWED'],
  ['ReplacementTooSoonError', 'REPLACEMENT_TOO_SOON'],
  ['CallerNotAllowedError', 'CALLER_NOT_ALLOWED'],
  ['WrongQualifierError', 'WRONG_QUALIFIER'],
  ['UnknownConnectionError', 'UNKNOWN_CONNECTION'],
  ['UpstreamRejectedError', 'UPSTREAM_REJECTED'],
  ['UpstreamBadResponseError', 'UPSTREAM_BAD_RESPONSE'],
  ['UpstreamUnavailableError', 'UPSTREAM_UNAVAILABLE'],
  ['StoreUnavailableError', 'STORE_UNAVAILABLE'],
  ['SecretUnavailableError', 'SECRET_UNAVAILABLE'],
  ['ConfigError', 'CONFIG_INVALID'],
  ['FunctionTimeoutTooShortError', 'FUNCTION_TIMEOUT_TOO_SHORT'],
  ['InternalError', 'INTERNAL_ERROR'],
]);

const classFor = (code: string): ErrorClass =>
  Object.hasOwn(BY_CODE, code) ? BY_CODE[code as BrokerErrorCode] : TokenBrokerError;

/** The typed error for an HTTP error body `{ error: { code, message, … } }`. */
export const fromHttpError = (
  code: string,
  message: string,
  status: number,
  retryAfterSeconds?: number,
  availableMinValidity?: number,
) => new (classFor(code))(message, code, { status, retryAfterSeconds, availableMinValidity });

/**
 * What a refused replacement's direct-invoke message says can be had (`ask for 1099s or less`)
 * and when to retry (`retry in 2s`): Lambda reports only `errorType` and `errorMessage`, and the
 * contract (docs/contract.md, Errors) has the message carry both numbers. A message without
 * them gives neither; nothing is made up.
 */
const refusalNumbers = (code: BrokerErrorCode, message: string): TokenBrokerErrorOptions => {
  if (code !== BrokerErrorCode.REPLACEMENT_TOO_SOON && code !== BrokerErrorCode.FORCE_NOT_ALLOWED) {
    return {};
  }
  const available = /\bask for (\d{1,10})s or less\b/.exec(message)?.[1];
  const retry = /\bretry in (\d{1,10})s\b/.exec(message)?.[1];
  return {
    ...(available === undefined ? {} : { availableMinValidity: Number(available) }),
    ...(retry === undefined || code !== BrokerErrorCode.REPLACEMENT_TOO_SOON
      ? {}
      : { retryAfterSeconds: Number(retry) }),
  };
};

/** The typed error for a Lambda function error `{ errorType, errorMessage }`. */
export const fromFunctionError = (errorType: string, errorMessage: string) => {
  // Anything else (Sandbox.Timedout, Runtime.*) is a failure of the function as a whole.
  const code = CODE_BY_NAME.get(errorType) ?? BrokerErrorCode.INTERNAL_ERROR;
  return new (classFor(code))(
    code === BrokerErrorCode.INTERNAL_ERROR && errorType !== 'InternalError'
      ? `${errorType}: ${errorMessage}`
      : errorMessage,
    code,
    refusalNumbers(code, errorMessage),
  );
};
