/**
 * The Lambda Runtime API (2018-06-01) and Extensions API (2020-01-01) of one execution
 * environment, on 127.0.0.1, port 0: what its runtime and internal extensions reach through
 * `AWS_LAMBDA_RUNTIME_API`. This module keeps the protocol's state and tells its owner
 * (environment.ts) when that state changes; it never touches the process.
 *
 * Followed from AWS's reference, the "Lambda Extensions API" and "AWS Lambda runtime API"
 * pages of the Lambda Developer Guide (docs.aws.amazon.com/lambda/latest/dg/runtimes-extensions-api.html,
 * runtimes-api.html), and for status codes and error types the Runtime Interface Emulator that
 * AWS publishes (github.com/aws/aws-lambda-runtime-interface-emulator, internal/lambda/rapi):
 * - registration is open until the runtime first asks for an invocation; after that, register
 *   is 403 `Extension.RegistrationClosed`;
 * - every extension here is internal (it runs in the runtime's process), and "internal
 *   extensions are started and stopped by the runtime process, so they are not permitted to
 *   register for the Shutdown event": 403 `Extension.InvalidEventType`;
 * - at most 10 extensions; a name registers once;
 * - init ends, and an invocation ends, when the runtime and every registered extension are
 *   waiting on their `next`: that is when Lambda freezes the environment;
 * - an extension's INVOKE event carries `deadlineMs` (epoch ms), `requestId`,
 *   `invokedFunctionArn` and `tracing`, with a `Lambda-Extension-Event-Identifier` header;
 *   extensions that registered for no event wait on `next` until the environment ends;
 * - errors are `{ errorMessage, errorType }` with 403 (400 for a request ID that is not the
 *   current one); accepted posts answer 202 `{ "status": "OK" }`;
 * - after an extension's init/error or exit/error, none of its calls succeed.
 * A runtime response over Lambda's payload limit is 413 to the runtime and
 * `Function.ResponseSizeTooLarge` to the caller.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { InvokeOutcome } from '../lambda-events.js';
import { type LoopbackServer, serve } from '../loopback.js';

/** The most a runtime may answer: 6 MiB + 100 bytes, the emulator's `MaxPayloadSize`. */
export const MAX_RESPONSE_BYTES = 6 * 1024 * 1024 + 100;
/** The Extensions API's limit on extensions per function. */
export const MAX_EXTENSIONS = 10;

/** One invocation as the API hands it to the runtime and to the extensions. */
export interface Delivery {
  readonly requestId: string;
  /** When the invocation times out, in Unix epoch milliseconds. */
  readonly deadlineMs: number;
  readonly invokedFunctionArn: string;
  /** An X-Ray tracing header (`Root=…;Parent=…;Sampled=…`). */
  readonly traceId: string;
  /** The event, as JSON text. */
  readonly payload: string;
}

/** What register answers with (`handler` is `_HANDLER`, e.g. `index.handler`). */
export interface FunctionMetadata {
  readonly functionName: string;
  readonly functionVersion: string;
  readonly handler: string;
  readonly accountId: string;
}

export interface ApiEvents {
  /** The runtime and every registered extension now wait for their next event. */
  readonly onWaiting: () => void;
  /** The runtime answered the current invocation (a result, or a function error). */
  readonly onResponse: (requestId: string, outcome: InvokeOutcome) => void;
  /**
   * Something the environment cannot go on from: the runtime's init/error, or an extension's
   * init/error or exit/error (Lambda resets the environment after each).
   */
  readonly onFailure: (failure: {
    readonly errorType: string;
    readonly errorMessage: string;
  }) => void;
}

export interface RuntimeApiServer {
  /** `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`. */
  readonly address: string;
  /** True when the runtime and every registered extension wait for their next event. */
  waiting(): boolean;
  /** Hands an invocation to the waiting runtime, and INVOKE to the extensions registered for it. */
  deliver(delivery: Delivery): void;
  /** The extensions registered so far, by name. */
  extensions(): readonly string[];
  close(): Promise<void>;
}

/**
 * - `init`: has not asked for an invocation yet (registration is open);
 * - `waiting`: its `next` is pending;
 * - `invoking`: has an invocation and has not answered it;
 * - `answered`: has answered and not asked for the next one yet.
 */
