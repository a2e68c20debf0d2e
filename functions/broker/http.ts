/**
 * HTTP callers: API Gateway HTTP API or Function URL, payload format 2.0, IAM-authenticated.
 *
 *   GET  /health                          → 200 { status, connections }
 *   GET  /tokens/{connection}?minValidity → 200 { connection, accessToken, expiresAt, expiresIn,
 *                                                 maxAgeMs, staleIfErrorSeconds }
 *   POST /tokens/{connection}/invalidate  → 200 { invalidated }
 *   GET  /status                          → 200 { connections: [metadata, never a token] }
 *   POST /warm                            → 200 the warm-up report
 *   GET  /ready                           → 200 (or 503) the readiness report, per connection
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import middy from '@middy/core';
import httpHeaderNormalizer from '@middy/http-header-normalizer';
import httpJsonBodyParser from '@middy/http-json-body-parser';
import httpRouterHandler from '@middy/http-router';
import type { APIGatewayProxyStructuredResultV2, Context } from 'aws-lambda';
import type { TokenBroker } from '../../lib/broker/index.js';
import { allowsCaller, mayForce } from '../../lib/callers.js';
import {
  BadRequestError,
  CallerNotAllowedError,
  printable,
  RouteNotFoundError,
  UnknownConnectionError,
} from '../../lib/errors.js';
import type { BrokerMetrics } from '../../lib/metrics.js';
import { answerFailure, errorBody } from './errors.js';
import type { HttpEvent } from './http-event.js';
import { parseHttpRequest } from './requests.js';
import { cacheControl, deadlineOf, logServed, tokenResponse } from './shared.js';
import type { TimeoutGate } from './timeout-gate.js';

export { type HttpEvent, isHttpEvent } from './http-event.js';

type HttpResult = APIGatewayProxyStructuredResultV2;

/**
 * Requests larger than this are not ours: an invalidate body is one token, of up to
 * `REQUEST_LIMITS.accessTokenLength` characters, and its JSON around it.
 */
export const MAX_BODY_BYTES = 16 * 1024;

const json = (
  statusCode: number,
  body: unknown,
  headers: Record<string, string> = {},
): HttpResult => ({
  statusCode,
  headers: { 'content-type': 'application/json', 'cache-control': 'no-store', ...headers },
  body: JSON.stringify(body),
});

/** A path of one of this contract's routes, with a connection name as long as names are. */
const ROUTE_SHAPE = /^\/(?:health|status|ready|warm|tokens\/[^/]{1,24}(?:\/invalidate)?)\/?$/;

/**
 * A request's path for a log line or a message: as it is when it has a route's shape or is too
 * short to hold a credential, else only its length: a token pasted into the path by mistake
 * must not reach the log (and base64 may hold `/`, so no segment rule catches it).
 */
const loggedPath = (path: string | undefined): string => {
  const given = path ?? '';
  return ROUTE_SHAPE.test(given) || given.length <= 24
    ? printable(given, 100)
    : `(a path of ${given.length} characters, not repeated)`;
};

/** A path segment percent-decoded for a message; as it is when it is not valid encoding. */
const decodedName = (segment: string): string => {
  try {
    return decodeURIComponent(segment);
  } catch {
    return segment;
  }
};

