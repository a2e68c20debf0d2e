/**
 * `npm start`: the broker on localhost with embedded defaults.
 *
 * Starts dynalite (DynamoDB), the Open API simulator with generated demo credentials for one v3
 * and one legacy connection, and a loopback Secrets Manager endpoint holding those credentials;
 * then loads the built Lambda bundle (dist/broker/index.mjs) like Lambda does and serves it:
 * the HTTP routes, the Lambda Invoke API, and the warm-up schedule.
 *
 * Settings (all optional): see docs/guide.md, "The local runtime".
 */
import { readFileSync } from 'node:fs';
import { pathToFileURL } from 'node:url';
import { ensureTable, localDynamoDBClient, startDynalite } from './dynamodb-local.js';
import { startKmsEmulator } from './kms-emulator.js';
import { applyLambdaEnvironment } from './lambda-environment.js';
import { DEFAULT_LAMBDA, type LambdaHandler, scheduledEvent } from './lambda-events.js';
import { invokeHandler } from './lambda-invoke.js';
import { startLambdaServer } from './lambda-server.js';
import { listenFailure, networkWarning, upstreamNotice } from './notices.js';
import { startSecretsEmulator } from './secrets-manager-emulator.js';
import { generateClient, startSimulator } from './simulator.js';

const env = process.env;
const number = (name: string, fallback: number) => {
  const value = env[name] === undefined || env[name] === '' ? fallback : Number(env[name]);
  if (!Number.isInteger(value) || value < 0) throw new Error(`${name} must be a whole number`);
  return value;
};

const settings = {
  host: env.HOST ?? '127.0.0.1',
  port: number('PORT', 3000),
  scheduleSeconds: number('BROKER_LOCAL_SCHEDULE_SECONDS', 60),
  timeoutMs: number('BROKER_LOCAL_TIMEOUT_MS', 10_000),
  expiresIn: number('BROKER_LOCAL_EXPIRES_IN', 86_400),
  secretsFile: env.BROKER_LOCAL_SECRETS_FILE,
};

const closers: (() => Promise<void>)[] = [];
const log = (line: string) => process.stdout.write(`${line}\n`);

/** Ends the start with one clear line on stderr, after stopping what already runs. */
const fail = async (line: string): Promise<never> => {
  process.stderr.write(`${line}\n`);
  await Promise.allSettled(closers.reverse().map((close) => close()));
  process.exit(1);
};

// DynamoDB: dynalite unless an endpoint is given.
if (!env.AWS_ENDPOINT_URL_DYNAMODB) {
  const dynamodb = await startDynalite();
  closers.push(dynamodb.close);
  env.AWS_ENDPOINT_URL_DYNAMODB = dynamodb.url;
}
env.BROKER_TABLE_NAME ??= 'token-broker-local';
env.AWS_REGION ??= 'us-east-1';
// EMF metric lines are noise on a laptop; POWERTOOLS_METRICS_DISABLED=false shows them.
env.POWERTOOLS_METRICS_DISABLED ??= 'true';
env.AWS_ACCESS_KEY_ID ??= 'local';
env.AWS_SECRET_ACCESS_KEY ??= 'local';
await ensureTable(localDynamoDBClient(env.AWS_ENDPOINT_URL_DYNAMODB), env.BROKER_TABLE_NAME);

// Connections: your own (BROKER_CONNECTIONS) or two demo ones against the simulator.
let secrets: Record<string, string> = {};
const simulated = !env.BROKER_CONNECTIONS;
if (simulated) {
  const v3Client = generateClient('demo-v3');
  const legacyClient = generateClient('demo-legacy');
  const simulator = await startSimulator({
    clients: [v3Client, legacyClient],
    expiresIn: settings.expiresIn,
  });
  closers.push(simulator.close);
  secrets = {
    'local/demo-v3': JSON.stringify(v3Client),
    'local/demo-legacy': JSON.stringify(legacyClient),
  };
  env.BROKER_CONNECTIONS = JSON.stringify({
    'demo-v3': { variant: 'v3', baseUrl: simulator.url, secretId: 'local/demo-v3' },
    'demo-legacy': { variant: 'legacy', baseUrl: simulator.url, secretId: 'local/demo-legacy' },
  });
  log(
    `Open API simulator   ${simulator.url}  (clients ${v3Client.clientId}, ${legacyClient.clientId})`,
  );
}
if (settings.secretsFile) {
  secrets = {};
  for (const [id, value] of Object.entries(
    JSON.parse(readFileSync(settings.secretsFile, 'utf8')),
  )) {
    secrets[id] = typeof value === 'string' ? value : JSON.stringify(value);
  }
}
// Secrets Manager: a loopback endpoint unless one is given.
if (!env.AWS_ENDPOINT_URL_SECRETS_MANAGER) {
  const emulator = await startSecretsEmulator(secrets);
  closers.push(emulator.close);
  env.AWS_ENDPOINT_URL_SECRETS_MANAGER = emulator.url;
}

