/**
 * Direct (Lambda-to-Lambda) invoke:
 *   { "action": "getToken", "connection": "…", "minValidity"?: n } → token object
 *   { "action": "invalidate", "connection": "…", "accessToken": "…" } → { invalidated }
 * Failures are thrown; Lambda reports the error's `name` as `errorType`.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import * as z from 'zod/mini';
import type { TokenBroker } from '../../lib/broker/index.js';
import { BadRequestError } from '../../lib/errors.js';
import type { BrokerMetrics } from '../../lib/metrics.js';
import '../../lib/schema.js';
import { answerFailure } from './errors.js';
import { deadlineOf, logServed, tokenResponse } from './shared.js';

const connection = z.string().check(z.minLength(1), z.maxLength(200));

const invokeSchema = z.discriminatedUnion('action', [
  z.strictObject({
    action: z.literal('getToken'),
    connection,
    minValidity: z.optional(z.number().check(z.int(), z.minimum(0), z.maximum(1e9))),
  }),
  z.strictObject({
    action: z.literal('invalidate'),
    connection,
    accessToken: z.string().check(z.minLength(1), z.maxLength(8192)),
  }),
  // Operator actions (the CLI): metadata only, and the warm-up on demand.
  z.strictObject({ action: z.literal('status') }),
  z.strictObject({ action: z.literal('warmUp') }),
]);

export type InvokeRequest = z.infer<typeof invokeSchema>;

export const isInvokeEvent = (event: unknown): boolean =>
  typeof event === 'object' && event !== null && 'action' in event;

const parseInvoke = (event: unknown): InvokeRequest => {
  const result = invokeSchema.safeParse(event);
  if (result.success) return result.data;
  // zod's messages name the expected type, never the received value.
  const issue = result.error.issues[0];
  const field = issue?.path.length ? `"${issue.path.join('.')}"` : 'event';
  throw new BadRequestError(`Invalid direct invoke: ${field}: ${issue?.message ?? 'invalid'}`);
};

export const createInvokeHandler =
  (broker: TokenBroker, logger: Logger, metrics: BrokerMetrics) =>
  async (event: unknown, context: Context) => {
    try {
      const request = parseInvoke(event);
      if (request.action === 'status') return { connections: await broker.status() };
      if (request.action === 'warmUp') return broker.warmUp(deadlineOf(context));
      logger.appendKeys({ connection: request.connection, action: request.action });
      if (request.action === 'invalidate') {
        return { invalidated: await broker.invalidate(request.connection, request.accessToken) };
      }
      const served = await broker.getToken(request.connection, {
        minValiditySeconds: request.minValidity,
        deadline: deadlineOf(context),
      });
      logServed(logger, served);
      return tokenResponse(request.connection, served.record);
    } catch (error) {
      const named = (event as { connection?: unknown }).connection;
      throw answerFailure(error, {
        logger,
        metrics,
        requestId: context.awsRequestId,
        connection: typeof named === 'string' && broker.hasConnection(named) ? named : undefined,
      }).error;
    }
  };
