/**
 * What the two Runtime and Extensions API servers share, whatever the execution model
 * (api-server.ts, Lambda's own; managed-api.ts, Lambda Managed Instances'): the paths, the
 * shapes of answers and errors, how a body is read, how a runtime's answer to an invocation is
 * taken, how a registration is checked and answered, how an invocation is handed to a runtime.
 * Status codes and error types as api-server.ts documents them. Which request is allowed when
 * is each server's own.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { InvokeOutcome } from '../lambda-events.js';
import { type LoopbackServer, serve } from '../loopback.js';

/** The most a runtime may answer: 6 MiB + 100 bytes, the emulator's `MaxPayloadSize`. */
const MAX_RESPONSE_BYTES = 6 * 1024 * 1024 + 100;
/** The Extensions API's limit on extensions per function. */
const MAX_EXTENSIONS = 10;
/** The most read of an extension's request body. */
const EXTENSION_BODY_BYTES = 64 * 1024;

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

/** What ends an environment: an init error, an extension's error. */
export interface ApiFailure {
  readonly errorType: string;
  readonly errorMessage: string;
}

/** What either server tells its environment, besides when it may deliver. */
export interface ApiEvents {
  /** The runtime answered an invocation (a result, or a function error). */
  readonly onResponse: (requestId: string, outcome: InvokeOutcome) => void;
  /** Something the environment cannot go on from (each server says what). */
  readonly onFailure: (failure: ApiFailure) => void;
}

/** Either server, besides how it delivers. */
export interface ApiServer {
  /** `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`. */
  readonly address: string;
  /** The extensions registered so far, by name. */
  extensions(): readonly string[];
  close(): Promise<void>;
}

export const RUNTIME = '/2018-06-01/runtime';
const EXTENSION = '/2020-01-01/extension';
const INVOCATION = /^\/2018-06-01\/runtime\/invocation\/([^/]+)\/(response|error)$/;

