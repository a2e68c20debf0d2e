/**
 * What Lambda hands a function: the context object, the API Gateway HTTP API event (payload
 * format 2.0, IAM authorizer) for an HTTP request, the EventBridge "Scheduled Event", and how
 * API Gateway turns a v2 result back into an HTTP response. Pure data: no server, no running.
 * lambda-invoke.ts runs a handler like Lambda; lambda-server.ts serves it over HTTP.
 */
import { randomUUID } from 'node:crypto';
import type {
  APIGatewayProxyEventV2WithIAMAuthorizer,
  APIGatewayProxyStructuredResultV2,
  Context,
  ScheduledEvent,
} from 'aws-lambda';

export type LambdaHandler = (event: unknown, context: Context) => Promise<unknown>;

/** What one invocation came to: the result, or the error as Lambda reports it. */
export type InvokeOutcome =
  | { readonly ok: true; readonly result: unknown }
  | { readonly ok: false; readonly errorType: string; readonly errorMessage: string };

export interface LambdaSettings {
  readonly functionName: string;
  readonly timeoutMs: number;
  /**
   * The handler runs the function in an execution environment (`local/lambda-env/`) that
   * enforces `timeoutMs` itself, from the invocation's delivery, as Lambda does: a cold start's
   * init and a wait for a free environment do not count. The server then adds no timer of its
   * own, which would count them and answer "Task timed out" for a handler still in its time.
   */
  readonly timedByEnvironment?: boolean;
  readonly region: string;
  readonly accountId: string;
  /**
   * The alias the Function URL serves (the stack's `url`): an HTTP request is invoked through
   * it, as AWS invokes the URL's qualifier; a direct invoke through what its caller named.
   */
  readonly urlQualifier?: string;
}

export const DEFAULT_LAMBDA: LambdaSettings = {
  functionName: 'token-broker',
  timeoutMs: 10_000,
  region: 'us-east-1',
  accountId: '000000000000',
  urlQualifier: 'url',
};

/**
 * The settings with the URL's alias the function is told (`BROKER_URL_QUALIFIER` of its
 * environment), so that the local Function URL invokes the alias the function trusts.
 */
export const withUrlQualifierOf = (
  settings: LambdaSettings,
  env: Readonly<Record<string, string | undefined>>,
): LambdaSettings => {
  const named = env.BROKER_URL_QUALIFIER?.trim();
  return named ? { ...settings, urlQualifier: named } : settings;
};

/** The function's ARN, with `:<qualifier>` when one was invoked (as `invokedFunctionArn`). */
export const functionArn = (settings: LambdaSettings, qualifier?: string): string =>
  `arn:aws:lambda:${settings.region}:${settings.accountId}:function:${settings.functionName}${qualifier === undefined ? '' : `:${qualifier}`}`;

/**
 * What Lambda hands the handler with each event. `qualifier`: the alias (or version, or
 * `$LATEST`) the invoker named, which `invokedFunctionArn` carries; none: invoked unqualified.
 */
export const createContext = (
  settings: LambdaSettings = DEFAULT_LAMBDA,
  requestId: string = randomUUID(),
  qualifier?: string,
): Context => {
  const deadline = Date.now() + settings.timeoutMs;
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: settings.functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: functionArn(settings, qualifier),
    memoryLimitInMB: '256',
    awsRequestId: requestId,
    logGroupName: `/aws/lambda/${settings.functionName}`,
    logStreamName: `local/${requestId}`,
    getRemainingTimeInMillis: () => Math.max(0, deadline - Date.now()),
    done: () => undefined,
    fail: () => undefined,
    succeed: () => undefined,
  };
};

export const scheduledEvent = (settings: LambdaSettings = DEFAULT_LAMBDA): ScheduledEvent => ({
  version: '0',
  id: randomUUID(),
  'detail-type': 'Scheduled Event',
  source: 'aws.events',
  account: settings.accountId,
  time: new Date().toISOString(),
  region: settings.region,
  resources: [`arn:aws:events:${settings.region}:${settings.accountId}:rule/token-broker-warmup`],
  detail: {},
});

