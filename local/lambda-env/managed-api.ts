import type { ServerResponse } from 'node:http';
import type { Delivery, FunctionMetadata } from './api-protocol.js';
import * as wire from './api-protocol.js';

/** `onFailure`: a failed init (every worker's), an extension's error. */
export interface ManagedApiEvents extends wire.ApiEvents {
  /** Init is over: at least one worker and every registered extension wait on their `next`. */
  readonly onInitialized: () => void;
  /** A worker waits on `next` (one more invocation can be delivered now). */
  readonly onWorkerWaiting: () => void;
}

export interface ManagedApiServer extends wire.ApiServer {
  /** Workers waiting on `next` now. */
  waitingWorkers(): number;
  /** Hands an invocation to a waiting worker; false when none waits. */
  deliver(delivery: Delivery): boolean;
  /** The request ID is no longer running (timed out): a late answer is taken and dropped. */
  forget(requestId: string): void;
  /** Sends SHUTDOWN to the extensions registered for it; returns how many there were. */
  shutdown(reason: string, deadlineMs: number): number;
}

interface Extension {
  readonly id: string;
  readonly name: string;
  readonly shutdown: boolean;
  state: 'registered' | 'waiting' | 'failed';
  pending?: ServerResponse | undefined;
}

/** Extensions may register for SHUTDOWN only; the account ID is not offered. */
const EVENTS: wire.ExtensionEvents = {
  allowed: 'SHUTDOWN',
  refused: { INVOKE: 'not supported on Lambda Managed Instances (only SHUTDOWN)' },
  offerAccountId: false,
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

  const runtimeApi: wire.RuntimeRoute = async (req, res, path) => {
    if (req.method === 'GET' && path === `${wire.RUNTIME}/invocation/next`) {
      workers.push(res);
      res.once('close', () => {
        const at = workers.indexOf(res);
        if (at >= 0 && !res.writableEnded) workers.splice(at, 1);
      });
      checkInit();
      if (initialized) events.onWorkerWaiting();
      return;
    }
    if (req.method === 'POST' && path === `${wire.RUNTIME}/init/error`) {
      const failure = await wire.readInitError(req);
      wire.accepted(res);
      // One worker's init failed: the environment's, while no other worker is up.
      if (!initialized) events.onFailure(failure);
      return;
    }
    const posted = await wire.readInvocationPost(req, res, path);
    if (!posted) return;
    const live = running.get(posted.requestId);
    if (live === undefined) return wire.invalidRequestId(res);
    running.delete(posted.requestId);
    if (!live) return wire.accepted(res);
    wire.takeAnswer(req, res, posted, events.onResponse);
  };

  const extensionApi: wire.ExtensionRoute = (req, res, call, body) => {
    const id = wire.header(req, 'lambda-extension-identifier');
    const extension = id === undefined ? undefined : extensions.get(id);
    if (!extension) {
      return wire.forbidden(
        res,
        id === undefined
          ? 'Extension.MissingExtensionIdentifier'
          : 'Extension.UnknownExtensionIdentifier',
        id === undefined ? 'Missing Lambda-Extension-Identifier header' : `Unknown extension ${id}`,
      );
    }
    if (call === 'next') {
      if (extension.state !== 'registered') {
        return wire.forbidden(
          res,
          'Extension.InvalidExtensionState',
          `State transition from ${extension.state} to ready failed for extension ${extension.name}`,
        );
      }
      extension.state = 'waiting';
      extension.pending = res;
      return checkInit();
    }
    const errorType =
      wire.header(req, 'lambda-extension-function-error-type') ?? 'Extension.Unknown';
    extension.state = 'failed';
    // Lambda ends an environment whose extension fails, and starts another.
    events.onFailure(wire.acceptExtensionError(res, extension.name, call, errorType, body));
  };

  const server = await wire.serveApis(metadata, extensions, runtimeApi, extensionApi, {
    events: EVENTS,
    closed: () => initialized,
    create: (id, name, asked) => ({ id, name, shutdown: asked, state: 'registered' }),
  });

  return {
    address: `${server.host}:${server.port}`,
    waitingWorkers: () => workers.length,
    deliver: (delivery) => {
      const next = workers.shift();
      if (!next) return false;
      running.set(delivery.requestId, true);
      wire.handOver(next, delivery);
      return true;
    },
    forget: (requestId) => {
      if (running.has(requestId)) running.set(requestId, false);
    },
    shutdown: (reason, deadlineMs) => {
      let sent = 0;
      for (const extension of extensions.values()) {
        if (!extension.shutdown || !extension.pending) continue;
        wire.send(extension.pending, 200, {
          eventType: 'SHUTDOWN',
          shutdownReason: reason,
          deadlineMs,
        });
        extension.pending = undefined;
        sent += 1;
      }
      return sent;
    },
    extensions: () => [...extensions.values()].map((e) => e.name),
    close: server.close,
  };
};
