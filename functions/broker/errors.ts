/**
 * Maps any error to what a caller may see. Below 500 and for upstream outcomes (502/503) the
 * error's own message is shown (our messages never carry credentials); anything else becomes a
 * generic message with the request id, so internals never reach a caller.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import {
  BadRequestError,
  type BrokerError,
  InternalError,
  StoreUnavailableError,
  toBrokerError,
  UpstreamUnavailableError,
} from '../../lib/errors.js';
import { type BrokerMetrics, MetricName } from '../../lib/metrics.js';

/** middy's http errors (body parser, router) carry `statusCode` and `expose`. */
const isMiddyClientError = (error: unknown): error is Error & { statusCode: number } =>
  error instanceof Error &&
  typeof (error as { statusCode?: unknown }).statusCode === 'number' &&
  (error as unknown as { statusCode: number }).statusCode < 500;

/** Normalises to a BrokerError whose message is safe to show the caller. */
export const publicError = (error: unknown, requestId: string): BrokerError => {
  // middy's errors keep the raw request body in `cause`: only the message is carried over.
  if (isMiddyClientError(error)) return new BadRequestError(error.message);
  const brokerError = toBrokerError(error);
  if (
    brokerError.httpStatus >= 500 &&
    brokerError.httpStatus !== 502 &&
    brokerError.httpStatus !== 503
  ) {
    return new InternalError(
      `Internal error; the broker logs have the details (request id ${requestId})`,
    );
  }
  return brokerError;
};

/** Counts a failure the broker answered with a server-side error (not a caller mistake). */
export const countError = (
  metrics: BrokerMetrics,
  error: BrokerError,
  connection: string | undefined,
) => {
  if (error.httpStatus >= 500) metrics.record(MetricName.RequestErrors, connection ?? 'none');
};

/** Logs an error by its safe fields only: never the error object, its cause or the request. */
export const logError = (logger: Logger, error: unknown, context: Record<string, unknown> = {}) => {
  const brokerError = isMiddyClientError(error)
    ? new BadRequestError(error.message)
    : toBrokerError(error);
  const cause = brokerError.cause as { name?: unknown; stack?: unknown } | undefined;
  const fields = {
    ...context,
    error: {
      name: brokerError.name,
      code: brokerError.code,
      message: brokerError.message,
      ...brokerError.details,
      ...(cause ? { causeName: String(cause.name) } : {}),
      // Unknown failures need their stack to be debugged; our own errors do not.
      ...(brokerError instanceof InternalError && cause ? { causeStack: String(cause.stack) } : {}),
    },
  };
  if (brokerError.httpStatus >= 500) logger.error('Request failed', fields);
  else logger.warn('Request refused', fields);
};

/** Seconds a caller should wait before retrying a 503; undefined for other errors. */
export const retryAfter = (error: BrokerError): number | undefined => {
  if (error instanceof UpstreamUnavailableError) return error.retryAfterSeconds ?? 1;
  if (error instanceof StoreUnavailableError) return 1;
  return undefined;
};
