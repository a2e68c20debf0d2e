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
 * Status codes and error shapes otherwise as api-server.ts; what does not depend on the model
 * is api-protocol.ts.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { InvokeOutcome } from '../lambda-events.js';
import {
  type ApiFailure,
  accepted,
  answerRegistration,
  type Delivery,
  extensionCall,
  extensionFailure,
  type FunctionMetadata,
  forbidden,
  handOver,
  header,
  invalidRequestId,
  notFound,
  RUNTIME,
  readExtensionBody,
  readInitError,
  readInvocationPost,
  readRegistration,
  send,
  serveApis,
  takeAnswer,
} from './api-protocol.js';

export interface ManagedApiEvents {
  /** Init is over: at least one worker and every registered extension wait on their `next`. */
  readonly onInitialized: () => void;
  /** A worker waits on `next` (one more invocation can be delivered now). */
  readonly onWorkerWaiting: () => void;
  /** The runtime answered an invocation (a result, or a function error). */
  readonly onResponse: (requestId: string, outcome: InvokeOutcome) => void;
  /** The environment cannot go on: a failed init (every worker's), an extension's error. */
  readonly onFailure: (failure: ApiFailure) => void;
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
      const failure = await readInitError(req);
      accepted(res);
      // One worker's init failed: the environment's, while no other worker is up.
      if (!initialized) events.onFailure(failure);
      return;
    }
    const posted = await readInvocationPost(req, res, path);
    if (!posted) return;
    const live = running.get(posted.requestId);
    if (live === undefined) return invalidRequestId(res);
    running.delete(posted.requestId);
    if (!live) return accepted(res);
    takeAnswer(req, res, posted, events.onResponse);
  };

  const register = async (req: IncomingMessage, res: ServerResponse) => {
    const registration = await readRegistration(req, res, {
      allowed: 'SHUTDOWN',
      refused: {
        event: 'INVOKE',
        message: 'INVOKE: not supported on Lambda Managed Instances (only SHUTDOWN)',
      },
      closed: () => initialized,
      names: () => [...extensions.values()].map((e) => e.name),
    });
    if (!registration) return;
    const id = randomUUID();
    const { name, asked } = registration;
    extensions.set(id, { id, name, shutdown: asked, state: 'registered' });
    answerRegistration(req, res, metadata, id, false);
  };

  const extensionApi = async (req: IncomingMessage, res: ServerResponse, path: string) => {
    const call = extensionCall(req, path);
    if (call === 'register') return register(req, res);
    if (!call) return notFound(res);
    const body = await readExtensionBody(req);
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
    if (call === 'next') {
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
    // Lambda ends an environment whose extension fails, and starts another.
    events.onFailure(extensionFailure(extension.name, call, errorType, body));
  };

  const server = await serveApis(runtimeApi, extensionApi);

  return {
    address: `${server.host}:${server.port}`,
    waitingWorkers: () => workers.length,
    deliver: (delivery) => {
      const next = workers.shift();
      if (!next) return false;
      running.set(delivery.requestId, true);
      handOver(next, delivery);
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
