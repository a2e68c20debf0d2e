/**
 * One HTTP attempt at an Open API endpoint: bounded by its own time limit and the caller's
 * deadline, stopped by the caller's signal (the lease), and its failures typed. Whether a
 * failed access-token attempt may have reached the upstream decides everything after it: only
 * one provably never sent may be retried.
 */
import {
  printable,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../errors.js';
import { readJsonBody, type Sensitive, type Step } from './responses.js';

/** What bounds one run of a step: the caller's deadline, and its signal (the lease's). */
export interface AttemptBounds {
  readonly deadline: number;
  readonly signal: AbortSignal | undefined;
}

/** What an attempt runs with: the client's `fetch`, clock and per-request time limit. */
export interface AttemptContext {
  readonly fetch: typeof fetch;
  readonly now: () => number;
  readonly timeoutMs: number;
}

/** Sends `request` once and reads its JSON body, or throws a typed error. */
export const attempt = async (
  { fetch, now, timeoutMs }: AttemptContext,
  request: Request,
  step: Step,
  { deadline, signal: outer }: AttemptBounds,
  sensitive: Sensitive,
): Promise<unknown> => {
  const budget = Math.min(timeoutMs, deadline - now());
  if (budget <= 0) {
    throw new UpstreamUnavailableError(`No time left to call the Open API ${step} endpoint`, {
      retryAfterSeconds: 1,
    });
  }
  // Stopped by the caller (the lease) before anything was sent: its reason is the answer.
  if (outer?.aborted) throw outer.reason;
  const timeout = AbortSignal.timeout(budget);
  const signal = outer ? AbortSignal.any([timeout, outer]) : timeout;
  try {
    const response = await fetch(request, { signal });
    return await readJsonBody(response, step, sensitive);
  } catch (error) {
    if (error instanceof UpstreamRejectedError || error instanceof UpstreamBadResponseError) {
      throw error;
    }
    if (error instanceof UpstreamUnavailableError) throw error;
    // A token request that may have reached the upstream, and whose answer we will never
    // read, may still issue a token there (and revoke the earlier ones).
    const outcomeUnknown = step === 'access-token' && !provablyNotSent(error);
    if (outer?.aborted && !outcomeUnknown) throw outer.reason;
    if (signal.aborted) {
      throw new UpstreamUnavailableError(
        outer?.aborted
          ? `Open API ${step} request was abandoned: the lease ended`
          : `Open API ${step} request timed out after ${budget} ms`,
        { retryAfterSeconds: 1, outcomeUnknown, cause: error },
      );
    }
    throw new UpstreamUnavailableError(`Open API ${step} request failed: ${networkReason(error)}`, {
      retryAfterSeconds: 1,
      outcomeUnknown,
      cause: error,
    });
  }
};

/** Failures that happen before a request can reach the server: it was certainly not processed. */
const NOT_SENT = new Set(['ECONNREFUSED', 'ENOTFOUND', 'EAI_AGAIN', 'ENETUNREACH', 'EHOSTUNREACH']);

const provablyNotSent = (error: unknown): boolean => {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  return typeof cause?.code === 'string' && NOT_SENT.has(cause.code);
};

/** A short, credential-free reason for a network failure (`ECONNREFUSED`, `CERT_HAS_EXPIRED`, …). */
export const networkReason = (error: unknown): string => {
  const cause = (error as { cause?: { code?: unknown } } | undefined)?.cause;
  if (cause && typeof cause.code === 'string') return printable(cause.code, 40);
  return error instanceof Error ? printable(error.name, 40) : 'unknown error';
};
