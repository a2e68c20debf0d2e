/**
 * Errors of the token client. Each broker error arrives as the class of the same name, with the
 * broker's stable `code` (HTTP `error.code`, or Lambda's `errorType` for direct invoke).
 */

/** Base of every error the client raises. */
export class TokenBrokerError extends Error {
  override readonly name: string = 'TokenBrokerError';
  constructor(
    message: string,
    /** The broker's stable code, e.g. `UPSTREAM_UNAVAILABLE`; `TRANSPORT_FAILED` when it was not reached. */
    readonly code: string,
    /** HTTP status, when the HTTP transport was used. */
    readonly status?: number,
    /** Seconds to wait before retrying, when the broker said. */
    readonly retryAfterSeconds?: number,
  ) {
    super(message);
  }
}

/** Malformed input (400). */
export class BadRequestError extends TokenBrokerError {
  override readonly name = 'BadRequestError';
}
/** The asked validity is longer than the Open API's token lifetime (400). */
export class MinValidityUnsatisfiableError extends TokenBrokerError {
  override readonly name = 'MinValidityUnsatisfiableError';
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
/** The broker could not be reached, or answered something that is not the broker's protocol. */
export class TransportError extends TokenBrokerError {
  override readonly name = 'TransportError';
}

type ErrorClass = new (
  message: string,
  code: string,
  status?: number,
  retryAfterSeconds?: number,
) => TokenBrokerError;

const BY_CODE: Readonly<Record<string, ErrorClass>> = {
  BAD_REQUEST: BadRequestError,
  ROUTE_NOT_FOUND: BadRequestError,
  MIN_VALIDITY_UNSATISFIABLE: MinValidityUnsatisfiableError,
  CALLER_NOT_ALLOWED: CallerNotAllowedError,
  UNKNOWN_CONNECTION: UnknownConnectionError,
  UPSTREAM_REJECTED: UpstreamRejectedError,
  UPSTREAM_BAD_RESPONSE: UpstreamBadResponseError,
  UPSTREAM_UNAVAILABLE: UpstreamUnavailableError,
  STORE_UNAVAILABLE: StoreUnavailableError,
  INTERNAL_ERROR: InternalError,
};

const CODE_BY_NAME: Readonly<Record<string, string>> = {
  BadRequestError: 'BAD_REQUEST',
  MinValidityUnsatisfiableError: 'MIN_VALIDITY_UNSATISFIABLE',
  UnknownConnectionError: 'UNKNOWN_CONNECTION',
  UpstreamRejectedError: 'UPSTREAM_REJECTED',
  UpstreamBadResponseError: 'UPSTREAM_BAD_RESPONSE',
  UpstreamUnavailableError: 'UPSTREAM_UNAVAILABLE',
  StoreUnavailableError: 'STORE_UNAVAILABLE',
  InternalError: 'INTERNAL_ERROR',
};

/** The typed error for an HTTP error body `{ error: { code, message } }`. */
export const fromHttpError = (code: string, message: string, status: number, retryAfter?: number) =>
  new (BY_CODE[code] ?? TokenBrokerError)(message, code, status, retryAfter);

/** The typed error for a Lambda function error `{ errorType, errorMessage }`. */
export const fromFunctionError = (errorType: string, errorMessage: string) => {
  const code = CODE_BY_NAME[errorType] ?? 'INTERNAL_ERROR';
  return new (BY_CODE[code] ?? TokenBrokerError)(errorMessage, code);
};