export const createHttpHandler = (
  broker: TokenBroker,
  logger: Logger,
  metrics: BrokerMetrics,
  gate: TimeoutGate = () => {},
  operatorCallers?: readonly string[],
) => {
  /** Who asks, as an issuance's audit line names it. */
  const callerOf = (event: HttpEvent) =>
    event.requestContext.authorizer?.iam?.userArn ?? 'HTTP caller without an IAM identity';

  const connectionFor = (event: HttpEvent) => {
    const name = event.pathParameters?.connection ?? '';
    const callerArn = event.requestContext.authorizer?.iam?.userArn;
    if (!broker.hasConnection(name)) {
      // Said as the caller gave it (a client sends a name's '/' as %2F), with the names this
      // caller may use: only those whose `callers` admit it.
      const usable = [...broker.connectionNames()].filter((known) =>
        allowsCaller(broker.connection(known).callers, callerArn),
      );
      throw new UnknownConnectionError(decodedName(name), usable);
    }
    const connection = broker.connection(name);
    if (!allowsCaller(connection.callers, callerArn)) {
      throw new CallerNotAllowedError(
        `Caller ${callerArn ? `'${callerArn}'` : 'without an IAM identity'} may not use connection '${connection.name}'`,
      );
    }
    logger.appendKeys({ connection: connection.name });
    return connection;
  };

  /**
   * Whether any connection keeps its tokens to named callers. Then the operator routes, and
   * `/health`'s list of connections, are for `BROKER_OPERATOR_CALLERS` only, and for nobody while
   * it is unset (secure by default, issue 37): a service allowed one connection must not list
   * the others, nor have `/ready` read every secret.
   */
  let restrictedOnce: boolean | undefined;
  const restricted = (): boolean => {
    restrictedOnce ??= [...broker.connectionNames()].some(
      (name) => broker.connection(name).callers !== undefined,
    );
    return restrictedOnce;
  };

  /** Whether `callerArn` may use the operator routes (`/status`, `/ready`, `/warm`). */
  const isOperator = (callerArn: string | undefined): boolean =>
    restricted() && operatorCallers === undefined
      ? false
      : allowsCaller(operatorCallers, callerArn);

  const operatorOnly = (event: HttpEvent) => {
    const callerArn = event.requestContext.authorizer?.iam?.userArn;
    if (!isOperator(callerArn)) {
      const who = callerArn ? `'${callerArn}'` : 'without an IAM identity';
      throw new CallerNotAllowedError(
        restricted() && operatorCallers === undefined
          ? `Caller ${who} may not use the operator routes: connections restrict their callers, so these routes are for BROKER_OPERATOR_CALLERS (stage parameter operatorCallers), which is not set`
          : `Caller ${who} may not use the operator routes (BROKER_OPERATOR_CALLERS)`,
      );
    }
  };

  /** The connections `callerArn` may see: every one for an operator, else those it may use. */
  const visibleTo = (callerArn: string | undefined): string[] =>
    [...broker.connectionNames()].filter(
      (name) => isOperator(callerArn) || allowsCaller(broker.connection(name).callers, callerArn),
    );

  const getToken = async (event: HttpEvent, context: Context): Promise<HttpResult> => {
    const { minValidity } = await parseHttpRequest('getToken', event);
    const connection = connectionFor(event);
    const deadline = deadlineOf(broker, context);
    const served = await broker.getToken(connection.name, {
      minValiditySeconds: minValidity,
      deadline,
      // A refresh this request starts runs after the answer, within the same invocation.
      workUntil: deadline,
      caller: callerOf(event),
      mayForce: mayForce(connection, event.requestContext.authorizer?.iam?.userArn),
    });
    logServed(logger, served);
    const answer = tokenResponse(connection.name, served);
    return json(200, answer, {
      'cache-control': cacheControl(answer.maxAgeMs, answer.staleIfErrorSeconds),
    });
  };

  const invalidate = async (event: HttpEvent, context: Context): Promise<HttpResult> => {
    const connection = connectionFor(event);
    const { accessToken } = await parseHttpRequest('invalidate', event);
    return json(
      200,
      await broker.invalidate(
        connection.name,
        accessToken,
        callerOf(event),
        deadlineOf(broker, context),
      ),
    );
  };

  const router = httpRouterHandler({
    routes: [
      {
        method: 'GET',
        path: '/health',
        handler: async (event: HttpEvent) => {
          await parseHttpRequest('health', event);
          const callerArn = event.requestContext.authorizer?.iam?.userArn;
          return json(200, { status: 'ok', connections: visibleTo(callerArn) });
        },
      },
      { method: 'GET', path: '/tokens/{connection}', handler: getToken },
      {
        method: 'GET',
        path: '/status',
        handler: async (event: HttpEvent, context: Context) => {
          await parseHttpRequest('status', event);
          operatorOnly(event);
          return json(200, { connections: await broker.status(deadlineOf(broker, context)) });
        },
      },
      {
        method: 'GET',
        path: '/ready',
        handler: async (event: HttpEvent, context: Context) => {
          await parseHttpRequest('ready', event);
          operatorOnly(event);
          const report = await broker.ready(deadlineOf(broker, context));
          // 503 while any connection is not ready: a deploy pipeline or probe can gate on it.
          return json(report.ready ? 200 : 503, report);
        },
      },
      {
        method: 'POST',
        path: '/warm',
        handler: async (event: HttpEvent, context: Context) => {
          await parseHttpRequest('warmUp', event);
          operatorOnly(event);
          return json(200, await broker.warmUp(deadlineOf(broker, context), callerOf(event)));
        },
      },
      {
        method: 'POST',
        path: '/tokens/{connection}/invalidate',
        handler: middy(invalidate).use(httpJsonBodyParser()),
      },
    ],
    notFoundResponse: ({ method, path }: { method: string; path: string }) => {
      throw new RouteNotFoundError(`No route for ${method} ${loggedPath(path)}`);
    },
  });

  return middy<HttpEvent, HttpResult>()
    .use({
      before: ({ event, context }) => {
        gate(context);
        const size = event.body ? Buffer.byteLength(event.body) : 0;
        if (size > MAX_BODY_BYTES) {
          throw new BadRequestError(`Request body is larger than ${MAX_BODY_BYTES} bytes`);
        }
      },
    })
    .use(httpHeaderNormalizer())
    .use({
      onError: (request) => {
        const named = request.event.pathParameters?.connection;
        const { error, status, retryAfterSeconds } = answerFailure(request.error, {
          logger,
          metrics,
          requestId: request.context.awsRequestId,
          connection: named && broker.hasConnection(named) ? named : undefined,
          log: {
            route: `${request.event.requestContext?.http?.method} ${loggedPath(request.event.requestContext?.http?.path)}`,
          },
        });
        request.response = json(
          status,
          { error: errorBody(error) },
          retryAfterSeconds === undefined ? {} : { 'retry-after': String(retryAfterSeconds) },
        );
      },
    })
    .handler(router);
};
