/**
 * How Lambda names and words what an execution environment shows, whatever the execution model
 * (environment.ts, managed-environment.ts): the handler and the function's ARN, the X-Ray
 * header and log stream it hands out, its timeouts, and a runtime's end as its errors say it.
 */
import { randomBytes, randomUUID } from 'node:crypto';
import { basename, extname } from 'node:path';
import type { FunctionMetadata } from './api-protocol.js';
import type { EnvironmentAnswer, Failure, FunctionSettings } from './environment.js';

/** `_HANDLER` of a bundle: `index.mjs` → `index.handler`. */
export const handlerName = (bundle: string) => `${basename(bundle, extname(bundle))}.handler`;

/** What the Extensions API's register answers with, for `bundle`'s function. */
export const functionMetadata = (settings: FunctionSettings, bundle: string): FunctionMetadata => ({
  functionName: settings.functionName,
  functionVersion: '$LATEST',
  handler: handlerName(bundle),
  accountId: settings.accountId,
});

/** The unqualified function ARN. */
export const functionArn = (settings: FunctionSettings) =>
  `arn:aws:lambda:${settings.region}:${settings.accountId}:function:${settings.functionName}`;

/** An X-Ray tracing header, as Lambda passes one to each invocation. */
export const traceHeader = () =>
  `Root=1-${Math.floor(Date.now() / 1000).toString(16)}-${randomBytes(12).toString('hex')};Parent=${randomBytes(8).toString('hex')};Sampled=0`;

/** Lambda's log stream name: `yyyy/mm/dd/[$LATEST]<32 hex>`. */
export const logStream = () =>
  `${new Date().toISOString().slice(0, 10).replaceAll('-', '/')}/[$LATEST]${randomBytes(16).toString('hex')}`;

/** An invocation that ran past the function's timeout. */
export const timedOut = (ms: number): Failure => ({
  errorType: 'Sandbox.Timedout',
  errorMessage: `Task timed out after ${(ms / 1000).toFixed(2)} seconds`,
});

/** An init that ran past its limit. */
export const initTimedOut = (ms: number): Failure => ({
  errorType: 'Sandbox.Timedout',
  errorMessage: `Init timed out after ${(ms / 1000).toFixed(2)} seconds`,
});

/** How a runtime process ended. */
export interface Exit {
  readonly code: number | null;
  readonly signal: NodeJS.Signals | null;
}

// How Lambda words a runtime's end (Go's process state): `exit status 1`, `signal: killed`.
const SIGNAL_WORDS: Partial<Record<NodeJS.Signals, string>> = {
  SIGKILL: 'killed',
  SIGTERM: 'terminated',
  SIGABRT: 'aborted',
  SIGSEGV: 'segmentation fault',
};
const describeExit = ({ code, signal }: Exit) =>
  signal ? `signal: ${SIGNAL_WORDS[signal] ?? signal}` : `exit status ${code}`;

/** A runtime that exited, as its invocation (`requestId`) or the environment fails. */
export const runtimeExited = (status: Exit, requestId?: string): Failure => ({
  errorType: 'Runtime.ExitError',
  errorMessage: `${requestId === undefined ? '' : `RequestId: ${requestId} `}Error: Runtime exited with error: ${describeExit(status)}`,
});

/** What an environment that is ending or has ended answers an invocation. */
export const exitedAnswer = (): Promise<EnvironmentAnswer> => {
  const requestId = randomUUID();
  return Promise.resolve({
    outcome: {
      ok: false,
      errorType: 'Runtime.ExitError',
      errorMessage: `RequestId: ${requestId} Error: Runtime exited`,
    },
    requestId,
    durationMs: 0,
    billedMs: Promise.resolve(0),
  });
};