export const send = (
  res: ServerResponse,
  status: number,
  body: unknown,
  headers: Record<string, string> = {},
) => {
  res.writeHead(status, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
};
export const forbidden = (res: ServerResponse, errorType: string, errorMessage: string) =>
  send(res, 403, { errorMessage, errorType });
export const accepted = (res: ServerResponse) => send(res, 202, { status: 'OK' });
const notFound = (res: ServerResponse) =>
  send(res, 404, { errorMessage: 'Not found', errorType: 'NotFound' });
export const invalidRequestId = (res: ServerResponse) =>
  send(res, 400, { errorMessage: 'Invalid request ID', errorType: 'InvalidRequestID' });

export const header = (req: IncomingMessage, name: string): string | undefined => {
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

/** The body as text; empty when it is over `limit` bytes. */
const readText = async (req: IncomingMessage, limit: number): Promise<string> =>
  ((await readBody(req, limit)) ?? Buffer.alloc(0)).toString('utf8');

/** `{ errorType, errorMessage }` from what the runtime posted, whatever its shape. */
const errorOutcome = (
  body: string,
  typeHeader: string | undefined,
): ApiFailure & { readonly ok: false } => {
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

/** A runtime's `init/error`: its body read, the failure it reports. */
export const readInitError = async (req: IncomingMessage): Promise<ApiFailure> =>
  errorOutcome(
    await readText(req, MAX_RESPONSE_BYTES),
    header(req, 'lambda-runtime-function-error-type'),
  );

/** A runtime's post to `/invocation/{id}/response` or `/error`, its body read. */
export interface InvocationPost {
  readonly requestId: string;
  readonly kind: string;
  /** Undefined when it is over {@link MAX_RESPONSE_BYTES}. */
  readonly body: Buffer | undefined;
}

/** The invocation a post answers; undefined once it has answered 404 (no such path). */
export const readInvocationPost = async (
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
): Promise<InvocationPost | undefined> => {
  const invocation = req.method === 'POST' ? INVOCATION.exec(path) : null;
  if (!invocation) {
    notFound(res);
    return undefined;
  }
  const [, requestId = '', kind = ''] = invocation;
  return { requestId, kind, body: await readBody(req, MAX_RESPONSE_BYTES) };
};

/**
 * Takes a runtime's answer to a running invocation: 413 to the runtime and
 * `Function.ResponseSizeTooLarge` to the caller when it is too large, else 202 and the result
 * (JSON, or the text itself) or the function error.
 */
export const takeAnswer = (
  req: IncomingMessage,
  res: ServerResponse,
  { requestId, kind, body }: InvocationPost,
  onResponse: (requestId: string, outcome: InvokeOutcome) => void,
) => {
  if (body === undefined) {
    send(res, 413, {
      errorMessage: `Exceeded maximum allowed payload size (${MAX_RESPONSE_BYTES} bytes).`,
      errorType: 'RequestEntityTooLarge',
    });
    return onResponse(requestId, {
      ok: false,
      errorType: 'Function.ResponseSizeTooLarge',
      errorMessage: `Response payload size exceeded maximum allowed payload size (${MAX_RESPONSE_BYTES} bytes).`,
    });
  }
  accepted(res);
  const text = body.toString('utf8');
  if (kind === 'error') {
    return onResponse(
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
  onResponse(requestId, { ok: true, result });
};

/** Which event an extension may register for, in one execution model. */
export interface ExtensionEvents {
  /** The one event it may ask for. */
  readonly allowed: 'INVOKE' | 'SHUTDOWN';
  /** The event it may not, with the reason it is refused for. */
  readonly refused: Readonly<Partial<Record<'INVOKE' | 'SHUTDOWN', string>>>;
  /** The account ID is answered to an extension that accepts the `accountId` feature. */
  readonly offerAccountId: boolean;
}

/** An extension's record, as each server keeps it. */
type Registered = { readonly name: string };

/** How extensions register with one server. */
interface Registration<X extends Registered> {
  readonly metadata: FunctionMetadata;
  readonly events: ExtensionEvents;
  /** Registration is closed (init is over). */
  readonly closed: () => boolean;
  /** The extensions registered, by identifier: a new one is added. */
  readonly extensions: Map<string, X>;
  /** A new extension's record (`asked`: it asked for the allowed event). */
  readonly create: (id: string, name: string, asked: boolean) => X;
}

/** `POST /extension/register`: checked, then answered with the function's metadata or refused. */
const register = async <X extends Registered>(
  req: IncomingMessage,
  res: ServerResponse,
  rules: Registration<X>,
): Promise<void> => {
  const name = header(req, 'lambda-extension-name');
  const body = await readText(req, EXTENSION_BODY_BYTES);
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
  const { allowed, refused } = rules.events;
  for (const event of requested) {
    // Own keys only: an event named `constructor` is an unknown event, not a refused one.
    if (typeof event === 'string' && Object.hasOwn(refused, event)) {
      const reason = refused[event as keyof typeof refused];
      return forbidden(res, 'Extension.InvalidEventType', `${event}: ${reason}`);
    }
    if (event !== allowed) {
      return forbidden(
        res,
        'Extension.InvalidEventType',
        `${String(event)}: ErrorInvalidEventType`,
      );
    }
  }
  if (rules.closed()) {
    return forbidden(res, 'Extension.RegistrationClosed', 'Extension registration closed already');
  }
  const { extensions } = rules;
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
  extensions.set(id, rules.create(id, name, requested.includes(allowed)));
  const accountId =
    rules.events.offerAccountId &&
    (header(req, 'lambda-extension-accept-feature') ?? '')
      .split(',')
      .some((feature) => feature.trim() === 'accountId');
  const { metadata } = rules;
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

/** The Extensions API's calls other than register, by path. */
export type ExtensionCall = 'next' | 'init/error' | 'exit/error';

/** Which extension call a request is (`register`), or undefined (404). */
const extensionCall = (
  req: IncomingMessage,
  path: string,
): ExtensionCall | 'register' | undefined => {
  if (req.method === 'POST' && path === `${EXTENSION}/register`) return 'register';
  if (req.method === 'GET' && path === `${EXTENSION}/event/next`) return 'next';
  if (req.method === 'POST' && path === `${EXTENSION}/init/error`) return 'init/error';
  if (req.method === 'POST' && path === `${EXTENSION}/exit/error`) return 'exit/error';
  return undefined;
};

/** Takes an extension's init/error or exit/error (202): what it ends the environment with. */
export const acceptExtensionError = (
  res: ServerResponse,
  name: string,
  call: ExtensionCall,
  errorType: string,
  body: string,
): ApiFailure => {
  accepted(res);
  const reported = errorOutcome(body, errorType);
  return {
    errorType: call === 'init/error' ? 'Extension.InitError' : 'Extension.ExitError',
    errorMessage: `Extension ${name} reported ${errorType}${
      reported.errorMessage === body ? '' : `: ${reported.errorMessage}`
    }`,
  };
};

/** Answers a runtime's pending `next` with an invocation. */
export const handOver = (next: ServerResponse, delivery: Delivery) => {
  next.writeHead(200, {
    'content-type': 'application/json',
    'lambda-runtime-aws-request-id': delivery.requestId,
    'lambda-runtime-deadline-ms': String(delivery.deadlineMs),
    'lambda-runtime-invoked-function-arn': delivery.invokedFunctionArn,
    'lambda-runtime-trace-id': delivery.traceId,
  });
  next.end(delivery.payload);
};

/** An extension's next, init/error or exit/error, its body read. */
export type ExtensionRoute = (
  req: IncomingMessage,
  res: ServerResponse,
  call: ExtensionCall,
  body: string,
) => void;

/** Any request under `/2018-06-01/runtime/`. */
export type RuntimeRoute = (
  req: IncomingMessage,
  res: ServerResponse,
  path: string,
) => Promise<void>;

/** Serves both APIs on 127.0.0.1, port 0: anything else is 404, a handler that throws 500. */
export const serveApis = <X extends Registered>(
  metadata: FunctionMetadata,
  extensions: Map<string, X>,
  runtimeApi: RuntimeRoute,
  extensionApi: ExtensionRoute,
  registration: Omit<Registration<X>, 'metadata' | 'extensions'>,
): Promise<LoopbackServer> =>
  serve(
    async (req, res) => {
      const path = new URL(req.url ?? '/', 'http://local').pathname;
      if (path.startsWith(`${RUNTIME}/`)) return runtimeApi(req, res, path);
      if (path.startsWith(`${EXTENSION}/`)) {
        const call = extensionCall(req, path);
        if (call === 'register') {
          return register(req, res, { ...registration, metadata, extensions });
        }
        if (!call) return notFound(res);
        return extensionApi(req, res, call, await readText(req, EXTENSION_BODY_BYTES));
      }
      req.resume();
      notFound(res);
    },
    {
      onError: (res) =>
        send(res, 500, { errorMessage: 'Internal Server Error', errorType: 'InternalServerError' }),
    },
  );
