/**
 * The runtime process of one emulated Lambda Managed Instances execution environment (issue 37),
 * as AWS's Node.js runtime runs one there (its runtime interface client: `WorkerManager`,
 * `Runtime.processMultiConcurrent`, read from its source):
 *
 *   AWS_LAMBDA_RUNTIME_API=127.0.0.1:<port> AWS_LAMBDA_MAX_CONCURRENCY=<n> node managed-bootstrap.mjs <bundle.mjs>
 *
 * - the main thread starts `AWS_LAMBDA_NODEJS_WORKER_COUNT` worker threads (AWS's default is 8
 *   per vCPU; here 1 when unset, what the stack sets) and runs no function itself;
 * - each worker creates the InvokeStore (`@aws/lambda-invoke-store`: AsyncLocalStorage-based, as
 *   AWS_LAMBDA_MAX_CONCURRENCY is set) before it imports the bundle (its own init: once per
 *   worker); an init that fails is posted to `/runtime/init/error` and ends that worker;
 * - then each worker asks for the next invocation, hands it to the handler in an InvokeStore
 *   context of its own (request ID, trace header) on the next turn, and asks for the next one at
 *   once: many invocations run at once in one worker, their awaits interleaved. Each answer is
 *   posted by its request ID. Nothing writes `_X_AMZN_TRACE_ID` (it would be every invocation's).
 * A worker that ends leaves the others running; the process ends when none is left.
 */
import { isMainThread, threadId, Worker } from 'node:worker_threads';
import { InvokeStore, InvokeStoreBase } from '@aws/lambda-invoke-store';
import { DEFAULT_LAMBDA } from '../lambda-events.js';
import { LOOP_DELAY_VARIABLE, startLoopDelaySampler } from '../loop-delay.js';
import { invocationContext, invocationHeaders, runtimeClient } from './runtime-client.js';

if (isMainThread) {
  const bundle = process.argv[2];
  if (!bundle || !process.env.AWS_LAMBDA_RUNTIME_API) {
    process.stderr.write(
      'usage: AWS_LAMBDA_RUNTIME_API=host:port managed-bootstrap.mjs <bundle.mjs>\n',
    );
    process.exit(2);
  }
  // As bootstrap.ts: a terminal's Ctrl-C reaches the whole process group; the pool ends it.
  process.on('SIGINT', () => undefined);
  // The local runtime's sampler file (local/loop-delay.ts), read here and given to the workers:
  // the function sees only what Lambda sets.
  const loopDelayFile = process.env[LOOP_DELAY_VARIABLE];
  delete process.env[LOOP_DELAY_VARIABLE];
  const count = Math.max(1, Number(process.env.AWS_LAMBDA_NODEJS_WORKER_COUNT) || 1);
  let alive = count;
  for (let i = 0; i < count; i += 1) {
    const worker = new Worker(new URL(import.meta.url), {
      argv: [bundle],
      env: process.env,
      workerData: { loopDelayFile },
    });
    worker.on('error', (error) => {
      process.stderr.write(`runtime: worker ${i} failed: ${error.name}: ${error.message}\n`);
    });
    worker.on('exit', (code) => {
      if (code !== 0) process.stderr.write(`runtime: worker ${i} exited with code ${code}\n`);
      alive -= 1;
      if (alive === 0) process.exit(1);
    });
  }
} else {
  await runWorker();
}

async function runWorker(): Promise<void> {
  const { workerData } = await import('node:worker_threads');
  const bundle = process.argv[2] ?? '';
  const runtime = runtimeClient(process.env.AWS_LAMBDA_RUNTIME_API ?? '');
  const settings = {
    functionName: process.env.AWS_LAMBDA_FUNCTION_NAME ?? DEFAULT_LAMBDA.functionName,
    functionVersion: process.env.AWS_LAMBDA_FUNCTION_VERSION ?? '$LATEST',
    memory: process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE ?? '2048',
    region: process.env.AWS_REGION ?? DEFAULT_LAMBDA.region,
    handler: process.env._HANDLER ?? 'index.handler',
  };

  // Init: the store first (the function's Powertools reads it while it loads), then the bundle.
  const store = await InvokeStore.getInstanceAsync();
  const handler = await runtime.loadHandler(bundle, settings.handler);
  const file = (workerData as { loopDelayFile?: string } | undefined)?.loopDelayFile;
  if (file) startLoopDelaySampler(file);

  const invoke = async (invocation: ReturnType<typeof invocationHeaders>, payload: string) => {
    const { requestId, deadlineMs } = invocation;
    const context = {
      ...invocationContext(settings, invocation),
      // Reported, never enforced there: zero or less once the invocation has timed out.
      getRemainingTimeInMillis: () => deadlineMs - Date.now(),
    };
    await runtime.answer(requestId, () => handler(JSON.parse(payload || 'null'), context));
  };

  for (;;) {
    const next = await runtime.next();
    if (next.status !== 200) {
      process.stderr.write(
        `runtime: worker ${threadId}: next answered ${next.status} ${next.body}\n`,
      );
      process.exit(1);
    }
    const invocation = invocationHeaders(next.headers);
    const { requestId, traceId } = invocation;
    setImmediate(() => {
      void store.run(
        {
          [InvokeStoreBase.PROTECTED_KEYS.REQUEST_ID]: requestId,
          [InvokeStoreBase.PROTECTED_KEYS.X_RAY_TRACE_ID]: traceId || undefined,
        },
        () => invoke(invocation, next.body),
      );
    });
  }
}
