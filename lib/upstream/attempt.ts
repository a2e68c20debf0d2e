/**
 * One HTTP attempt at an Open API endpoint: bounded by its own time limit and the caller's
 * deadline, stopped by the caller's signal (the lease), and its failures typed. Whether a
 * failed access-token attempt may have reached the upstream decides everything after it: only
 * one provably never sent may be retried.
 */
import type { Clock, Deadline } from '../clock.js';
import {
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../errors.js';
import { readJsonBody, type Sensitive, type Step } from './responses.js';

/** What bounds one run of a step: the caller's deadline (monotonic), and its signal (the lease's). */
export interface AttemptBounds {
  readonly deadline: Deadline;
  readonly signal: AbortSignal | undefined;
  /** No attempt is sent after this (see `StepOptions.sendBy`). */
  readonly sendBy?: Deadline | undefined;
}

/**
 * What an attempt runs with: the client's `fetch`, its clock (the wall clock only for an HTTP
 * date in Retry-After) and per-request time limit.
 */
export interface AttemptContext {
  readonly fetch: typeof fetch;
  readonly clock: Pick<Clock, 'now'>;
  readonly timeoutMs: number;
}

/** Sends `request` once and reads its JSON body, or throws a typed error. */
export const attempt = async (
  { fetch, clock, timeoutMs }: AttemptContext,
  request: Request,
  step: Step,
  { deadline, signal: outer, sendBy }: AttemptBounds,
  sensitive: Sensitive,
): Promise<unknown> => {
  // Whole ms: AbortSignal.timeout refuses anything else (the monotonic clock has fractions).
  const budget = Math.min(timeoutMs, deadline.wholeMsLeft());
  if (budget <= 0) {
    throw new UpstreamUnavailableError(`No time left to call the Open API ${step} endpoint`, {
      retryAfterSeconds: 1,
    });
  }
  // Stopped by the caller (the lease) before anything was sent: its reason is the answer.
  if (outer?.aborted) throw outer.reason;
  // Past what the lease covers (a stall since the fence, a retry too late): nothing is sent.
  if (sendBy?.passed()) {
    throw new UpstreamUnavailableError(
      `No time left to send the Open API ${step} request under the lease`,
      { retryAfterSeconds: 1 },
    );
  }
  const timeout = AbortSignal.timeout(budget);
  const signal = outer ? AbortSignal.any([timeout, outer]) : timeout;
  try {
    const response = await fetch(request, { signal });
    return await readJsonBody(response, step, sensitive, clock);
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

/** The error and what it wraps, nearest first: `cause` links and an aggregate's `errors`. */
const causeChain = (error: unknown): object[] => {
  const chain: object[] = [];
  const queue: unknown[] = [error];
  // Bounded: an error may wrap itself, or a long chain.
  while (queue.length > 0 && chain.length < 8) {
    const next = queue.shift();
    if (typeof next !== 'object' || next === null || chain.includes(next)) continue;
    chain.push(next);
    const { cause, errors } = next as { cause?: unknown; errors?: unknown };
    queue.push(cause);
    if (Array.isArray(errors)) queue.push(...errors.slice(0, 4));
  }
  return chain;
};

/** A code, a system call or a name: one word, safe to print. */
const word = (value: unknown): string | undefined =>
  typeof value === 'string' && /^[\w.-]{1,40}$/.test(value) ? value : undefined;

/**
 * A message of a few plain words (`bad port`, `other side closed`): no `:`, `/`, `?`, `=`,
 * `@` or quote, so no URL, query, header or JSON can be in it.
 */
const plainWords = (value: unknown): string | undefined =>
  typeof value === 'string' && /^[A-Za-z][\w ,.()'-]{0,59}$/.test(value) ? value : undefined;

/**
 * A short, credential-free reason for a network failure. undici's `fetch` throws a bare
 * `TypeError: fetch failed` whose cause holds the reason: the code and the system call of the
 * first cause that has one (`ECONNREFUSED (connect)`, `ENOTFOUND (getaddrinfo)`,
 * `UND_ERR_SOCKET`, `CERT_HAS_EXPIRED`), an aggregate's (IPv6 then IPv4) included. Without a
 * code, a cause's message if it is a few plain words (`bad port`); messages are otherwise left
 * out, since they may repeat the URL (with `clientId` in its query) or a header.
 */
export const networkReason = (error: unknown): string => {
  const chain = causeChain(error);
  for (const link of chain) {
    const { code, syscall } = link as { code?: unknown; syscall?: unknown };
    const coded = word(code);
    if (coded) return word(syscall) ? `${coded} (${word(syscall)})` : coded;
  }
  const said = chain
    .slice(1)
    .map((link) => plainWords((link as { message?: unknown }).message))
    .find((message) => message !== undefined);
  if (said) return said;
  const name = word((error as { name?: unknown } | undefined)?.name);
  if (!name) return 'unknown error';
  const message = plainWords((error as { message?: unknown }).message);
  return message ? `${message} (${name}, no cause code)` : `${name}, no cause code`;
};
