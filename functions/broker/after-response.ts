/**
 * Work after the response, Lambda's way (issue 17): an internal extension keeps the execution
 * environment thawed until the work an invocation started (a refresh ahead of expiry, a kept
 * report acted on) has ended. Lambda freezes an environment only when the runtime and every
 * registered extension wait for their next event; the runtime posts the response first, so the
 * caller has its answer, and the refresh runs to completion without holding it and without
 * depending on that environment's next invocation. In the broker's own bundle: no layer.
 *
 * The Extensions API (AWS's reference, "Lambda Extensions API"): `POST
 * /2020-01-01/extension/register` with `Lambda-Extension-Name` during init, then `GET
 * /2020-01-01/extension/event/next` with `Lambda-Extension-Identifier`, one event at a time.
 * An internal extension registers for INVOKE only; at shutdown Lambda sends the runtime
 * SIGTERM (with an extension registered), which `onShutdown` answers.
 *
 * The API is called over node:http, not the platform `fetch`: the first `fetch` of a process
 * loads undici, which cost the cold start about 15 ms of init (issue 25), and node:http is loaded
 * already (the AWS SDK's HTTP handler). In the bundle this import takes node:http without its ESM
 * facade, which would load undici all the same (scripts/esbuild-node.mjs). Each call has a
 * connection of its own and no timeout, as the runtime's own calls
 * (local/lambda-env/bootstrap.ts): the `next` long poll may wait for minutes.
 */
import { request } from 'node:http';
import { computeOf } from '../../lib/config/compute.js';
import type { Env } from '../../lib/config/variables.js';

/**
 * The Runtime API the extension registers with (`AWS_LAMBDA_RUNTIME_API`), or undefined for none:
 * with BROKER_LAMBDA_EXTENSION=off (for comparison, docs/configuration.md), and on Lambda
 * Managed Instances, which refuses an INVOKE registration and freezes nothing: work after the
 * response simply goes on in the process (issue 37).
 */
export const extensionApiOf = (env: Env): string | undefined => {
  if (env.BROKER_LAMBDA_EXTENSION?.trim() === 'off') return undefined;
  if (computeOf(env) === 'managed-instances') return undefined;
  return env.AWS_LAMBDA_RUNTIME_API;
};

/** Invocations whose handler has not returned yet, by request id. */
export class Invocations {
  readonly #finished = new Set<string>();
  readonly #waiting = new Map<string, () => void>();
  /** Set once an extension waits on invocations: until then nothing is kept. */
  watched = false;

  /** The handler of `requestId` has returned (or thrown): its response is on its way. */
  finished(requestId: string): void {
    const wake = this.#waiting.get(requestId);
    if (wake) {
      this.#waiting.delete(requestId);
      wake();
    } else if (this.watched) this.#finished.add(requestId);
  }

