// A cold start seen from outside the bench's own harness: a plain `node` process (this file is
// neither bundled nor compiled) that imports a Lambda bundle and calls its handler once, with
// whatever environment it was started with. No Extensions API: AWS_LAMBDA_RUNTIME_API is unset.
// Prints one JSON line: wall and CPU time (user + system) of this process from just before the
// import to the first answer.
//   node bench/cold-outside.mjs <bundle.mjs> <event JSON>
import { performance } from 'node:perf_hooks';
import { pathToFileURL } from 'node:url';

const [bundle, eventJson] = process.argv.slice(2);
if (!bundle || !eventJson) throw new Error('usage: cold-outside.mjs <bundle.mjs> <event JSON>');
const cpuBefore = process.cpuUsage();
const started = performance.now();
const { handler } = await import(pathToFileURL(bundle).href);
const deadline = Date.now() + 10_000;
const result = await handler(JSON.parse(eventJson), {
  awsRequestId: 'cold-outside',
  functionName: 'token-broker',
  functionVersion: '$LATEST',
  invokedFunctionArn: 'arn:aws:lambda:us-east-1:000000000000:function:token-broker',
  memoryLimitInMB: '512',
  getRemainingTimeInMillis: () => deadline - Date.now(),
});
const wallMs = performance.now() - started;
const cpu = process.cpuUsage(cpuBefore);
process.stdout.write(
  `\n${JSON.stringify({ wallMs, cpuMs: (cpu.user + cpu.system) / 1000, ok: Boolean(result) })}\n`,
);
process.exit(0);
