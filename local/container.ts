/**
 * One emulated Lambda container as its own process: loads a bundle (cold start) and serves it
 * over the Lambda Invoke API and the HTTP routes on 127.0.0.1, port 0. Prints `READY <url>`
 * once it listens. The `always-running` way of local/lambda-container.ts, where a chaos scenario
 * or a benchmark run asks for a process that never stops between invocations.
 *
 *   node dist/local/container.mjs <bundle.mjs>
 *
 * Broker settings come from the environment, as in Lambda; BROKER_LOCAL_TIMEOUT_MS sets the
 * emulated function timeout.
 */
import { pathToFileURL } from 'node:url';
import { applyLambdaEnvironment } from './lambda-environment.js';
import { DEFAULT_LAMBDA, type LambdaHandler, withUrlQualifierOf } from './lambda-events.js';
import { startLambdaServer } from './lambda-server.js';

const bundle = process.argv[2];
if (!bundle) {
  process.stderr.write('usage: container.mjs <bundle.mjs>\n');
  process.exit(2);
}
applyLambdaEnvironment();
const timeoutMs = Number(process.env.BROKER_LOCAL_TIMEOUT_MS ?? DEFAULT_LAMBDA.timeoutMs);
const { handler } = (await import(pathToFileURL(bundle).href)) as { handler: LambdaHandler };
const server = await startLambdaServer(handler, {
  settings: withUrlQualifierOf({ ...DEFAULT_LAMBDA, timeoutMs }, process.env),
});
process.stdout.write(`READY ${server.url}\n`);
const stop = () => server.close().then(() => process.exit(0));
process.once('SIGTERM', stop);
process.once('SIGINT', stop);