// KMS: a loopback key encrypts stored tokens, unless a key or an endpoint is given.
if (!env.BROKER_KMS_KEY_ID && !env.AWS_ENDPOINT_URL_KMS) {
  const kms = await startKmsEmulator();
  closers.push(kms.close);
  env.AWS_ENDPOINT_URL_KMS = kms.url;
  env.BROKER_KMS_KEY_ID = kms.keyArn;
}

applyLambdaEnvironment();
// Loaded only now: the bundle reads its configuration at import, like a Lambda cold start.
const bundle = new URL('../broker/index.mjs', import.meta.url);
const { handler } = (await import(pathToFileURL(bundle.pathname).href).catch((error: unknown) =>
  // A configuration error names the variable, the connection and the field: that line alone,
  // not Node's dump of the minified line that threw.
  fail(`The broker did not start: ${(error as Error)?.message ?? String(error)}`),
)) as { handler: LambdaHandler };

const lambda = { ...DEFAULT_LAMBDA, timeoutMs: settings.timeoutMs };
const server = await startLambdaServer(handler, {
  host: settings.host,
  port: settings.port,
  settings: lambda,
}).catch((error: NodeJS.ErrnoException) =>
  fail(listenFailure(settings.host, settings.port, error)),
);
closers.push(server.close);

const warmUp = async () => {
  const outcome = await invokeHandler(handler, scheduledEvent(lambda), lambda);
  if (!outcome.ok) log(`warm-up failed: ${outcome.errorType}: ${outcome.errorMessage}`);
};
await warmUp();
const schedule =
  settings.scheduleSeconds > 0 ? setInterval(warmUp, settings.scheduleSeconds * 1000) : undefined;

const connections = JSON.parse(env.BROKER_CONNECTIONS ?? '{}') as Record<
  string,
  { baseUrl?: unknown }
>;
const names = Object.keys(connections);
const upstreams = Object.values(connections).map((c) => String(c?.baseUrl));
log(`DynamoDB             ${env.AWS_ENDPOINT_URL_DYNAMODB}  (table ${env.BROKER_TABLE_NAME})`);
log(`Secrets Manager      ${env.AWS_ENDPOINT_URL_SECRETS_MANAGER}`);
log(
  `KMS                  ${env.AWS_ENDPOINT_URL_KMS ?? 'AWS'}  (tokens encrypted with ${env.BROKER_KMS_KEY_ID})`,
);
log(`Token broker         ${server.url}  (connections: ${names.join(', ')})`);
const warning = networkWarning(settings.host, server.port);
if (warning) log(`\n${warning}`);
if (!simulated) log(`\n${upstreamNotice(upstreams)}`);
log('');
log(`  curl -s ${server.url}/tokens/${names[0]}`);
log(
  `  curl -s -X POST ${server.url}/2015-03-31/functions/${lambda.functionName}/invocations -d '{"action":"getToken","connection":"${names[0]}"}'`,
);
log(`  curl -s ${server.url}/health`);
log(
  `  aws lambda invoke --endpoint-url ${server.url} --function-name ${lambda.functionName} --cli-binary-format raw-in-base64-out --payload '{"action":"getToken","connection":"${names[0]}"}' /dev/stdout`,
);
log('');
log(
  settings.scheduleSeconds > 0
    ? `Warm-up runs every ${settings.scheduleSeconds}s. Ctrl-C stops everything.`
    : 'Warm-up ran once at start and does not repeat (BROKER_LOCAL_SCHEDULE_SECONDS=0). Ctrl-C stops everything.',
);

// One process serves everything (npm start execs it), so the signal npm forwards, or a `kill`
// of this pid, reaches it. A second signal while closing (Ctrl-C reaches npm and this process
// both) must not cut the closing short, so the handlers stay installed and run once.
let stopping = false;
const stop = async (signal: NodeJS.Signals) => {
  if (stopping) return;
  stopping = true;
  log(`${signal}: stopping; port ${server.port} is free once this exits.`);
  if (schedule) clearInterval(schedule);
  await Promise.allSettled(closers.reverse().map((close) => close()));
  process.exit(0);
};
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => void stop(signal));
}
