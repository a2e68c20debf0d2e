/**
 * The real things a test can run here: dynalite (or another DynamoDB endpoint), the Open API simulator over HTTP(S) and a
 * loopback Secrets Manager endpoint reached by the real SDK clients through
 * AWS_ENDPOINT_URL_<SERVICE>. Everything listens on 127.0.0.1, port 0, and `close()` stops it.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { ensureTable, type LocalDynamoDB, startDynalite } from './dynamodb-local.js';
import { type KmsEmulator, startKmsEmulator } from './kms-emulator.js';
import { type SecretsEmulator, startSecretsEmulator } from './secrets-manager-emulator.js';
import {
  generateClient,
  type Simulator,
  type SimulatorClient,
  type SimulatorOptions,
  startSimulator,
} from './simulator.js';

export interface Stack {
  readonly dynamodb: LocalDynamoDB;
  readonly simulator: Simulator;
  readonly secrets: SecretsEmulator;
  readonly kms: KmsEmulator;
  readonly v3Client: SimulatorClient;
  readonly legacyClient: SimulatorClient;
  readonly tableName: string;
  /** Every credential value in play: for leak scans of logs, errors and metrics. */
  credentials(): string[];
  /** Environment for a broker (in this process or a child) wired to this stack. */
  readonly env: Record<string, string>;
  close(): Promise<void>;
}

let tables = 0;

export const startStack = async (
  simulatorOptions: Partial<SimulatorOptions> = {},
  /** Which connections BROKER_CONNECTIONS configures: `sandbox` (v3) and/or `legacy`. */
  connections: readonly ('sandbox' | 'legacy')[] = ['sandbox', 'legacy'],
  /**
   * `encrypt`: encrypt stored tokens with a key of the loopback KMS (BROKER_KMS_KEY_ID).
   * `probe`: verify reports with the simulator's protected ping (each connection's `probe`).
   * `dynamodb`: starts the DynamoDB endpoint (dynalite by default; the hot-key bench also runs
   * on AWS's DynamoDB Local behind a counting proxy). The stack's `close()` closes it.
   */
  {
    encrypt = false,
    probe = false,
    dynamodb: startDynamoDB = startDynalite,
  }: { encrypt?: boolean; probe?: boolean; dynamodb?: () => Promise<LocalDynamoDB> } = {},
): Promise<Stack> => {
  const v3Client = generateClient('v3');
  const legacyClient = generateClient('legacy');
  const [dynamodb, simulator, secrets, kms] = await Promise.all([
    startDynamoDB(),
    startSimulator({ clients: [v3Client, legacyClient], ...simulatorOptions }),
    startSecretsEmulator({
      'open-api/v3': JSON.stringify(v3Client),
      'open-api/legacy': JSON.stringify(legacyClient),
    }),
    startKmsEmulator(),
  ]);
  tables += 1;
  const tableName = `token-broker-test-${process.pid}-${tables}`;
  const env: Record<string, string> = {
    AWS_REGION: 'us-east-1',
    AWS_ACCESS_KEY_ID: 'test',
    AWS_SECRET_ACCESS_KEY: 'test',
    AWS_ENDPOINT_URL_DYNAMODB: dynamodb.url,
    AWS_ENDPOINT_URL_SECRETS_MANAGER: secrets.url,
    AWS_ENDPOINT_URL_KMS: kms.url,
    ...(encrypt ? { BROKER_KMS_KEY_ID: kms.keyArn } : {}),
    BROKER_TABLE_NAME: tableName,
    // Tests report a token right after it was issued; the production floor is tested on its own.
    BROKER_INVALIDATE_MIN_AGE_SECONDS: '0',
    BROKER_FORCED_MIN_AGE_SECONDS: '0',
    BROKER_CONNECTIONS: JSON.stringify(
      Object.fromEntries(
        connections.map((name) => [
          name,
          {
            ...(name === 'sandbox'
              ? { variant: 'v3', baseUrl: simulator.url, secretId: 'open-api/v3' }
              : { variant: 'legacy', baseUrl: simulator.url, secretId: 'open-api/legacy' }),
            ...(probe
              ? { probe: { path: name === 'sandbox' ? '/open-api/v3/ping' : '/open-api/ping' } }
              : {}),
          },
        ]),
      ),
    ),
  };
  const client = new DynamoDBClient({
    endpoint: dynamodb.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  await ensureTable(client, tableName);
  client.destroy();
  return {
    dynamodb,
    simulator,
    secrets,
    kms,
    v3Client,
    legacyClient,
    tableName,
    env,
    credentials: () => [
      ...new Set([...simulator.handedOut(), v3Client.clientSecret, legacyClient.clientSecret]),
    ],
    close: async () => {
      await Promise.all([dynamodb.close(), simulator.close(), secrets.close(), kms.close()]);
    },
  };
};

/** Sets variables on process.env for the test file (each test file runs in its own process). */
export const applyEnv = (env: Record<string, string>) => {
  for (const [key, value] of Object.entries(env)) process.env[key] = value;
};
