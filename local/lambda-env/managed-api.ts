/**
 * The Runtime API and Extensions API of one emulated Lambda Managed Instances execution
 * environment (issue 37), on 127.0.0.1, port 0. Where it differs from api-server.ts (Lambda's
 * own model), as AWS's "Lambda Managed Instances execution environment" page and the runtimes'
 * sources (the Node.js runtime interface client; aws-lambda-go's AWS_LAMBDA_MAX_CONCURRENCY
 * support) describe it:
 * - many `GET /runtime/invocation/next` may wait at once (one per runtime worker), and many
 *   invocations run at once, up to the environment's concurrency; each answer is posted by its
 *   request ID (400 `InvalidRequestID` for one that is not running);
 * - init is over when every registered extension waits on its `next` and at least one runtime
 *   worker waits on its own: then invocations start, and registration closes. A worker's init
 *   error after that leaves the others running; one before it fails the environment's init;
 * - an extension's registration for INVOKE is refused (403 `Extension.InvalidEventType`; our
 *   wording of the message, the type as for an event an extension may not have): only SHUTDOWN
 *   may be asked for, and it is sent at shutdown to the extensions that asked;
 * - nothing ever waits for extensions between invocations: nothing freezes.
 * Status codes and error shapes otherwise as api-server.ts.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { InvokeOutcome } from '../lambda-events.js';
import { type LoopbackServer, serve } from '../loopback.js';
import {
  type Delivery,
  type FunctionMetadata,
  MAX_EXTENSIONS,
  MAX_RESPONSE_BYTES,
} from './api-server.js';

export interface ManagedApiEvents {
  /** Init is over: at least one worker and every registered extension wait on their `next`. */
  readonly onInitialized: () => void;
  /** A worker waits on `next` (one more invocation can be delivered now). */
  readonly onWorkerWaiting: () => void;
  /** The runtime answered an invocation (a result, or a function error). */
  readonly onResponse: (requestId: string, outcome: InvokeOutcome) => void;
  /** The environment cannot go on: a failed init (every worker's), an extension's error. */
  readonly onFailure: (failure: {
    readonly errorType: string;
    readonly errorMessage: string;
  }) => void;
}

export interface ManagedApiServer {
  /** `host:port`, the value of `AWS_LAMBDA_RUNTIME_API`. */
  readonly address: string;
  /** Workers waiting on `next` now. */
  waitingWorkers(): number;
  /** Hands an invocation to a waiting worker; false when none waits. */
  deliver(delivery: Delivery): boolean;
  /** The request ID is no longer running (timed out): a late answer is taken and dropped. */
  forget(requestId: string): void;
  /** Sends SHUTDOWN to the extensions registered for it; returns how many there were. */
  shutdown(reason: string, deadlineMs: number): number;
  /** The extensions registered, by name. */
  extensions(): readonly string[];
  close(): Promise<void>;
}

interface Extension {
  readonly id: string;
  readonly name: string;
  readonly shutdown: boolean;
  state: 'registered' | 'waiting' | 'failed';
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

const readBody = async (req: IncomingMessage, limit: number): Promise<Buffer | undefined> => {
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const chunk of req) {
    size += (chunk as Buffer).length;
    if (size <= limit) chunks.push(chunk as Buffer);
  }
  return size > limit ? undefined : Buffer.concat(chunks);
};

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