export interface HttpRequestShape {
  readonly method: string;
  /** Path and query, as on the wire. */
  readonly url: string;
  readonly headers?: Readonly<Record<string, string | string[] | undefined>>;
  readonly body?: string;
  /** `requestContext.authorizer.iam.userArn`, as API Gateway fills it after SigV4 auth. */
  readonly callerArn?: string;
  readonly sourceIp?: string;
}

/** An API Gateway HTTP API (payload format 2.0) event with an IAM authorizer. */
export const httpEvent = (
  request: HttpRequestShape,
  settings: LambdaSettings = DEFAULT_LAMBDA,
): APIGatewayProxyEventV2WithIAMAuthorizer => {
  // Split by hand: `new URL` would read a path such as `//x` as a host, which API Gateway does not.
  const queryAt = request.url.indexOf('?');
  const rawPath = (queryAt < 0 ? request.url : request.url.slice(0, queryAt)) || '/';
  const rawQuery = queryAt < 0 ? '' : request.url.slice(queryAt + 1);
  const headers: Record<string, string> = {};
  for (const [name, value] of Object.entries(request.headers ?? {})) {
    if (value !== undefined)
      headers[name.toLowerCase()] = Array.isArray(value) ? value.join(',') : value;
  }
  const query: Record<string, string> = {};
  for (const [name, value] of new URLSearchParams(rawQuery)) {
    query[name] = query[name] === undefined ? value : `${query[name]},${value}`;
  }
  const callerArn = request.callerArn ?? `arn:aws:iam::${settings.accountId}:user/local-developer`;
  const now = Date.now();
  return {
    version: '2.0',
    routeKey: '$default',
    rawPath,
    rawQueryString: rawQuery,
    headers,
    ...(Object.keys(query).length > 0 ? { queryStringParameters: query } : {}),
    requestContext: {
      accountId: settings.accountId,
      apiId: 'local',
      domainName: headers.host ?? 'localhost',
      domainPrefix: 'local',
      http: {
        method: request.method.toUpperCase(),
        path: rawPath,
        protocol: 'HTTP/1.1',
        sourceIp: request.sourceIp ?? '127.0.0.1',
        userAgent: headers['user-agent'] ?? '',
      },
      requestId: randomUUID(),
      routeKey: '$default',
      stage: '$default',
      time: new Date(now).toUTCString(),
      timeEpoch: now,
      authorizer: {
        iam: {
          accessKey: 'ASIALOCAL',
          accountId: settings.accountId,
          callerId: 'AIDALOCAL',
          cognitoIdentity: null,
          // API Gateway sends null here; the community types say string.
          principalOrgId: null as unknown as string,
          userArn: callerArn,
          userId: 'AIDALOCAL',
        },
      },
    },
    ...(request.body ? { body: request.body } : {}),
    isBase64Encoded: false,
  };
};

/** A v2 result as API Gateway turns it into an HTTP response. */
export const httpResponse = (outcome: InvokeOutcome) => {
  if (!outcome.ok) {
    // API Gateway answers 500 "Internal Server Error" when the function itself fails.
    return {
      status: 500,
      headers: { 'content-type': 'application/json' },
      body: '{"message":"Internal Server Error"}',
    };
  }
  const result = outcome.result as APIGatewayProxyStructuredResultV2 | string | undefined;
  if (typeof result !== 'object' || result === null || result.statusCode === undefined) {
    return {
      status: 200,
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify(result),
    };
  }
  return {
    status: result.statusCode,
    headers: Object.fromEntries(
      Object.entries(result.headers ?? {}).map(([k, v]) => [k, String(v)]),
    ) as Record<string, string>,
    body: result.body ?? '',
  };
};
