// A function whose module keeps a 10 ms timer running: `ticks` counts its firings, so a caller
// can tell whether the process ran between two invocations. The event can make it wait
// (`sleepMs`), fail (`fail`), or end its process (`exit`). `INIT_SLEEP_MS` makes its init (the
// module's evaluation, a cold start) last that long.
const initSleepMs = Number(process.env.INIT_SLEEP_MS ?? 0);
if (initSleepMs > 0) await new Promise((done) => setTimeout(done, initSleepMs));
let ticks = 0;
setInterval(() => {
  ticks += 1;
}, 10);

export const handler = async (event, context) => {
  const { sleepMs = 0, fail = false, exit } = event ?? {};
  if (sleepMs > 0) await new Promise((done) => setTimeout(done, sleepMs));
  if (exit !== undefined) process.exit(exit);
  if (fail) throw Object.assign(new Error('it failed'), { name: 'SomethingFailed' });
  return {
    ticks,
    pid: process.pid,
    requestId: context.awsRequestId,
    functionName: context.functionName,
    invokedFunctionArn: context.invokedFunctionArn,
    remainingMs: context.getRemainingTimeInMillis(),
    traceId: process.env._X_AMZN_TRACE_ID,
    runtimeApi: process.env.AWS_LAMBDA_RUNTIME_API,
  };
};