  /** Settles once the handler of `requestId` has returned (at once if it already has). */
  whenFinished(requestId: string): Promise<void> {
    if (this.#finished.delete(requestId)) return Promise.resolve();
    return new Promise((resolve) => this.#waiting.set(requestId, resolve));
  }
}

export interface AfterResponseDeps {
  /** `AWS_LAMBDA_RUNTIME_API` (host:port); without it, not in Lambda: nothing registers. */
  readonly runtimeApi: string | undefined;
  /** Settles once the work started by invocations so far has ended (`TokenBroker.idle`). */
  readonly idle: () => Promise<void>;
  readonly invocations: Invocations;
  readonly log: { warn(message: string, fields: Record<string, unknown>): void };
  /** How the API is called: node:http unless given (tests give a `fetch`). */
  readonly fetch?: ApiSend;
  /** The registration, when sent already (`startRegistration`); otherwise it is sent here. */
  readonly registration?: Registration | undefined;
}

/** The parts of a `fetch` response the extension reads. */
interface ApiResponse {
  readonly ok: boolean;
  readonly status: number;
  readonly headers: { get(name: string): string | null };
  json(): Promise<unknown>;
}

/** A `fetch`-shaped call of the Extensions API (`fetch` itself is one). */
export type ApiSend = (
  url: string,
  init?: { method?: string; headers?: Record<string, string>; body?: string },
) => Promise<ApiResponse>;

/** One request over node:http, its connection its own; the body read whole. */
const httpSend: ApiSend = (url, init = {}) =>
  new Promise((resolve, reject) => {
    const req = request(
      url,
      { method: init.method ?? 'GET', headers: init.headers ?? {}, agent: false },
      (res) => {
        const chunks: Buffer[] = [];
        res.on('data', (chunk: Buffer) => chunks.push(chunk));
        res.on('error', reject);
        res.on('end', () => {
          const status = res.statusCode ?? 0;
          const text = Buffer.concat(chunks).toString('utf8');
          resolve({
            ok: status >= 200 && status < 300,
            status,
            headers: {
              get: (name) => {
                const value = res.headers[name.toLowerCase()];
                if (value === undefined) return null;
                return Array.isArray(value) ? value.join(', ') : value;
              },
            },
            json: async () => JSON.parse(text) as unknown,
          });
        });
      },
    );
    req.on('error', reject);
    req.end(init.body);
  });

const EXTENSION_NAME = 'token-broker-after-response';
const BASE = '2020-01-01/extension';

/** The answer to `POST /register`: the extension's identifier, or why there is none. */
export type Registration = Promise<
  { readonly id: string } | { readonly id?: undefined; readonly problem: Record<string, unknown> }
>;

/**
 * Sends the registration (`POST /register`) and returns its answer to come; never rejects.
 * Undefined without a Runtime API (not in Lambda). The entry sends it before it loads the rest of
 * init, so that its round trip overlaps that work (issue 25).
 */
export const startRegistration = (
  runtimeApi: string | undefined,
  send: ApiSend = httpSend,
): Registration | undefined => {
  if (!runtimeApi) return undefined;
  return send(`http://${runtimeApi}/${BASE}/register`, {
    method: 'POST',
    headers: { 'Lambda-Extension-Name': EXTENSION_NAME, 'Content-Type': 'application/json' },
    body: JSON.stringify({ events: ['INVOKE'] }),
  }).then(
    (response) => {
      const id = response.ok ? response.headers.get('Lambda-Extension-Identifier') : null;
      return id ? { id } : { problem: { status: response.status } };
    },
    (error: unknown) => ({ problem: { error: { name: (error as Error)?.name } } }),
  );
};

/**
 * Registers the internal extension (at init: a module's top-level await), or takes the answer
 * of a registration sent already, and runs its loop in the background. Returns whether it
 * registered: false outside Lambda, or when the API refuses.
 */
export const registerAfterResponse = async (deps: AfterResponseDeps): Promise<boolean> => {
  const send = deps.fetch ?? httpSend;
  const registration = deps.registration ?? startRegistration(deps.runtimeApi, send);
  if (!registration) return false;
  const answer = await registration;
  if (answer.id === undefined) {
    deps.log.warn(
      'Extension not registered: refresh ahead waits for the next invocation',
      answer.problem,
    );
    return false;
  }
  deps.invocations.watched = true;
  void loop(deps, send, answer.id);
  return true;
};

/** One event at a time: after an INVOKE, asks for the next only once its work has ended. */
const loop = async (deps: AfterResponseDeps, send: ApiSend, id: string): Promise<void> => {
  let failures = 0;
  for (;;) {
    let event: { eventType?: string; requestId?: string };
    try {
      const response = await send(`http://${deps.runtimeApi}/${BASE}/event/next`, {
        headers: { 'Lambda-Extension-Identifier': id },
      });
      // 403 or 500 (a non-recoverable state) carries no event: a failed poll, not one to repeat
      // at once.
      if (!response.ok) throw new ExtensionApiError(response.status);
      event = (await response.json()) as typeof event;
      failures = 0;
    } catch (error) {
      // A poll that failed (a connection reset; a `fetch` given in tests stops waiting for
      // headers after 300 s) is asked again; an API that is gone ends the loop.
      failures += 1;
      if (failures >= MAX_FAILURES) {
        deps.log.warn('Extension event loop ended', { error: { name: (error as Error)?.name } });
        return;
      }
      await new Promise((resolve) => setTimeout(resolve, RETRY_MS));
      continue;
    }
    if (event.eventType === 'SHUTDOWN') return;
    if (event.eventType === 'INVOKE' && event.requestId) {
      // The invocation's handler first (it starts the work), then the work it started.
      await deps.invocations.whenFinished(event.requestId);
      await deps.idle();
    }
  }
};

/** An error answer of the Extensions API to a poll. */
class ExtensionApiError extends Error {
  override readonly name = 'ExtensionApiError';
  constructor(readonly status: number) {
    super(`Extensions API answered HTTP ${status}`);
  }
}

/** Consecutive failed polls after which the Extensions API is taken to be gone. */
const MAX_FAILURES = 3;
const RETRY_MS = 200;
