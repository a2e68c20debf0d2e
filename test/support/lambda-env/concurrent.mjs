// A function for the Lambda Managed Instances runtime (local/lambda-env/managed-bootstrap.ts):
// it reports where and how it runs. At init it tries to register two internal extensions, one
// for INVOKE (Lambda refuses it there) and one for SHUTDOWN (allowed), and keeps a 10 ms timer
// (`ticks`: whether the process runs between invocations). Each invocation counts how many run
// at once in its worker (`active`, `maxActive`), may wait (`sleepMs`), and says which request
// ID the runtime's InvokeStore holds for it.
import { threadId } from 'node:worker_threads';

const api = `http://${process.env.AWS_LAMBDA_RUNTIME_API}/2020-01-01/extension`;
const register = async (name, events) => {
  const answer = await fetch(`${api}/register`, {
    method: 'POST',
    headers: { 'Lambda-Extension-Name': name },
    body: JSON.stringify({ events }),
  });
  const id = answer.headers.get('lambda-extension-identifier');
  return { status: answer.status, body: await answer.json(), id };
};
const invoke = await register(`invoke-${threadId}`, ['INVOKE']);
const shutdown = await register(`shutdown-${threadId}`, ['SHUTDOWN']);
if (shutdown.status === 200) {
  // An extension that registered must ask for its events, or init never ends: SHUTDOWN comes here.
  void fetch(`${api}/event/next`, {
    headers: { 'Lambda-Extension-Identifier': shutdown.id },
  }).catch(() => undefined);
}

let ticks = 0;
setInterval(() => {
  ticks += 1;
}, 10);
let active = 0;
let maxActive = 0;
let finishedLate = 0;

export const handler = async (event, context) => {
  active += 1;
  maxActive = Math.max(maxActive, active);
  try {
    const { sleepMs = 0 } = event ?? {};
    if (sleepMs > 0) await new Promise((done) => setTimeout(done, sleepMs));
    if (context.getRemainingTimeInMillis() <= 0) finishedLate += 1;
    return {
      pid: process.pid,
      threadId,
      ticks,
      maxActive,
      finishedLate,
      requestId: context.awsRequestId,
      storeRequestId: globalThis.awslambda?.InvokeStore?.getRequestId(),
      initializationType: process.env.AWS_LAMBDA_INITIALIZATION_TYPE,
      maxConcurrency: process.env.AWS_LAMBDA_MAX_CONCURRENCY,
      traceEnv: process.env._X_AMZN_TRACE_ID,
      registrations: { invoke, shutdown },
    };
  } finally {
    active -= 1;
  }
};
