/**
 * Serves a Lambda handler over HTTP on one port, as AWS would put it behind two doors:
 * - `POST /2015-03-31/functions/{name}/invocations` is the Lambda Invoke API (lambda-invoke.ts);
 * - every other request becomes an API Gateway HTTP API event (payload format 2.0) with an IAM
 *   authorizer, invoked through the URL's alias (`settings.urlQualifier`), as a Function URL's
 *   are. SigV4 is not checked here: the caller is whatever the `x-local-caller-arn` header says
 *   (default `arn:aws:iam::<account>:user/local-developer`).
 *
 * `localRoutes` adds `GET` routes of the local runtime itself under `/__local/` (the execution
 * environments, say): answered here with JSON, never sent to the function, and not in AWS.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { buffer } from 'node:stream/consumers';
import {
  DEFAULT_LAMBDA,
  httpEvent,
  httpResponse,
  type LambdaHandler,
  type LambdaSettings,
} from './lambda-events.js';
import {
  createInvokeApi,
  INVOKE_PATH,
  invokeHandler,
  MAX_INVOKE_PAYLOAD_BYTES,
} from './lambda-invoke.js';
import { serve as serveLoopback } from './loopback.js';

export interface LocalLambdaServer {
  readonly url: string;
  readonly port: number;
  close(): Promise<void>;
}

const respond = (
  res: ServerResponse,
  status: number,
  headers: Record<string, string>,
  body: string,
) => {
  res.writeHead(status, headers);
  res.end(body);
};

/** Paths of the local runtime's own routes: nothing the broker serves starts with it. */
export const LOCAL_ROUTE_PREFIX = '/__local/';

export interface LambdaServerOptions {
  readonly host?: string;
  readonly port?: number;
  readonly settings?: LambdaSettings;
  /** `GET` routes of the local runtime, by path (each under `/__local/`): their JSON answer. */
  readonly localRoutes?: Readonly<Record<string, () => unknown>>;
}

const tooLarge = (req: IncomingMessage) =>
  Number(req.headers['content-length'] ?? 0) > MAX_INVOKE_PAYLOAD_BYTES;

/** Serves the handler over HTTP: the broker's routes plus the Lambda Invoke API. */
export const startLambdaServer = async (
  handler: LambdaHandler,
  {
    host = '127.0.0.1',
    port = 0,
    settings = DEFAULT_LAMBDA,
    localRoutes = {},
  }: LambdaServerOptions = {},
): Promise<LocalLambdaServer> => {
  const invokeApi = createInvokeApi(handler, settings);
  // A Map, so that a path cannot reach an object's prototype members.
  const local = new Map(Object.entries(localRoutes));
  for (const path of local.keys()) {
    if (!path.startsWith(LOCAL_ROUTE_PREFIX)) {
      throw new TypeError(
        `startLambdaServer: local route '${path}' is not under ${LOCAL_ROUTE_PREFIX}`,
      );
    }
  }

  const serve = async (req: IncomingMessage, res: ServerResponse) => {
    const url = new URL(req.url ?? '/', 'http://local');
    const invoke = req.method === 'POST' ? INVOKE_PATH.exec(url.pathname) : null;
    // Both AWS doors refuse payloads over 6 MB before the function sees them.
    if (tooLarge(req)) {
      req.resume();
      return invoke
        ? respond(
            res,
            413,
            {
              'content-type': 'application/json',
              'x-amzn-errortype': 'RequestTooLargeException',
            },
            JSON.stringify({ Type: 'User', message: 'Request must be smaller than 6291456 bytes' }),
          )
        : respond(
            res,
            413,
            { 'content-type': 'application/json' },
            '{"message":"Request Entity Too Large"}',
          );
    }
    const route = req.method === 'GET' ? local.get(url.pathname) : undefined;
    if (route) {
      req.resume();
      return respond(
        res,
        200,
        { 'content-type': 'application/json' },
        `${JSON.stringify(route(), null, 2)}\n`,
      );
    }
    const body = await buffer(req);
    if (invoke) {
      const answer = await invokeApi({
        functionName: invoke[1] ?? '',
        query: url.searchParams,
        headers: req.headers,
        body,
      });
      return respond(res, answer.status, answer.headers, answer.body);
    }
    const callerArn = req.headers['x-local-caller-arn'];
    const event = httpEvent(
      {
        method: req.method ?? 'GET',
        url: req.url ?? '/',
        headers: req.headers,
        ...(body.length === 0 ? {} : { body: body.toString('utf8') }),
        ...(typeof callerArn === 'string' ? { callerArn } : {}),
      },
      settings,
    );
    // Through the URL's alias, as AWS invokes a Function URL's qualifier (issue 37).
    const response = httpResponse(
      await invokeHandler(handler, event, settings, { qualifier: settings.urlQualifier }),
    );
    return respond(res, response.status, response.headers, response.body);
  };

  const server = await serveLoopback(serve, {
    host,
    port,
    onError: (res) =>
      respond(
        res,
        500,
        { 'content-type': 'application/json' },
        '{"message":"Internal Server Error"}',
      ),
  });
  return { url: server.url, port: server.port, close: server.close };
};
