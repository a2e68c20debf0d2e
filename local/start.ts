/**
 * `npm start`: the broker on localhost with embedded defaults.
 *
 * Starts dynalite (DynamoDB), the Open API simulator with generated demo credentials for one v3
 * and one legacy connection, and a loopback Secrets Manager endpoint holding those credentials;
 * then runs the built Lambda bundle (dist/broker/index.mjs) in emulated Lambda execution
 * environments (local/lambda-env/: processes frozen between invocations) and serves it: the
 * HTTP routes, the Lambda Invoke API, and the warm-up schedule.
 *
 * Settings (all optional): see docs/guide.md, "The local runtime".
 */
import { fileURLToPath } from 'node:url';
import { CPU_SHARE_VARIABLE, probeCpuShare } from './cpu-share.js';
import { ensureTable, localDynamoDBClient, startDynalite } from './dynamodb-local.js';
import { startKmsEmulator } from './kms-emulator.js';
import { InitFailedError, startLambdaContainer } from './lambda-container.js';
import type { EnvironmentSnapshot } from './lambda-env/pool.js';
import { DEFAULT_LAMBDA } from './lambda-events.js';
import { portFree } from './loopback.js';
import {
  awsCliExample,
  failureReason,
  listenFailure,
  networkWarning,
  originOf,
  upstreamNotice,
} from './notices.js';
import { readSecretsFile } from './secrets-file.js';
import { startSecretsEmulator } from './secrets-manager-emulator.js';
import { generateClient, startSimulator } from './simulator.js';
import { functionEnvironment, readSettings, type StartSettings } from './start-settings.js';

const env = process.env;
const closers: (() => Promise<void>)[] = [];
const log = (line: string) => process.stdout.write(`${line}\n`);

/** Closes the execution environments: before the rest, since they may release leases in DynamoDB. */
let closeContainer: (() => Promise<void>) | undefined;

/** Stops what runs: the environments first, then the servers. */
const closeAll = async () => {
  await closeContainer?.();
  await Promise.allSettled(closers.reverse().map((close) => close()));
};

/** Ends the start with one clear line on stderr, after stopping what already runs. */
const fail = async (line: string): Promise<never> => {
  process.stderr.write(`${line}\n`);
  await closeAll();
  process.exit(1);
};

// Anything else that stops the start: one line that names the error but not its message (which
// may quote a value), rather than Node's print of the source line and the stack.
process.on('uncaughtException', (error) => {
  void fail(`The local runtime stopped: ${failureReason(error)}`);
});

// Read before anything starts: a refusal here has nothing to stop. Their messages are written
// to name the variable and never quote its value (a secrets file's content above all).
let settings: StartSettings;
let fileSecrets: Record<string, string> | undefined;
try {
  settings = readSettings(env);
  fileSecrets = settings.secretsFile ? readSecretsFile(settings.secretsFile) : undefined;
} catch (error) {
  settings = await fail(`The local runtime did not start: ${(error as Error).message}`);
}

// The port, before anything else starts: the warm-up below issues tokens before the server
// listens, and with real credentials in BROKER_CONNECTIONS a second npm start on a taken port
// would revoke the tokens of the one already there before it found the port taken.
if (settings.port !== 0) {
  await portFree(settings.host, settings.port).catch((error: NodeJS.ErrnoException) =>
    fail(listenFailure(settings.host, settings.port, error, Boolean(env.BROKER_CONNECTIONS))),
  );
}

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
// As the stack: HTTP requests are served only through the Function URL's alias (issue 37). The
// local URL invokes that alias; the Invoke API the qualifier its caller names (none, $LATEST).
env.BROKER_URL_QUALIFIER ??= DEFAULT_LAMBDA.urlQualifier;
await ensureTable(localDynamoDBClient(env.AWS_ENDPOINT_URL_DYNAMODB), env.BROKER_TABLE_NAME).catch(
  (error: unknown) =>
    fail(
      `The local runtime did not start: DynamoDB at ${originOf(env.AWS_ENDPOINT_URL_DYNAMODB ?? '')} (AWS_ENDPOINT_URL_DYNAMODB) failed: ${failureReason(error)}`,
    ),
);

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
  // Reports are verified with the simulator's protected ping (docs/protocol.md).
  env.BROKER_CONNECTIONS = JSON.stringify({
    'demo-v3': {
      variant: 'v3',
      baseUrl: simulator.url,
      secretId: 'local/demo-v3',
      probe: { path: '/open-api/v3/ping' },
    },
    'demo-legacy': {
      variant: 'legacy',
      baseUrl: simulator.url,
      secretId: 'local/demo-legacy',
      probe: { path: '/open-api/ping' },
    },
  });
  log(
    `Open API simulator   ${simulator.url}  (clients ${v3Client.clientId}, ${legacyClient.clientId})`,
  );
}
if (fileSecrets) secrets = fileSecrets;
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