type RuntimeState = 'init' | 'waiting' | 'invoking' | 'answered';

interface Extension {
  readonly id: string;
  readonly name: string;
  readonly invoke: boolean;
  /** `registered`: has not called next yet; `busy`: has an event; `failed`: reported an error. */
  state: 'registered' | 'waiting' | 'busy' | 'failed';
  pending?: ServerResponse | undefined;
}

const RUNTIME = '/2018-06-01/runtime';
const EXTENSION = '/2020-01-01/extension';
const INVOCATION = /^\/2018-06-01\/runtime\/invocation\/([^/]+)\/(response|error)$/;

const send = (
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};
const forbidden = (res: ServerResponse, errorType: string, errorMessage: string) =>
  send(res, 403, { errorMessage, errorType });
const accepted = (res: ServerResponse) => send(res, 202, { status: 'OK' });

const header = (req: IncomingMessage, name: string): string | undefined => {
  const value = req.headers[name];
  return Array.isArray(value) ? value[0] : value;
};

/** The body, or undefined when it is over `limit` bytes (the rest is read and dropped). */
const readBody = async (req: IncomingMessage, limit: number): Promise<Buffer | undefined> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size <= limit) chunks.push(chunk as Buffer);
  }
  return size > limit ? undefined : Buffer.concat(chunks);
};

