/**
 * An emulated Lambda container as one always-running process (`local/container.ts`) running a
 * built bundle: `startLambdaContainer`'s `always-running` way (local/lambda-container.ts), and
 * the Lambda Invoke API call both ways answer.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { DEFAULT_LAMBDA, type InvokeOutcome } from './lambda-events.js';

const INVOKE = `/2015-03-31/functions/${DEFAULT_LAMBDA.functionName}/invocations`;

/** Lambda Invoke API at `url`; a function error comes back as `{ ok: false, errorType }`. */
export const invokeAt = async (url: string, event: unknown): Promise<InvokeOutcome> => {
  const response = await fetch(`${url}${INVOKE}`, {
    method: 'POST',
    body: JSON.stringify(event),
  });
  const body = (await response.json()) as Record<string, unknown>;
  return response.headers.get('x-amz-function-error')
    ? { ok: false, errorType: String(body.errorType), errorMessage: String(body.errorMessage) }
    : { ok: true, result: body };
};

export interface Container {
  readonly url: string;
  readonly process: ChildProcess;
  /** Everything the container printed (its log lines). */
  output(): string;
  /** Lambda Invoke API; a function error comes back as `{ ok: false, errorType }`. */
  invoke(event: unknown): Promise<InvokeOutcome>;
  kill(signal?: NodeJS.Signals): Promise<void>;
}

export interface ContainerSpec {
  /** Path of the built `local/container.mjs`. */
  readonly runner: string;
  /** Path of the Lambda bundle the container loads. */
  readonly bundle: string;
  /** The function's environment: nothing else of this process's is passed on. */
  readonly env: Record<string, string>;
  /** Right after the spawn, before the bundle loads (a CPU share's cgroup, say). */
  readonly onSpawn?: (pid: number) => void;
}

export const startContainer = ({
  runner,
  bundle,
  env,
  onSpawn,
}: ContainerSpec): Promise<Container> =>
  new Promise((done, fail) => {
    const child = spawn(process.execPath, [runner, bundle], {
      env: { PATH: process.env.PATH ?? '', ...env },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    if (child.pid !== undefined) onSpawn?.(child.pid);
    let output = '';
    let ready = false;
    const exited = new Promise<void>((resolve) => child.once('exit', () => resolve()));
    // A process that could not be spawned (EAGAIN, ENOMEM) fails the start, not this process.
    child.once('error', fail);
    child.stderr.on('data', (chunk) => {
      output += chunk;
    });
    child.stdout.on('data', (chunk) => {
      output += chunk;
      const match = !ready && /READY (http:\/\/\S+)/.exec(output);
      if (!match || !match[1]) return;
      ready = true;
      const url = match[1];
      done({
        url,
        process: child,
        output: () => output,
        invoke: (event) => invokeAt(url, event),
        kill: async (signal = 'SIGTERM') => {
          if (child.exitCode === null && child.signalCode === null) child.kill(signal);
          await exited;
        },
      });
    });
    child.once('exit', (code) => {
      if (!ready)
        fail(new Error(`container exited ${code} before it was ready: ${output.slice(-2000)}`));
    });
  });

export const tokenOf = (outcome: InvokeOutcome): string => {
  if (!outcome.ok) throw new Error(`${outcome.errorType}: ${outcome.errorMessage}`);
  return String((outcome.result as { accessToken: unknown }).accessToken);
};
