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
 * `Function.ResponseSizeTooLarge` to the caller. The parts that do not depend on the execution
 * model (paths, answers, registration checks) are api-protocol.ts, shared with managed-api.ts.
 */
import { randomUUID } from 'node:crypto';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { Delivery, FunctionMetadata } from './api-protocol.js';
import * as wire from './api-protocol.js';

/**
 * `onResponse`: to the current invocation. `onFailure`: the runtime's init/error, or an
 * extension's init/error or exit/error (Lambda resets the environment after each).
 */
export interface RuntimeApiEvents extends wire.ApiEvents {
  /** The runtime and every registered extension now wait for their next event. */
  readonly onWaiting: () => void;
}

export interface RuntimeApiServer extends wire.ApiServer {
  /** True when the runtime and every registered extension wait for their next event. */
  waiting(): boolean;
  /** Hands an invocation to the waiting runtime, and INVOKE to the extensions registered for it. */
  deliver(delivery: Delivery): void;
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

/** Internal extensions may register for INVOKE, never for SHUTDOWN (see above). */
const EVENTS: wire.ExtensionEvents = {
  allowed: 'INVOKE',
  refused: { SHUTDOWN: 'ShutdownEventNotSupportedForInternalExtension' },
  offerAccountId: true,
};

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;

export const startRuntimeApi = async (
  metadata: FunctionMetadata,
  events: RuntimeApiEvents,
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

  const runtimeApi: wire.RuntimeRoute = async (req, res, path) => {
    if (req.method === 'GET' && path === `${wire.RUNTIME}/invocation/next`) {
      if (runtime === 'waiting' || runtime === 'invoking') {
        return wire.forbidden(
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
    if (req.method === 'POST' && path === `${wire.RUNTIME}/init/error`) {
      const failure = await wire.readInitError(req);
      if (runtime !== 'init') {
        return wire.forbidden(
          res,
          'InvalidStateTransition',
          `State transition from ${runtime} to init error failed for runtime`,
        );
      }
      wire.accepted(res);
      return events.onFailure(failure);
    }
    const posted = await wire.readInvocationPost(req, res, path);
    if (!posted) return;
    if (posted.requestId !== current) return wire.invalidRequestId(res);
    if (runtime !== 'invoking') {
      return wire.forbidden(
        res,
        'InvalidStateTransition',
        `State transition from ${runtime} to invocation ${posted.kind} failed for runtime`,
      );
    }
    runtime = 'answered';
    wire.takeAnswer(req, res, posted, events.onResponse);
  };

  /** The extension a request names, or undefined once it has answered the request itself. */
  const identify = (req: IncomingMessage, res: ServerResponse): Extension | undefined => {
    const id = wire.header(req, 'lambda-extension-identifier');
    if (!id) {
      wire.forbidden(
        res,
        'Extension.MissingExtensionIdentifier',
        'Missing Lambda-Extension-Identifier header',
      );
      return undefined;
    }
    if (!UUID.test(id)) {
      wire.forbidden(
        res,
        'Extension.InvalidExtensionIdentifier',
        'Invalid Lambda-Extension-Identifier',
      );
      return undefined;
    }
    const extension = extensions.get(id);
    if (!extension)
      wire.forbidden(res, 'Extension.UnknownExtensionIdentifier', `Unknown extension ${id}`);
    return extension;
  };

  const invalidState = (res: ServerResponse, extension: Extension, to: string) =>
    wire.forbidden(
      res,
      'Extension.InvalidExtensionState',
      `State transition from ${extension.state} to ${to} failed for extension ${extension.name}`,
    );

  const extensionApi: wire.ExtensionRoute = (req, res, call, body) => {
    const extension = identify(req, res);
    if (!extension) return;
    if (call === 'next') {
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
    const errorType = wire.header(req, 'lambda-extension-function-error-type');
    if (!errorType) {
      return wire.forbidden(
        res,
        'Extension.MissingHeader',
        'Lambda-Extension-Function-Error-Type not found',
      );
    }
    // init/error only before the extension's first next; exit/error at any time until then.
    const initError = call === 'init/error';
    if (extension.state === 'failed' || (initError && extension.state !== 'registered')) {
      return invalidState(res, extension, initError ? 'init error' : 'exit error');
    }
    extension.state = 'failed';
    events.onFailure(wire.acceptExtensionError(res, extension.name, call, errorType, body));
  };

  const server = await wire.serveApis(metadata, extensions, runtimeApi, extensionApi, {
    events: EVENTS,
    closed: () => runtime !== 'init',
    create: (id, name, asked) => ({ id, name, invoke: asked, state: 'registered' }),
  });

  return {
    address: `${server.host}:${server.port}`,
    waiting,
    deliver: (delivery) => {
      const next = runtimeNext;
      if (!waiting() || !next) throw new Error('deliver: the environment is not waiting');
      runtime = 'invoking';
      runtimeNext = undefined;
      current = delivery.requestId;
      wire.handOver(next, delivery);
      for (const extension of extensions.values()) {
        if (!extension.invoke || !extension.pending) continue;
        const pending = extension.pending;
        extension.pending = undefined;
        extension.state = 'busy';
        wire.send(
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
