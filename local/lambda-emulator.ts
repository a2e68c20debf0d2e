/**
 * Runs a Lambda handler the way the Lambda service would for our three kinds of caller:
 * - HTTP requests become API Gateway HTTP API events (payload format 2.0, IAM authorizer);
 * - `POST /2015-03-31/functions/{name}/invocations` is the Lambda Invoke API, so
 *   `@aws-sdk/client-lambda` and `aws lambda invoke --endpoint-url` work against it;
 * - `scheduledEvent()` is the EventBridge "Scheduled Event".
 * Each invocation gets a context whose deadline is real: a handler that overruns gets the
 * "Task timed out" error Lambda would report.
 */
import { randomUUID } from 'node:crypto';
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import type {
  APIGatewayProxyEventV2WithIAMAuthorizer,
  APIGatewayProxyStructuredResultV2,
  Context,
  ScheduledEvent,
} from 'aws-lambda';

export type LambdaHandler = (event: unknown, context: Context) => Promise<unknown>;

export type InvokeOutcome =
  | { readonly ok: true; readonly result: unknown }
  | { readonly ok: false; readonly errorType: string; readonly errorMessage: string };

export interface LambdaSettings {
  readonly functionName: string;
  readonly timeoutMs: number;
  readonly region: string;
  readonly accountId: string;
}

export const DEFAULT_LAMBDA: LambdaSettings = {
  functionName: 'token-broker',
  timeoutMs: 10_000,
  region: 'us-east-1',
  accountId: '000000000000',
};

export const createContext = (settings: LambdaSettings = DEFAULT_LAMBDA): Context => {
  const deadline = Date.now() + settings.timeoutMs;
  const requestId = randomUUID();
  return {
    callbackWaitsForEmptyEventLoop: true,
    functionName: settings.functionName,
    functionVersion: '$LATEST',
    invokedFunctionArn: `arn:aws:lambda:${settings.region}:${settings.accountId}:function:${settings.functionName}`,
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

/** Invokes like Lambda: a thrown error becomes `{ errorType, errorMessage }`. */
export const invokeHandler = async (
  handler: LambdaHandler,
  event: unknown,
  settings: LambdaSettings = DEFAULT_LAMBDA,
): Promise<InvokeOutcome> => {
  const context = createContext(settings);
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<InvokeOutcome>((resolve) => {
    timer = setTimeout(
      () =>
        resolve({
          ok: false,
          errorType: 'Sandbox.Timedout',
          errorMessage: `Task timed out after ${(settings.timeoutMs / 1000).toFixed(2)} seconds`,
        }),
      settings.timeoutMs,
    );
  });
  // What Lambda delivers: the JSON payload, or null for an empty one.
  const payload = event === undefined ? null : JSON.parse(JSON.stringify(event));
  const run = handler(payload, context).then(
    (result): InvokeOutcome => ({ ok: true, result }),
    (error: unknown): InvokeOutcome => ({
      ok: false,
      errorType: error instanceof Error ? error.name : 'Error',
      errorMessage: error instanceof Error ? error.message : String(error),
    }),
  );
  try {
    return await Promise.race([run, timeout]);
  } finally {
    clearTimeout(timer);
  }
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

const readBody = async (req: IncomingMessage, limit: number): Promise<string | undefined> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    // Let the handler see an oversized body (it refuses it), without buffering megabytes.
    if (size > limit) return 'x'.repeat(limit + 1);
    chunks.push(chunk as Buffer);
  }
  return size === 0 ? undefined : Buffer.concat(chunks).toString('utf8');
};

export interface LocalLambdaServer {
  readonly url: string;
  close(): Promise<void>;
}

const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/;

/** Serves the handler over HTTP: the broker's routes plus the Lambda Invoke API. */
export const startLambdaServer = async (
  handler: LambdaHandler,
  { host = '127.0.0.1', port = 0, settings = DEFAULT_LAMBDA } = {},
): Promise<LocalLambdaServer> => {
  const respond = (
    res: ServerResponse,
    status: number,
    headers: Record<string, string>,
    body: string,
  ) => {
    res.writeHead(status, headers);
    res.end(body);
  };
  const server = createServer((req, res) => {
    (async () => {
      const body = await readBody(req, 1024 * 1024);
      const path = (req.url ?? '/').split('?')[0] ?? '/';
      const invoke = req.method === 'POST' ? INVOKE_PATH.exec(path) : null;
      if (invoke) {
        let event: unknown = {};
        try {
          event = body ? JSON.parse(body) : {};
        } catch {
          return respond(
            res,
            400,
            { 'content-type': 'application/json' },
            JSON.stringify({ Type: 'User', message: 'Could not parse request body into json' }),
          );
        }
        const asyncInvoke = req.headers['x-amz-invocation-type'] === 'Event';
        const outcome = invokeHandler(handler, event, settings);
        if (asyncInvoke) return respond(res, 202, {}, '');
        const result = await outcome;
        if (result.ok)
          return respond(
            res,
            200,
            { 'content-type': 'application/json' },
            JSON.stringify(result.result ?? null),
          );
        return respond(
          res,
          200,
          { 'content-type': 'application/json', 'x-amz-function-error': 'Unhandled' },
          JSON.stringify({ errorType: result.errorType, errorMessage: result.errorMessage }),
        );
      }
      const callerArn = req.headers['x-local-caller-arn'];
      const event = httpEvent(
        {
          method: req.method ?? 'GET',
          url: req.url ?? '/',
          headers: req.headers,
          ...(body === undefined ? {} : { body }),
          ...(typeof callerArn === 'string' ? { callerArn } : {}),
        },
        settings,
      );
      const response = httpResponse(await invokeHandler(handler, event, settings));
      return respond(res, response.status, response.headers, response.body);
    })().catch(() =>
      respond(
        res,
        500,
        { 'content-type': 'application/json' },
        '{"message":"Internal Server Error"}',
      ),
    );
  });
  await new Promise<void>((resolve) => server.listen(port, host, resolve));
  const address = server.address() as AddressInfo;
  return {
    url: `http://${host}:${address.port}`,
    close: () =>
      new Promise<void>((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
};
