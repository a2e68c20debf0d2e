/**
 * The runtime process of one emulated execution environment, as a Lambda custom runtime
 * writes it against the Runtime API ("AWS Lambda runtime API", Lambda Developer Guide):
 *
 *   AWS_LAMBDA_RUNTIME_API=127.0.0.1:<port> node bootstrap.mjs <bundle.mjs>
 *
 * 1. init: imports the bundle once (its top-level code runs, and internal extensions in it may
 *    register); a failure is posted to `/runtime/init/error` and the process exits;
 * 2. then, forever: `GET /runtime/invocation/next`, the handler called with the event and a
 *    Context built from the headers (`getRemainingTimeInMillis` counts down to
 *    `Lambda-Runtime-Deadline-Ms`), and the result posted to `/invocation/{id}/response`, or
 *    `{ errorType, errorMessage, trace }` to `/invocation/{id}/error`.
 *
 * Each call opens a connection of its own, with Node's http client and no timeout, rather than
 * the platform `fetch`: the `next` long poll may wait for minutes, and fetch's (undici's)
 * 300 s headers timeout fails it (measured: `UND_ERR_HEADERS_TIMEOUT` after 300 s unfrozen;
 * the same poll over node:http answered after 310 s, frozen or not). Without pooled sockets,
 * nothing is left idle across a freeze for the server to close under us.
 */
import { DEFAULT_LAMBDA } from '../lambda-events.js';
import { LOOP_DELAY_VARIABLE, startLoopDelaySampler } from '../loop-delay.js';
import { invocationContext, invocationHeaders, runtimeClient } from './runtime-client.js';

// Read once: this process's configuration is what Lambda set for the function.
const runtimeEnv = Object.freeze({
  api: process.env.AWS_LAMBDA_RUNTIME_API ?? '',
  functionName: process.env.AWS_LAMBDA_FUNCTION_NAME ?? DEFAULT_LAMBDA.functionName,
  functionVersion: process.env.AWS_LAMBDA_FUNCTION_VERSION ?? '$LATEST',
  memory: process.env.AWS_LAMBDA_FUNCTION_MEMORY_SIZE ?? '256',
  logGroup: process.env.AWS_LAMBDA_LOG_GROUP_NAME,
  logStream: process.env.AWS_LAMBDA_LOG_STREAM_NAME,
  region: process.env.AWS_REGION ?? DEFAULT_LAMBDA.region,
  handler: process.env._HANDLER ?? 'index.handler',
});

// The local runtime's measurement of event-loop delays (local/loop-delay.ts), if asked: read and
// removed before the function loads, which sees only what Lambda would set.
const loopDelayFile = process.env[LOOP_DELAY_VARIABLE];
delete process.env[LOOP_DELAY_VARIABLE];

const bundle = process.argv[2];
if (!bundle || !runtimeEnv.api) {
  process.stderr.write('usage: AWS_LAMBDA_RUNTIME_API=host:port bootstrap.mjs <bundle.mjs>\n');
  process.exit(2);
}
// Nothing sends a Lambda runtime SIGINT. Here a Ctrl-C reaches the terminal's whole foreground
// process group, this process included: ignored, so that the environment ends the way Lambda
// ends one, by its pool's SIGTERM, and the function's cleanup runs. (A frozen process keeps
// the SIGINT pending; unhandled, it would end the process at the thaw, before that SIGTERM.)
process.on('SIGINT', () => undefined);
const runtime = runtimeClient(runtimeEnv.api);

// 1. Init.
const handler = await runtime.loadHandler(bundle, runtimeEnv.handler);

// Sampled from here: init is over, and the environment is frozen until its first invocation.
if (loopDelayFile) startLoopDelaySampler(loopDelayFile);

// 2. Invocations, one at a time.
for (;;) {
  const next = await runtime.next();
  if (next.status !== 200) {
    process.stderr.write(`runtime: next answered ${next.status} ${next.body}\n`);
    process.exit(1);
  }
  const invocation = invocationHeaders(next.headers);
  const { requestId, deadlineMs, traceId } = invocation;
  // The Node.js runtime hands the trace header to the X-Ray SDK this way.
  if (traceId) process.env._X_AMZN_TRACE_ID = traceId;
  else delete process.env._X_AMZN_TRACE_ID;
  const context = {
    ...invocationContext(runtimeEnv, invocation),
    ...(runtimeEnv.logGroup ? { logGroupName: runtimeEnv.logGroup } : {}),
    ...(runtimeEnv.logStream ? { logStreamName: runtimeEnv.logStream } : {}),
    getRemainingTimeInMillis: () => Math.max(0, deadlineMs - Date.now()),
  };
  await runtime.answer(requestId, () => handler(JSON.parse(next.body || 'null'), context));
}
