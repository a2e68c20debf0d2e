import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import type { ServedToken, TokenAnswer, TokenBroker } from '../../lib/broker/index.js';
import { type Deadline, systemClock } from '../../lib/clock.js';

/** Used when a context has no deadline (never in Lambda; possible in hand-made invocations). */
const DEFAULT_BUDGET_MS = 10_000;

/**
 * By when the broker must have its answer ready; also the end of the work the invocation
 * starts after its answer (`GetTokenOptions.workUntil`): the function's timeout bounds the
 * invocation, the time the after-response extension keeps it thawed included. Made on the
 * broker's monotonic clock from the time the invocation has left, with no wall clock read
 * (docs/protocol.md, "Clocks").
 */
export const deadlineOf = (
  broker: Pick<TokenBroker, 'deadlineIn' | 'timing'>,
  context: Pick<Context, 'getRemainingTimeInMillis'>,
): Deadline => {
  const remaining =
    typeof context.getRemainingTimeInMillis === 'function'
      ? context.getRemainingTimeInMillis()
      : DEFAULT_BUDGET_MS;
  return broker.deadlineIn(Math.max(0, remaining - broker.timing.answerMarginMs));
};

/**
 * The token as every caller kind receives it. The refresh token never leaves the broker.
 * `maxAgeMs`: for how many ms after sending its request the caller may reuse the token without
 * asking again (0: not at all); `staleIfErrorSeconds`: for how many whole seconds after that it
 * may still use it while it cannot reach the broker (0: not at all; never without a `maxAgeMs`,
 * so that the two added to the send stay inside what the broker granted). HTTP answers carry
 * both as `Cache-Control` too (`cacheControl`).
 */
export const tokenResponse = (
  connection: string,
  {
    record,
    reusableUntil,
    staleIfErrorMs,
  }: Pick<TokenAnswer, 'record' | 'reusableUntil' | 'staleIfErrorMs'>,
  now = systemClock.now(),
) => {
  const maxAgeMs = Math.max(0, Math.floor(reusableUntil - now));
  return {
    connection,
    accessToken: record.accessToken,
    expiresAt: new Date(record.expiresAt).toISOString(),
    expiresIn: Math.max(0, Math.floor((record.expiresAt - now) / 1000)),
    maxAgeMs,
    staleIfErrorSeconds: maxAgeMs > 0 ? Math.max(0, Math.floor(staleIfErrorMs / 1000)) : 0,
  };
};

/**
 * The `Cache-Control` of a token answer: `private` (one caller's, never a shared cache's) for
 * the whole seconds of `maxAgeMs`, with `stale-if-error` (RFC 5861) when it may be used stale;
 * `no-store` when it may be neither reused for a whole second nor used stale.
 */
export const cacheControl = (maxAgeMs: number, staleIfErrorSeconds = 0): string => {
  const seconds = Math.floor(maxAgeMs / 1000);
  if (staleIfErrorSeconds > 0) {
    return `private, max-age=${seconds}, stale-if-error=${staleIfErrorSeconds}`;
  }
  return seconds > 0 ? `private, max-age=${seconds}` : 'no-store';
};

/**
 * One line per served token. Memory hits are the hot path and are counted by the TokensServed
 * metric, so they log at DEBUG; tokens read from DynamoDB or issued upstream log at INFO.
 */
export const logServed = (logger: Logger, served: ServedToken) => {
  const fields = { source: served.source, tokenDigest: served.record.tokenDigest };
  if (served.source === 'memory') logger.debug('Token served', fields);
  else logger.info('Token served', fields);
};