// The bundle runs in execution environments, each a process of its own with the function's
// environment only; its configuration is read at each one's init, as at a Lambda cold start.
// The shared containers module (as chaos and bench run it) serves them: the HTTP routes, the
// Invoke API, `/__local/environments` and the warm-up schedule. Its first warm-up runs before
// anything listens: it starts the first environment, whose init is where a configuration error
// shows. Like a Lambda cold start, that error names the variable, the connection and the
// field: that line alone, not the bundle's stack.
const container = await startLambdaContainer({
  // BROKER_LOCAL_COMPUTE=managed-instances: Lambda Managed Instances' model (issue 37).
  execution: settings.compute === 'managed-instances' ? 'managed-instances' : 'frozen',
  bundle: fileURLToPath(new URL('../broker/index.mjs', import.meta.url)),
  bootstrap: fileURLToPath(new URL('./lambda-env/bootstrap.mjs', import.meta.url)),
  env: functionEnvironment(env),
  timeoutMs: settings.timeoutMs,
  maxEnvironments: settings.maxEnvironments,
  idleShutdownMs: settings.idleShutdownSeconds * 1000,
  freeze: settings.freeze,
  host: settings.host,
  port: settings.port,
  outputTail: 0,
  onLog: log,
  warmUp: { everyMs: settings.scheduleSeconds * 1000, onProblem: log },
  // Lambda's CPU share of the stack's 512 MB where the cgroup controller is writable.
  cpu: probeCpuShare({ env: { [CPU_SHARE_VARIABLE]: settings.cpuShare ? 'on' : 'off' } }),
}).catch((error: NodeJS.ErrnoException) => {
  // A system error is the server's (the port taken, the host unknown); else, as below.
  if (error.code) return fail(listenFailure(settings.host, settings.port, error, !simulated));
  if (!(error instanceof InitFailedError)) {
    return fail(`The local runtime stopped: ${failureReason(error)}`);
  }
  // The platform's own types say where init failed; the broker's (ConfigError) need no prefix.
  const where = /^(Runtime|Sandbox|Extension)\./.test(error.errorType)
    ? `${error.errorType}: `
    : '';
  return fail(`The broker did not start: ${where}${error.message}`);
});
closeContainer = () => container.close();
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
log(`Token broker         ${container.url}  (connections: ${names.join(', ')})`);
log(
  settings.compute === 'managed-instances'
    ? `Lambda environments  up to ${settings.maxEnvironments}, Lambda Managed Instances (BROKER_LOCAL_COMPUTE): worker threads, up to 64 invocations at once each, never frozen`
    : `Lambda environments  up to ${settings.maxEnvironments}, ${settings.freeze ? 'frozen (SIGSTOP) between invocations' : 'not frozen (BROKER_LOCAL_FREEZE=false)'}; each ends after ${settings.idleShutdownSeconds}s idle`,
);
log(container.cpu.description);
const warning = networkWarning(settings.host, container.port);
if (warning) log(`\n${warning}`);
if (!simulated) log(`\n${upstreamNotice(upstreams)}`);
log('');
log(`  curl -s ${container.url}/tokens/${names[0]}`);
log(
  `  curl -s -X POST ${container.url}/2015-03-31/functions/${DEFAULT_LAMBDA.functionName}/invocations -d '{"action":"getToken","connection":"${names[0]}"}'`,
);
log(`  curl -s ${container.url}/health`);
log(`  curl -s ${container.url}/__local/environments    # local only: the execution environments`);
for (const line of awsCliExample(container.url, DEFAULT_LAMBDA.functionName, String(names[0])))
  log(line);
log('');
log(
  settings.scheduleSeconds > 0
    ? `Warm-up runs every ${settings.scheduleSeconds}s. Ctrl-C stops everything.`
    : 'Warm-up ran once at start and does not repeat (BROKER_LOCAL_SCHEDULE_SECONDS=0). Ctrl-C stops everything.',
);

/** `1a2b3c4d (pid 42): SIGTERM, exit 0`. */
const describeShutdown = ({ id, pid, shutdown }: EnvironmentSnapshot) => {
  const signals = shutdown?.signals.join(', ') || 'no signal';
  const exit = shutdown?.exitSignal
    ? `ended by ${shutdown.exitSignal}`
    : `exit ${shutdown?.exitCode}`;
  return `${id} (pid ${pid}): ${signals}, ${exit}`;
};

// One process serves everything (npm start execs it), so the signal npm forwards, or a `kill`
// of this pid, reaches it. A second signal while closing (Ctrl-C reaches npm and this process
// both) must not cut the closing short, so the handlers stay installed and run once.
let stopping = false;
const stop = async (signal: NodeJS.Signals) => {
  if (stopping) return;
  stopping = true;
  log(`${signal}: stopping; port ${container.port} is free once this exits.`);
  // The environments get SIGTERM, as at a Lambda shutdown: the broker releases its leases.
  const live = new Set(container.environments().map(({ id }) => id));
  await closeAll();
  const ended = container.environments({ ended: true }).filter(({ id }) => live.has(id));
  if (ended.length > 0) {
    log(`Lambda environments shut down: ${ended.map(describeShutdown).join('; ')}`);
  }
  process.exit(0);
};
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP'] as const) {
  process.on(signal, () => void stop(signal));
}
