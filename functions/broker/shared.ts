import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import type { ServedToken } from '../../lib/broker/index.js';
import type { TokenRecord } from '../../lib/ports.js';

/** Kept free before the Lambda deadline to serialise and return the answer. */
const ANSWER_MARGIN_MS = 500;
/** Used when a context has no deadline (never in Lambda; possible in hand-made invocations). */
const DEFAULT_BUDGET_MS = 10_000;

/** Epoch ms by which the broker must have its answer ready. */
export const deadlineOf = (context: Pick<Context, 'getRemainingTimeInMillis'>): number => {
  const remaining =
    typeof context.getRemainingTimeInMillis === 'function'
      ? context.getRemainingTimeInMillis()
      : DEFAULT_BUDGET_MS;
  return Date.now() + Math.max(0, remaining - ANSWER_MARGIN_MS);
};

/** The token as every caller kind receives it. The refresh token never leaves the broker. */
export const tokenResponse = (connection: string, record: TokenRecord, now = Date.now()) => ({
  connection,
  accessToken: record.accessToken,
  expiresAt: new Date(record.expiresAt).toISOString(),
  expiresIn: Math.max(0, Math.floor((record.expiresAt - now) / 1000)),
});

/**
 * One line per served token. Memory hits are the hot path and are counted by the TokensServed
 * metric, so they log at DEBUG; tokens read from DynamoDB or issued upstream log at INFO.
 */
export const logServed = (logger: Logger, served: ServedToken) => {
  const fields = { source: served.source, tokenDigest: served.record.tokenDigest };
  if (served.source === 'memory') logger.debug('Token served', fields);
  else logger.info('Token served', fields);
};
