/**
 * Running a handler the way Lambda does, and the Lambda Invoke API in front of it
 * (`POST /2015-03-31/functions/{name}/invocations`), so that `@aws-sdk/client-lambda` and
 * `aws lambda invoke --endpoint-url` get the answers real Lambda gives:
 *
 * - the function name is checked (name, `name:$LATEST`, full or partial ARN, `?Qualifier=`):
 *   anything else is 404 `ResourceNotFoundException`; the function's `invokedFunctionArn`
 *   carries the qualifier named, as in Lambda;
 * - `X-Amz-Invocation-Type`: `RequestResponse` (200), `Event` (202, runs in the background),
 *   `DryRun` (204, runs nothing);
 * - a failed function answers 200 with `X-Amz-Function-Error: Unhandled` and
 *   `{ errorType, errorMessage }`; every run answers `X-Amz-Executed-Version: $LATEST`;
 * - `X-Amz-Log-Type: Tail` adds `X-Amz-Log-Result`: the base64 of the last 4 KB of that
 *   invocation's log (START, its own lines, END, REPORT);
 * - a body that is not JSON is 400 `InvalidRequestContentException`; over 6 MB, 413.
 * Each invocation's deadline is real: a handler that overruns gets "Task timed out" (from the
 * execution environment, when `timedByEnvironment` says one times it).
 */
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomUUID } from 'node:crypto';
import { setTimeout as sleep } from 'node:timers/promises';
import {
  createContext,
  DEFAULT_LAMBDA,
  type InvokeOutcome,
  type LambdaHandler,
  type LambdaSettings,
} from './lambda-events.js';

/** Lambda's limit on a synchronous request payload. */
export const MAX_INVOKE_PAYLOAD_BYTES = 6 * 1024 * 1024;
/** `X-Amz-Log-Result` carries at most the last 4 KB of the log. */
const TAIL_BYTES = 4096;

// Every line written to stdout/stderr while an invocation runs is also kept for that invocation:
// AsyncLocalStorage follows the handler's own async work, so concurrent invocations do not mix.
const invocationLog = new AsyncLocalStorage<string[]>();
let capturing = false;
const captureOutput = () => {
  if (capturing) return;
  capturing = true;
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream) as (...args: unknown[]) => boolean;
    stream.write = ((chunk: unknown, ...rest: unknown[]) => {
      invocationLog
        .getStore()
        ?.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk as Uint8Array).toString());
      return write(chunk, ...rest);
    }) as typeof stream.write;
  }
};

export interface Invocation {
  readonly outcome: InvokeOutcome;
  readonly requestId: string;
  /** The invocation's log as Lambda's `Tail` shows it (only when asked for). */
  readonly log?: string;
}

/** How one invocation is made. */
export interface InvocationOptions {
  /** Keep the invocation's log, as `X-Amz-Log-Type: Tail` asks. */
  readonly tail?: boolean;
  /** The qualifier invoked (`invokedFunctionArn`'s last part); none: unqualified. */
  readonly qualifier?: string | undefined;
}

