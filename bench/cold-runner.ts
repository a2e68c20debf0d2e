/**
 * One cold start, measured from inside the process: import the bundle (Lambda's init phase),
 * then run one event (the first invocation). Prints JSON timings on stdout's last line.
 *   node cold-runner.mjs <bundle.mjs> <event JSON>
 */
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const [bundle, eventJson] = process.argv.slice(2);
if (!bundle || !eventJson) throw new Error('usage: cold-runner.mjs <bundle.mjs> <event JSON>');
// Failures print one line: Node would otherwise echo a whole minified source line.
process.on('uncaughtException', (error) => {
  process.stderr.write(`cold start failed: ${error.name}: ${error.message}\n`);
  process.exit(1);
});
const started = performance.now();
const { handler } = (await import(pathToFileURL(bundle).href)) as {
  handler: (event: unknown, context: unknown) => Promise<unknown>;
};
const imported = performance.now();
const deadline = Date.now() + 10_000;
const result = await handler(JSON.parse(eventJson), {
  awsRequestId: 'cold-start',
  functionName: 'token-broker',
  functionVersion: '$LATEST',
  invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:token-broker',
  memoryLimitInMB: '512',
  getRemainingTimeInMillis: () => deadline - Date.now(),
}).catch((error: Error) => {
  process.stderr.write(`cold start failed: ${error.name}: ${error.message}\n`);
  process.exit(1);
});
const done = performance.now();
process.stdout.write(
  `\n${JSON.stringify({ initMs: imported - started, firstInvokeMs: done - imported, ok: Boolean(result) })}\n`,
);
process.exit(0);
