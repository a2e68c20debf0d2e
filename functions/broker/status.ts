/**
 * HTTP statuses of the error codes: a transport concern, so it lives at the edge. The core's
 * errors carry a stable code and nothing about HTTP; the direct-invoke path uses the same map
 * to decide what a caller may see.
 */
import { type BrokerError, ErrorCode } from '../../lib/errors.js';

export const HTTP_STATUS: Readonly<Record<ErrorCode, number>> = Object.freeze({
  [ErrorCode.BAD_REQUEST]: 400,
  [ErrorCode.CALLER_NOT_ALLOWED]: 403,
  [ErrorCode.WRONG_QUALIFIER]: 403,
  [ErrorCode.UNKNOWN_CONNECTION]: 404,
  [ErrorCode.ROUTE_NOT_FOUND]: 404,
  [ErrorCode.MIN_VALIDITY_UNSATISFIABLE]: 400,
  [ErrorCode.FORCE_NOT_ALLOWED]: 403,
  [ErrorCode.REPLACEMENT_TOO_SOON]: 429,
  [ErrorCode.UPSTREAM_REJECTED]: 502,
  [ErrorCode.UPSTREAM_BAD_RESPONSE]: 502,
  [ErrorCode.UPSTREAM_UNAVAILABLE]: 503,
  [ErrorCode.STORE_UNAVAILABLE]: 503,
  [ErrorCode.SECRET_UNAVAILABLE]: 500,
  [ErrorCode.CONFIG_INVALID]: 500,
  // Its own code, seen by the caller: an issuance refused until the timeout is raised.
  [ErrorCode.FUNCTION_TIMEOUT_TOO_SHORT]: 503,
  [ErrorCode.INTERNAL_ERROR]: 500,
});

export const httpStatusOf = (error: BrokerError): number => HTTP_STATUS[error.code];