/** Invokes like Lambda: a thrown error becomes `{ errorType, errorMessage }`. */
export const runInvocation = async (
  handler: LambdaHandler,
  event: unknown,
  settings: LambdaSettings = DEFAULT_LAMBDA,
  { tail = false, qualifier }: InvocationOptions = {},
): Promise<Invocation> => {
  const requestId = randomUUID();
  const context = createContext(settings, requestId, qualifier);
  const lines: string[] = [];
  const started = performance.now();
  if (tail) captureOutput();
  // What Lambda delivers: the JSON payload, or null for an empty one.
  const payload = event === undefined ? null : JSON.parse(JSON.stringify(event));
  const run = invocationLog.run(lines, () =>
    handler(payload, context).then(
      (result): InvokeOutcome => ({ ok: true, result }),
      (error: unknown): InvokeOutcome => ({
        ok: false,
        errorType: error instanceof Error ? error.name : 'Error',
        errorMessage: error instanceof Error ? error.message : String(error),
      }),
    ),
  );
  const stop = new AbortController();
  const timedOut: InvokeOutcome = {
    ok: false,
    errorType: 'Sandbox.Timedout',
    errorMessage: `Task timed out after ${(settings.timeoutMs / 1000).toFixed(2)} seconds`,
  };
  let outcome: InvokeOutcome;
  try {
    outcome = settings.timedByEnvironment
      ? await run
      : await Promise.race([
          run,
          sleep(settings.timeoutMs, timedOut, { signal: stop.signal }).catch(() => timedOut),
        ]);
  } finally {
    stop.abort();
  }
  if (!tail) return { outcome, requestId };
  const duration = performance.now() - started;
  const log = [
    `START RequestId: ${requestId} Version: $LATEST\n`,
    ...lines,
    `END RequestId: ${requestId}\n`,
    `REPORT RequestId: ${requestId}\tDuration: ${duration.toFixed(2)} ms\tBilled Duration: ${Math.ceil(duration)} ms\tMemory Size: 256 MB\tMax Memory Used: ${Math.round(process.memoryUsage().rss / 2 ** 20)} MB\t\n`,
  ].join('');
  return { outcome, requestId, log };
};

/** Invokes like Lambda (through `options.qualifier`, when given) and returns only the outcome. */
export const invokeHandler = async (
  handler: LambdaHandler,
  event: unknown,
  settings: LambdaSettings = DEFAULT_LAMBDA,
  options: Pick<InvocationOptions, 'qualifier'> = {},
): Promise<InvokeOutcome> => (await runInvocation(handler, event, settings, options)).outcome;

/** The last 4 KB of a log, base64, as `X-Amz-Log-Result` carries it. */
export const logResult = (log: string): string =>
  Buffer.from(log, 'utf8').subarray(-TAIL_BYTES).toString('base64');

export const INVOKE_PATH = /^\/2015-03-31\/functions\/([^/]+)\/invocations$/;

export interface InvokeRequest {
  /** The `{name}` path segment, still URL-encoded. */
  readonly functionName: string;
  readonly query: URLSearchParams;
  readonly headers: Readonly<Record<string, string | string[] | undefined>>;
  readonly body: Buffer;
}

export interface InvokeResponse {
  readonly status: number;
  readonly headers: Record<string, string>;
  readonly body: string;
}

