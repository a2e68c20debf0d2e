/**
 * Direct (Lambda-to-Lambda) invoke:
 *   { "action": "getToken", "connection": "…", "minValidity"?: n } → token object (with maxAgeMs,
 *     staleIfErrorSeconds)
 *   { "action": "invalidate", "connection": "…", "accessToken": "…" }
 *     → { invalidated, deferredSeconds? }
 * Failures are thrown; Lambda reports the error's `name` as `errorType`.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import type { TokenBroker } from '../../lib/broker/index.js';
import { mayForce } from '../../lib/callers.js';
import { UnknownConnectionError } from '../../lib/errors.js';
import type { BrokerMetrics } from '../../lib/metrics.js';
import { answerFailure } from './errors.js';
import { parseInvokeRequest } from './requests.js';
import { deadlineOf, logServed, tokenResponse } from './shared.js';
import type { TimeoutGate } from './timeout-gate.js';

/**
 * Who asks, for a direct invoke: Lambda hands the function no identity of its invoker (access
 * is `lambda:InvokeFunction`), so the audit line can only say how it came.
 */
const DIRECT_INVOKE = 'direct invoke';

export const isInvokeEvent = (event: unknown): boolean =>
  typeof event === 'object' && event !== null && 'action' in event;

export const createInvokeHandler =
  (broker: TokenBroker, logger: Logger, metrics: BrokerMetrics, gate: TimeoutGate = () => {}) =>
  async (event: unknown, context: Context) => {
    try {
      gate(context);
      const request = await parseInvokeRequest(event);
      const deadline = deadlineOf(broker, context);
      if (request.action === 'status') return { connections: await broker.status(deadline) };
      if (request.action === 'warmUp') return broker.warmUp(deadline, DIRECT_INVOKE);
      // Answered, not thrown, when a connection is not ready: the report says which and why.
      if (request.action === 'ready') return broker.ready(deadline);
      // Direct invoke is not bound by `callers` (it carries no identity): every name is usable.
      if (!broker.hasConnection(request.connection)) {
        throw new UnknownConnectionError(request.connection, [...broker.connectionNames()]);
      }
      // An unknown name is not logged: it may be anything pasted by mistake (a token, say).
      logger.appendKeys({
        ...(broker.hasConnection(request.connection) ? { connection: request.connection } : {}),
        action: request.action,
      });
      if (request.action === 'invalidate') {
        return broker.invalidate(request.connection, request.accessToken, DIRECT_INVOKE, deadline);
      }
      const served = await broker.getToken(request.connection, {
        minValiditySeconds: request.minValidity,
        deadline,
        // A refresh this request starts runs after the answer, within the same invocation.
        workUntil: deadline,
        caller: DIRECT_INVOKE,
        // No identity to match against `forceCallers`: only where every caller may force.
        mayForce: mayForce(broker.connection(request.connection), undefined),
      });
      logServed(logger, served);
      return tokenResponse(request.connection, served);
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
