/**
 * One Lambda, three kinds of caller: HTTP (payload 2.0), direct invoke, and the scheduled
 * warm-up. They share one container, so one memory cache serves them all. Each comes through an
 * alias of its own: HTTP through the Function URL's, the others through `live` (`qualifier.ts`).
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import { injectLambdaContext } from '@aws-lambda-powertools/logger/middleware';
import middy from '@middy/core';
import type { Context } from 'aws-lambda';
import type { TokenBroker } from '../../lib/broker/index.js';
import type { TimeoutSettings } from '../../lib/config/settings-check.js';
import { BadRequestError } from '../../lib/errors.js';
import { type BrokerMetrics, noMetrics } from '../../lib/metrics.js';
import type { Invocations } from './after-response.js';
import { errorBody, logRefusal } from './errors.js';
import type { createHttpHandler } from './http.js';
import { type HttpEvent, isHttpEvent } from './http-event.js';
import { createInvokeHandler, isInvokeEvent } from './invoke.js';
import { wrongQualifier } from './qualifier.js';
import { createScheduleHandler, isScheduledEvent } from './schedule.js';
import { httpStatusOf } from './status.js';
import { timeoutGate } from './timeout-gate.js';

export interface HandlerDeps {
  readonly broker: TokenBroker;
  /** Told when each invocation's handler has returned (the after-response extension waits). */
  readonly invocations?: Invocations;
  readonly logger: Logger;
  /** Counts request errors; `flush` publishes what an invocation recorded, at its end. */
  readonly metrics?: BrokerMetrics & { flush(): void };
  /**
   * The settings the function's timeout must hold (the re-check's countdown and a POST):
   * checked at the first invocation (`timeout-gate.ts`); undefined: not checked.
   */
  readonly timeoutSettings?: TimeoutSettings;
  /**
   * IAM ARN globs of the HTTP callers that may use `/status`, `/ready` and `/warm`
   * (`BROKER_OPERATOR_CALLERS`); undefined: every caller IAM lets in.
   */
  readonly operatorCallers?: readonly string[] | undefined;
  /**
   * The alias the Function URL serves (`BROKER_URL_QUALIFIER`): HTTP requests are served only
   * through it, and it serves nothing else; undefined: every qualifier serves every event.
   */
  readonly urlQualifier?: string | undefined;
}

export const createHandler = ({
  broker,
  logger,
  metrics,
  invocations,
  timeoutSettings,
  operatorCallers,
  urlQualifier,
}: HandlerDeps) => {
  const gate = timeoutGate(timeoutSettings, {
    refuse: (problem) => broker.refuseIssuance(problem),
    logger,
  });
  // The HTTP side (its router and middlewares, `http.ts`) is loaded on the first HTTP request:
  // in the bundle it is a chunk, which a cold start answering a direct invoke never loads.
  let http: Promise<ReturnType<typeof createHttpHandler>> | undefined;
  const httpHandler = () => {
    http ??= import('./http.js').then(({ createHttpHandler }) =>
      createHttpHandler(broker, logger, metrics ?? noMetrics, gate, operatorCallers),
    );
    return http;
  };
  const invoke = createInvokeHandler(broker, logger, metrics ?? noMetrics, gate);
  const schedule = createScheduleHandler(broker, logger, gate);

  return (
    middy<unknown, unknown>()
      // logEvent is pinned off: an invalidate request carries an access token in its body.
      .use(injectLambdaContext(logger, { resetKeys: true, logEvent: false }))
      .use({ after: () => metrics?.flush(), onError: () => metrics?.flush() })
      // Last out: the invocation's own work is done; what it started runs after the response.
      .use({
        after: (request) => invocations?.finished(request.context.awsRequestId),
        onError: (request) => invocations?.finished(request.context.awsRequestId),
      })
      .handler(async (event: unknown, context: Context) => {
        const http = isHttpEvent(event);
        // Before anything else: a caller identity is trusted only from the Function URL's own
        // request context, never from a direct invoker's hand-made event (issue 37).
        const refused = wrongQualifier(
          http,
          context.invokedFunctionArn,
          urlQualifier,
          http ? (event as HttpEvent).requestContext.authorizer?.iam?.userArn : undefined,
        );
        if (refused) {
          logRefusal(logger, refused);
          // An HTTP-shaped event is answered as every refused HTTP request is (403, its code):
          // a thrown error is a function error, which the function-errors alarm counts, and
          // anyone allowed to invoke could fire it at will (npm run smoke sends one each run).
          // Any other event is a direct invoke's, refused as direct invokes are: thrown.
          if (http) {
            return {
              statusCode: httpStatusOf(refused),
              headers: { 'content-type': 'application/json', 'cache-control': 'no-store' },
              body: JSON.stringify({ error: errorBody(refused) }),
            };
          }
          throw refused;
        }
        if (http) return (await httpHandler())(event as HttpEvent, context);
        if (isScheduledEvent(event)) return schedule(event, context);
        if (isInvokeEvent(event)) return invoke(event, context);
        const error = new BadRequestError(
          'Unrecognised event: expected an HTTP API request (payload format 2.0), a direct invoke {"action": "getToken" | "invalidate", …}, or an EventBridge Scheduled Event',
        );
        logRefusal(logger, error);
        throw error;
      })
  );
};