const header = (request: InvokeRequest, name: string): string | undefined => {
  const value = request.headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/** A Lambda service error: `x-amzn-ErrorType` is what the SDK and the CLI read. */
const serviceError = (status: number, type: string, message: string): InvokeResponse => ({
  status,
  headers: {
    'content-type': 'application/json',
    'x-amzn-errortype': type,
    'x-amzn-requestid': randomUUID(),
  },
  body: JSON.stringify({ Type: 'User', message }),
});

/** Which function and version a name, `name:qualifier`, or (partial) ARN designates. */
const target = (name: string, qualifier: string | null, settings: LambdaSettings) => {
  const match =
    /^(?:arn:aws:lambda:([a-z0-9-]+):(\d{12}):function:|(\d{12}):function:)?([^:]+)(?::([^:]+))?$/.exec(
      name,
    );
  const [, region, account, partialAccount, functionName, inlineQualifier] = match ?? [];
  const version = inlineQualifier ?? qualifier ?? '$LATEST';
  const found =
    match !== null &&
    functionName === settings.functionName &&
    (region === undefined || region === settings.region) &&
    (account ?? partialAccount ?? settings.accountId) === settings.accountId &&
    version === '$LATEST' &&
    (inlineQualifier === undefined || qualifier === null || qualifier === inlineQualifier);
  return { found, name, qualifier: inlineQualifier ?? qualifier ?? undefined };
};

/**
 * The ARN a refused name stands for, as Lambda names it in its error: a full ARN as given; a
 * name or partial ARN (`123456789012:function:name`) completed with this region and account, its
 * qualifier the inline one, else the `Qualifier` parameter's (never both).
 */
const shownArn = (name: string, given: string | null, settings: LambdaSettings): string => {
  // Lambda's own limit on a qualifier; longer is never ours, and is not echoed whole.
  const qualifier = given?.slice(0, 128) ?? null;
  if (name.startsWith('arn:')) {
    // arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]: seven parts, or eight.
    return name.split(':').length === 7 && qualifier !== null ? `${name}:${qualifier}` : name;
  }
  const partial = /^(\d{12}):function:(.*)$/.exec(name);
  const account = partial?.[1] ?? settings.accountId;
  const rest = partial?.[2] ?? name;
  const suffix = rest.includes(':') || qualifier === null ? '' : `:${qualifier}`;
  return `arn:aws:lambda:${settings.region}:${account}:function:${rest}${suffix}`;
};

/** The Lambda Invoke API for one function. */
export const createInvokeApi =
  (handler: LambdaHandler, settings: LambdaSettings = DEFAULT_LAMBDA) =>
  async (request: InvokeRequest): Promise<InvokeResponse> => {
    let name: string;
    try {
      name = decodeURIComponent(request.functionName);
    } catch {
      name = request.functionName;
    }
    // Lambda's own limit on a function name or ARN; longer is never ours, and is not echoed.
    name = name.slice(0, 170);
    const { found, qualifier } = target(name, request.query.get('Qualifier'), settings);
    if (!found) {
      return serviceError(
        404,
        'ResourceNotFoundException',
        `Function not found: ${shownArn(name, request.query.get('Qualifier'), settings)}`,
      );
    }
    const invocationType = header(request, 'x-amz-invocation-type') ?? 'RequestResponse';
    if (!['RequestResponse', 'Event', 'DryRun'].includes(invocationType)) {
      return serviceError(
        400,
        'InvalidParameterValueException',
        `Unsupported invocation type: ${invocationType.slice(0, 50)}`,
      );
    }
    const logType = header(request, 'x-amz-log-type') ?? 'None';
    if (logType !== 'None' && logType !== 'Tail') {
      return serviceError(
        400,
        'InvalidParameterValueException',
        `Unsupported log type: ${logType.slice(0, 50)}`,
      );
    }
    if (request.body.length > MAX_INVOKE_PAYLOAD_BYTES) {
      return serviceError(
        413,
        'RequestTooLargeException',
        `Request must be smaller than ${MAX_INVOKE_PAYLOAD_BYTES} bytes for the InvokeFunction operation`,
      );
    }
    let event: unknown;
    try {
      const text = request.body.toString('utf8');
      // An empty payload is delivered as `{}`, as the AWS CLI's invoke without --payload.
      event = text.trim() === '' ? {} : JSON.parse(text);
    } catch {
      // Not the parser's message: it quotes the payload, which may hold a token.
      return serviceError(
        400,
        'InvalidRequestContentException',
        'Could not parse request body into json: the payload is not valid JSON',
      );
    }
    if (invocationType === 'DryRun') {
      return { status: 204, headers: { 'x-amzn-requestid': randomUUID() }, body: '' };
    }
    if (invocationType === 'Event') {
      // Lambda queues the event and answers at once; the outcome only reaches the logs.
      void runInvocation(handler, event, settings, { qualifier });
      return { status: 202, headers: { 'x-amzn-requestid': randomUUID() }, body: '' };
    }
    const { outcome, requestId, log } = await runInvocation(handler, event, settings, {
      tail: logType === 'Tail',
      qualifier,
    });
    const headers: Record<string, string> = {
      'content-type': 'application/json',
      'x-amzn-requestid': requestId,
      'x-amz-executed-version': '$LATEST',
      ...(log === undefined ? {} : { 'x-amz-log-result': logResult(log) }),
    };
    if (outcome.ok) {
      return { status: 200, headers, body: JSON.stringify(outcome.result ?? null) };
    }
    return {
      status: 200,
      headers: { ...headers, 'x-amz-function-error': 'Unhandled' },
      body: JSON.stringify({ errorType: outcome.errorType, errorMessage: outcome.errorMessage }),
    };
  };
