/**
 * The one error mapping of the edge, shared by the HTTP and direct-invoke paths: every failure
 * is logged by its safe fields, counted when it is the broker's fault, and turned into what a
 * caller may see. Below 500 and for upstream and store outcomes (502/503) the error's own
 * message is shown (our messages never carry credentials); anything else becomes a generic
 * message with the request id, so internals never reach a caller.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import {
  BadRequestError,
  type BrokerError,
  InternalError,
  ReplacementRefusedError,
  ReplacementTooSoonError,
  StoreUnavailableError,
  toBrokerError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../lib/errors.js';
import { type BrokerMetrics, MetricName } from '../../lib/metrics.js';
import { httpStatusOf } from './status.js';

/** middy's http errors (body parser, router) carry `statusCode` and `expose`. */
const isMiddyClientError = (error: unknown): error is Error & { statusCode: number } =>
  error instanceof Error &&
  typeof (error as { statusCode?: unknown }).statusCode === 'number' &&
  (error as unknown as { statusCode: number }).statusCode < 500;

/** Our own error for anything thrown; middy's keep the raw body in `cause`, so only the message. */
const ownError = (error: unknown): BrokerError =>
  isMiddyClientError(error) ? new BadRequestError(error.message) : toBrokerError(error);

/** What a caller is answered with: the error it may see, its HTTP status and Retry-After. */
export interface Failure {
  readonly error: BrokerError;
  readonly status: number;
  /** Seconds a caller should wait before retrying a 503 or a 429; undefined for others. */
  readonly retryAfterSeconds: number | undefined;
}

export interface FailureContext {
  readonly logger: Logger;
  readonly metrics: BrokerMetrics;
  readonly requestId: string;
  /** The connection the request named, only if it is configured (metrics carry known names). */
  readonly connection: string | undefined;
  /** Extra log fields (the HTTP route). */
  readonly log?: Record<string, unknown>;
}

/** Logs, counts and maps one failure: the single path every caller kind goes through. */
export const answerFailure = (thrown: unknown, context: FailureContext): Failure => {
  const own = ownError(thrown);
  logError(context.logger, own, context.log);
  const status = httpStatusOf(own);
  const error =
    status >= 500 && status !== 502 && status !== 503
      ? new InternalError(
          `Internal error; the broker logs have the details (request id ${context.requestId})`,
        )
      : own;
  if (status >= 500) {
    context.metrics.record(MetricName.RequestErrors, context.connection ?? 'none');
  }
  return { error, status, retryAfterSeconds: retryAfter(error) };
};

/** Logs an error by its safe fields only: never the error object, its cause or the request. */
const logError = (logger: Logger, error: BrokerError, context: Record<string, unknown> = {}) => {
  const cause = error.cause as { name?: unknown; stack?: unknown } | undefined;
  const fields = {
    ...context,
    error: {
      name: error.name,
      code: error.code,
      message: error.message,
      ...error.details,
      ...upstreamFields(error),
      ...(cause ? { causeName: String(cause.name) } : {}),
      // Unknown failures need their stack to be debugged; our own errors do not.
      ...(error instanceof InternalError && cause ? { causeStack: String(cause.stack) } : {}),
    },
  };
  if (httpStatusOf(error) >= 500) logger.error('Request failed', fields);
  else logger.warn('Request refused', fields);
};

/** What the upstream said, for the logs (its message is already part of ours). */
const upstreamFields = (error: BrokerError): Record<string, unknown> => {
  if (error instanceof UpstreamRejectedError)
    return defined({ upstreamStatus: error.upstreamStatus });
  if (error instanceof UpstreamUnavailableError) {
    return defined({
      upstreamStatus: error.upstreamStatus,
      upstreamRetryAfter: error.upstreamRetryAfterSeconds,
      refreshInProgress: error.refreshInProgress,
      outcomeUnknown: error.outcomeUnknown || undefined,
    });
  }
  return {};
};

const defined = (fields: Record<string, unknown>) =>
  Object.fromEntries(Object.entries(fields).filter(([, value]) => value !== undefined));

const retryAfter = (error: BrokerError): number | undefined => {
  if (error instanceof UpstreamUnavailableError) return error.retryAfterSeconds ?? 1;
  if (error instanceof ReplacementTooSoonError) return error.retryAfterSeconds;
  if (error instanceof StoreUnavailableError) return 1;
  return undefined;
};

/**
 * The error object of an HTTP answer: its stable code, its message and, for a refused
 * replacement, the largest `minValidity` that can be had now without one.
 */
export const errorBody = (error: BrokerError) => ({
  code: error.code,
  message: error.message,
  ...(error instanceof ReplacementRefusedError
    ? { availableMinValidity: error.availableMinValidity }
    : {}),
});

/** For events no handler recognises: logged like every other refusal, then thrown. */
export const logRefusal = (logger: Logger, error: BrokerError) => logError(logger, error);