export const startManagedApi = async (
  metadata: FunctionMetadata,
  events: ManagedApiEvents,
): Promise<ManagedApiServer> => {
  let initialized = false;
  const workers: ServerResponse[] = [];
  /** Invocations delivered and not answered; `false` once timed out (a late answer is dropped). */
  const running = new Map<string, boolean>();
  const extensions = new Map<string, Extension>();

  const checkInit = () => {
    if (initialized || workers.length === 0) return;
    if (![...extensions.values()].every((e) => e.state === 'waiting')) return;
    initialized = true;
    events.onInitialized();
  };

  const runtimeApi = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    if (req.method === 'GET' && path === `${RUNTIME}/invocation/next`) {
      workers.push(res);
      res.once('close', () => {
        const at = workers.indexOf(res);
        if (at >= 0 && !res.writableEnded) workers.splice(at, 1);
      });
      checkInit();
      if (initialized) events.onWorkerWaiting();
      return;
    }
    if (req.method === 'POST' && path === `${RUNTIME}/init/error`) {
      const body = ((await readBody(req, MAX_RESPONSE_BYTES)) ?? Buffer.alloc(0)).toString();
      accepted(res);
      // One worker's init failed: the environment's, while no other worker is up.
      const outcome = errorOutcome(body, header(req, 'lambda-runtime-function-error-type'));
      if (!initialized && !outcome.ok) events.onFailure(outcome);
      return;
    }
    const invocation = req.method === 'POST' ? INVOCATION.exec(path) : null;
    if (!invocation) return send(res, 404, { errorMessage: 'Not found', errorType: 'NotFound' });
    const [, requestId = '', kind] = invocation;
    const body = await readBody(req, MAX_RESPONSE_BYTES);
    const live = running.get(requestId);
    if (live === undefined) {
      return send(res, 400, { errorMessage: 'Invalid request ID', errorType: 'InvalidRequestID' });
    }
    running.delete(requestId);
    if (!live) return accepted(res);
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
      result = text;
    }
    events.onResponse(requestId, { ok: true, result });
  };

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
      if (event === 'INVOKE') {
        return forbidden(
          res,
          'Extension.InvalidEventType',
          'INVOKE: not supported on Lambda Managed Instances (only SHUTDOWN)',
        );
      }
      if (event !== 'SHUTDOWN') {
        return forbidden(
          res,
          'Extension.InvalidEventType',
          `${String(event)}: ErrorInvalidEventType`,
        );
      }
    }
    if (initialized) {
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
    extensions.set(id, {
      id,
      name,
      shutdown: requested.includes('SHUTDOWN'),
      state: 'registered',
    });
    send(
      res,
      200,
      {
        functionName: metadata.functionName,
        functionVersion: metadata.functionVersion,
        handler: metadata.handler,
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
    const id = header(req, 'lambda-extension-identifier');
    const extension = id === undefined ? undefined : extensions.get(id);
    if (!extension) {
      return forbidden(
        res,
        id === undefined
          ? 'Extension.MissingExtensionIdentifier'
          : 'Extension.UnknownExtensionIdentifier',
        id === undefined ? 'Missing Lambda-Extension-Identifier header' : `Unknown extension ${id}`,
      );
    }
    if (next) {
      if (extension.state !== 'registered') {
        return forbidden(
          res,
          'Extension.InvalidExtensionState',
          `State transition from ${extension.state} to ready failed for extension ${extension.name}`,
        );
      }
      extension.state = 'waiting';
      extension.pending = res;
      return checkInit();
    }
    const errorType = header(req, 'lambda-extension-function-error-type') ?? 'Extension.Unknown';
    extension.state = 'failed';
    accepted(res);
    const reported = errorOutcome(body, errorType);
    // Lambda ends an environment whose extension fails, and starts another.
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
    waitingWorkers: () => workers.length,
    deliver: (delivery) => {
      const next = workers.shift();
      if (!next) return false;
      running.set(delivery.requestId, true);
      next.writeHead(200, {
        'content-type': 'application/json',
        'lambda-runtime-aws-request-id': delivery.requestId,
        'lambda-runtime-deadline-ms': String(delivery.deadlineMs),
        'lambda-runtime-invoked-function-arn': delivery.invokedFunctionArn,
        'lambda-runtime-trace-id': delivery.traceId,
      });
      next.end(delivery.payload);
      return true;
    },
    forget: (requestId) => {
      if (running.has(requestId)) running.set(requestId, false);
    },
    shutdown: (reason, deadlineMs) => {
      let sent = 0;
      for (const extension of extensions.values()) {
        if (!extension.shutdown || !extension.pending) continue;
        send(extension.pending, 200, { eventType: 'SHUTDOWN', shutdownReason: reason, deadlineMs });
        extension.pending = undefined;
        sent += 1;
      }
      return sent;
    },
    extensions: () => [...extensions.values()].map((e) => e.name),
    close: server.close,
  };
};
