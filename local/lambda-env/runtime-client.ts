/**
 * What a runtime process needs of the Runtime API (`AWS_LAMBDA_RUNTIME_API`): one call per
 * connection over node:http, with no timeout (the `next` long poll may wait for minutes), and
 * errors said as the Node.js runtime says them; the init (the bundle imported, or its failure
 * posted) and the answer to one invocation. Used by both runtimes: Lambda's (bootstrap.ts) and
 * Lambda Managed Instances' (managed-bootstrap.ts).
 */
import { type IncomingHttpHeaders, request } from 'node:http';
import { pathToFileURL } from 'node:url';
import { createContext, DEFAULT_LAMBDA, type LambdaHandler } from '../lambda-events.js';

const RUNTIME = '/2018-06-01/runtime';

export interface Reply {
  readonly status: number;
  readonly headers: IncomingHttpHeaders;
  readonly body: string;
}

/** A caller of the Runtime API at `api` (`host:port`): each call on a new connection. */
type RuntimeCall = ReturnType<typeof runtimeCall>;
const runtimeCall = (api: string) => {
  const endpoint = new URL(`http://${api}`);
  return (
    method: 'GET' | 'POST',
    path: string,
    body?: string,
    headers: Record<string, string> = {},
  ): Promise<Reply> =>
    new Promise((resolve, reject) => {
      const req = request(
        {
          host: endpoint.hostname,
          port: endpoint.port,
          method,
          path,
          agent: false,
          headers: {
            ...headers,
            ...(body === undefined ? {} : { 'content-type': 'application/json' }),
          },
        },
        (res) => {
          let text = '';
          res.setEncoding('utf8');
          res.on('data', (chunk: string) => {
            text += chunk;
          });
          res.on('end', () =>
            resolve({ status: res.statusCode ?? 0, headers: res.headers, body: text }),
          );
          res.on('error', reject);
        },
      );
      req.on('error', reject);
      req.end(body);
    });
};

export const oneHeader = (value: string | string[] | undefined): string =>
  (Array.isArray(value) ? value[0] : value) ?? '';

/** How the Node.js runtime reports an error: its name as `errorType`, the stack as `trace`. */
export const describeError = (error: unknown, errorType?: string) => {
  const isError = error instanceof Error;
  return {
    errorType: errorType ?? (isError ? error.name : 'Error'),
    errorMessage: isError ? error.message : String(error),
    trace: isError ? (error.stack ?? '').split('\n') : [],
  };
};

/** The Node.js runtime's init error types for a module that cannot load. */
export const initErrorType = (error: unknown): string | undefined => {
  if (error instanceof SyntaxError) return 'Runtime.UserCodeSyntaxError';
  if ((error as { code?: unknown } | null)?.code === 'ERR_MODULE_NOT_FOUND') {
    return 'Runtime.ImportModuleError';
  }
  return undefined;
};

/** What a runtime posts: a result (JSON text), or an error as {@link describeError} says it. */
type Post = (path: string, payload: ReturnType<typeof describeError> | string) => Promise<void>;

/** Posts to the Runtime API; an answer that is not accepted is said on stderr. */
const runtimePost =
  (call: RuntimeCall): Post =>
  async (path, payload) => {
    const body = typeof payload === 'string' ? payload : JSON.stringify(payload);
    const headers: Record<string, string> =
      typeof payload === 'string'
        ? {}
        : { 'lambda-runtime-function-error-type': payload.errorType };
    const reply = await call('POST', path, body, headers);
    if (reply.status >= 300) {
      process.stderr.write(`runtime: ${path} answered ${reply.status} ${reply.body}\n`);
    }
  };

/**
 * Init: imports the bundle once and returns its `handler`; a bundle that cannot load, or has no
 * handler, is posted to `/runtime/init/error` and the process (or worker) exits 1.
 */
const loadHandler = async (
  bundle: string,
  handlerName: string,
  post: Post,
): Promise<LambdaHandler> => {
  try {
    const loaded = (await import(pathToFileURL(bundle).href)) as { handler?: unknown };
    if (typeof loaded.handler !== 'function') {
      const error = new Error(`${handlerName} is undefined or not exported`);
      error.name = 'Runtime.HandlerNotFound';
      throw error;
    }
    return loaded.handler as LambdaHandler;
  } catch (error) {
    await post(`${RUNTIME}/init/error`, describeError(error, initErrorType(error)));
    process.exit(1);
  }
};

/** The headers of an invocation that `next` handed over. */
export const invocationHeaders = (headers: IncomingHttpHeaders) => ({
  requestId: oneHeader(headers['lambda-runtime-aws-request-id']),
  deadlineMs: Number(oneHeader(headers['lambda-runtime-deadline-ms'])),
  invokedFunctionArn: oneHeader(headers['lambda-runtime-invoked-function-arn']),
  traceId: oneHeader(headers['lambda-runtime-trace-id']),
});

/** The function's configuration as its runtime read it from what Lambda set. */
export interface RuntimeSettings {
  readonly functionName: string;
  readonly functionVersion: string;
  /** AWS_LAMBDA_FUNCTION_MEMORY_SIZE, as set. */
  readonly memory: string;
  readonly region: string;
}

/** An invocation's Context, its account taken from the ARN it was invoked by. */
export const invocationContext = (
  settings: RuntimeSettings,
  { requestId, deadlineMs, invokedFunctionArn }: ReturnType<typeof invocationHeaders>,
) => ({
  ...createContext(
    {
      functionName: settings.functionName,
      timeoutMs: Math.max(0, deadlineMs - Date.now()),
      region: settings.region,
      accountId: invokedFunctionArn.split(':')[4] ?? DEFAULT_LAMBDA.accountId,
    },
    requestId,
  ),
  functionVersion: settings.functionVersion,
  invokedFunctionArn,
  memoryLimitInMB: settings.memory,
});

/** Runs one invocation and posts its result to `/response`, or what it threw to `/error`. */
const answerInvocation = async (
  post: Post,
  requestId: string,
  run: () => Promise<unknown>,
): Promise<void> => {
  let path: string;
  let payload: ReturnType<typeof describeError> | string;
  try {
    const result = await run();
    payload = JSON.stringify(result === undefined ? null : result);
    path = `${RUNTIME}/invocation/${requestId}/response`;
  } catch (error) {
    payload = describeError(error);
    path = `${RUNTIME}/invocation/${requestId}/error`;
  }
  await post(path, payload);
};

/** A runtime's client of the Runtime API at `api` (`host:port`). */
export const runtimeClient = (api: string) => {
  const call = runtimeCall(api);
  const post = runtimePost(call);
  return {
    /** `GET /runtime/invocation/next`: the long poll for the next invocation. */
    next: () => call('GET', `${RUNTIME}/invocation/next`),
    /** Init: see {@link loadHandler}. */
    loadHandler: (bundle: string, handlerName: string) => loadHandler(bundle, handlerName, post),
    /** See {@link answerInvocation}. */
    answer: (requestId: string, run: () => Promise<unknown>) =>
      answerInvocation(post, requestId, run),
  };
};