/** `{ errorType, errorMessage }` from what the runtime posted, whatever its shape. */
const errorOutcome = (body: string, typeHeader: string | undefined): InvokeOutcome => {
  let parsed: unknown;
  try {
    parsed = JSON.parse(body);
  } catch {
    parsed = undefined;
  }
  const fields = (typeof parsed === 'object' && parsed !== null ? parsed : {}) as Record<
    string,
    unknown
  >;
  return {
    ok: false,
    errorType:
      typeof fields.errorType === 'string' ? fields.errorType : (typeHeader ?? 'Function.Unknown'),
    errorMessage: typeof fields.errorMessage === 'string' ? fields.errorMessage : body,
  };
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const startRuntimeApi = async (
  metadata: FunctionMetadata,
  events: ApiEvents,
): Promise<RuntimeApiServer> => {
  let runtime: RuntimeState = 'init';
  let runtimeNext: ServerResponse | undefined;
  let current: string | undefined;
  const extensions = new Map<string, Extension>();

  const waiting = () =>
    runtime === 'waiting' && [...extensions.values()].every((e) => e.state === 'waiting');
  const settled = () => {
    if (waiting()) events.onWaiting();
  };

  // A long poll whose client went away (the process ended) no longer counts as waiting.
  const holdUntilClosed = (res: ServerResponse, drop: () => void) =>
    res.once('close', () => {
      if (!res.writableEnded) drop();
    });

  const runtimeApi = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    if (req.method === 'GET' && path === `${RUNTIME}/invocation/next`) {
      if (runtime === 'waiting' || runtime === 'invoking') {
        return forbidden(
          res,
          'InvalidStateTransition',
          `State transition from ${runtime} to ready failed for runtime`,
        );
      }
      runtime = 'waiting';
      runtimeNext = res;
      holdUntilClosed(res, () => {
        runtimeNext = undefined;
      });
      return settled();
    }
    if (req.method === 'POST' && path === `${RUNTIME}/init/error`) {
      const body = ((await readBody(req, MAX_RESPONSE_BYTES)) ?? Buffer.alloc(0)).toString();
      if (runtime !== 'init') {
        return forbidden(
          res,
          'InvalidStateTransition',
          `State transition from ${runtime} to init error failed for runtime`,
        );
      }
      accepted(res);
      const outcome = errorOutcome(body, header(req, 'lambda-runtime-function-error-type'));
      if (!outcome.ok) events.onFailure(outcome);
      return;
    }
    const invocation = req.method === 'POST' ? INVOCATION.exec(path) : null;
    if (!invocation) return send(res, 404, { errorMessage: 'Not found', errorType: 'NotFound' });
    const [, requestId, kind] = invocation;
    const body = await readBody(req, MAX_RESPONSE_BYTES);
    if (requestId === undefined || requestId !== current) {
      return send(res, 400, { errorMessage: 'Invalid request ID', errorType: 'InvalidRequestID' });
    }
    if (runtime !== 'invoking') {
      return forbidden(
        res,
        'InvalidStateTransition',
        `State transition from ${runtime} to invocation ${kind} failed for runtime`,
      );
    }
    runtime = 'answered';
    if (body === undefined) {
      send(res, 413, {
        errorMessage: `Exceeded maximum allowed payload size (${MAX_RESPONSE_BYTES} bytes).`,
        errorType: 'RequestEntityTooLarge',
      });
      return events.onResponse(requestId, {
        ok: false,
        errorType: 'Function.ResponseSizeTooLarge',
        errorMessage: `Response payload size exceeded maximum allowed payload size (${MAX_RESPONSE_BYTES} bytes).`,
      });
    }
    accepted(res);
    const text = body.toString('utf8');
    if (kind === 'error') {
      return events.onResponse(
        requestId,
        errorOutcome(text, header(req, 'lambda-runtime-function-error-type')),
      );
    }
    let result: unknown;
    try {
      result = text === '' ? null : JSON.parse(text);
    } catch {
      // Lambda hands back whatever bytes the runtime posted; a string is the closest here.
      result = text;
    }
    events.onResponse(requestId, { ok: true, result });
  };

  /** The extension a request names, or undefined once it has answered the request itself. */
  const identify = (req: IncomingMessage, res: ServerResponse): Extension | undefined => {
    const id = header(req, 'lambda-extension-identifier');
    if (!id) {
      forbidden(
        res,
        'Extension.MissingExtensionIdentifier',
        'Missing Lambda-Extension-Identifier header',
      );
      return undefined;
    }
    if (!UUID.test(id)) {
      forbidden(res, 'Extension.InvalidExtensionIdentifier', 'Invalid Lambda-Extension-Identifier');
      return undefined;
    }
    const extension = extensions.get(id);
    if (!extension)
      forbidden(res, 'Extension.UnknownExtensionIdentifier', `Unknown extension ${id}`);
    return extension;
  };

  const invalidState = (res: ServerResponse, extension: Extension, to: string) =>
    forbidden(
      res,
      'Extension.InvalidExtensionState',
      `State transition from ${extension.state} to ${to} failed for extension ${extension.name}`,
    );

  const register = async (req: IncomingMessage, res: ServerResponse) => {
    const name = header(req, 'lambda-extension-name');
    const body = ((await readBody(req, 64 * 1024)) ?? Buffer.alloc(0)).toString('utf8');
    if (!name) return forbidden(res, 'Extension.InvalidExtensionName', 'Empty extension name');
    let requested: unknown;
    try {
      requested = (JSON.parse(body) as { events?: unknown }).events ?? [];
    } catch (error) {
      return forbidden(res, 'InvalidRequestFormat', (error as Error).message);
    }
    if (!Array.isArray(requested)) {
      return forbidden(res, 'InvalidRequestFormat', 'events must be an array of strings');
    }
    for (const event of requested) {
      if (event === 'SHUTDOWN') {
        return forbidden(
          res,
          'Extension.InvalidEventType',
          'SHUTDOWN: ShutdownEventNotSupportedForInternalExtension',
        );
      }
      if (event !== 'INVOKE') {
        return forbidden(
          res,
          'Extension.InvalidEventType',
          `${String(event)}: ErrorInvalidEventType`,
        );
      }
    }
    if (runtime !== 'init') {
      return forbidden(
        res,
        'Extension.RegistrationClosed',
        'Extension registration closed already',
      );
    }
    if (extensions.size >= MAX_EXTENSIONS) {
      return forbidden(
        res,
        'Extension.TooManyExtensions',
        `Extension limit (${MAX_EXTENSIONS}) reached`,
      );
    }
    if ([...extensions.values()].some((e) => e.name === name)) {
      return forbidden(
        res,
        'Extension.InvalidExtensionState',
        'Extension with this name already registered',
      );
    }
    const id = randomUUID();
    extensions.set(id, { id, name, invoke: requested.includes('INVOKE'), state: 'registered' });
    const accountId = (header(req, 'lambda-extension-accept-feature') ?? '')
      .split(',')
      .some((feature) => feature.trim() === 'accountId');
    send(
      res,
      200,
      {
        functionName: metadata.functionName,
        functionVersion: metadata.functionVersion,
        handler: metadata.handler,
        ...(accountId ? { accountId: metadata.accountId } : {}),
      },
      { 'lambda-extension-identifier': id },
    );
  };

  const extensionApi = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    if (req.method === 'POST' && path === `${EXTENSION}/register`) return register(req, res);
    const next = req.method === 'GET' && path === `${EXTENSION}/event/next`;
    const initError = req.method === 'POST' && path === `${EXTENSION}/init/error`;
    const exitError = req.method === 'POST' && path === `${EXTENSION}/exit/error`;
    if (!next && !initError && !exitError) {
      return send(res, 404, { errorMessage: 'Not found', errorType: 'NotFound' });
    }
    const body = ((await readBody(req, 64 * 1024)) ?? Buffer.alloc(0)).toString('utf8');
    const extension = identify(req, res);
    if (!extension) return;
    if (next) {
      if (extension.state === 'waiting' || extension.state === 'failed') {
        return invalidState(res, extension, 'ready');
      }
      extension.state = 'waiting';
      extension.pending = res;
      holdUntilClosed(res, () => {
        extension.pending = undefined;
      });
      return settled();
    }
    const errorType = header(req, 'lambda-extension-function-error-type');
    if (!errorType) {
      return forbidden(
        res,
        'Extension.MissingHeader',
        'Lambda-Extension-Function-Error-Type not found',
      );
    }
    // init/error only before the extension's first next; exit/error at any time until then.
    if (extension.state === 'failed' || (initError && extension.state !== 'registered')) {
      return invalidState(res, extension, initError ? 'init error' : 'exit error');
    }
    extension.state = 'failed';
    accepted(res);
    const reported = errorOutcome(body, errorType);
    events.onFailure({
      errorType: initError ? 'Extension.InitError' : 'Extension.ExitError',
      errorMessage: `Extension ${extension.name} reported ${errorType}${
        reported.ok || reported.errorMessage === body ? '' : `: ${reported.errorMessage}`
      }`,
    });
  };

  const server: LoopbackServer = await serve(
    async (req, res) => {
      const path = new URL(req.url ?? '/', 'http://local').pathname;
      if (path.startsWith(`${RUNTIME}/`)) return runtimeApi(req, res, path);
      if (path.startsWith(`${EXTENSION}/`)) return extensionApi(req, res, path);
      req.resume();
      send(res, 404, { errorMessage: 'Not found', errorType: 'NotFound' });
    },
    {
      onError: (res) =>
        send(res, 500, { errorMessage: 'Internal Server Error', errorType: 'InternalServerError' }),
    },
  );

  return {
    address: `${server.host}:${server.port}`,
    waiting,
    deliver: (delivery) => {
      const next = runtimeNext;
      if (!waiting() || !next) throw new Error('deliver: the environment is not waiting');
      runtime = 'invoking';
      runtimeNext = undefined;
      current = delivery.requestId;
      next.writeHead(200, {
        'content-type': 'application/json',
        'lambda-runtime-aws-request-id': delivery.requestId,
        'lambda-runtime-deadline-ms': String(delivery.deadlineMs),
        'lambda-runtime-invoked-function-arn': delivery.invokedFunctionArn,
        'lambda-runtime-trace-id': delivery.traceId,
      });
      next.end(delivery.payload);
      for (const extension of extensions.values()) {
        if (!extension.invoke || !extension.pending) continue;
        const pending = extension.pending;
        extension.pending = undefined;
        extension.state = 'busy';
        send(
          pending,
          200,
          {
            eventType: 'INVOKE',
            deadlineMs: delivery.deadlineMs,
            requestId: delivery.requestId,
            invokedFunctionArn: delivery.invokedFunctionArn,
            tracing: { type: 'X-Amzn-Trace-Id', value: delivery.traceId },
          },
          { 'lambda-extension-event-identifier': randomUUID() },
        );
      }
    },
    extensions: () => [...extensions.values()].map((e) => e.name),
    close: server.close,
  };
};
