/**
 * Wires the broker to AWS. Clients are built without explicit endpoints, so the standard
 * AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SECRETS_MANAGER variables redirect them.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { Metrics } from '@aws-lambda-powertools/metrics';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import type { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { TokenBroker } from '../broker/index.js';
import type { BrokerConfig } from '../config.js';
import { type BrokerMetrics, MetricName } from '../metrics.js';
import type { SecretSource, TokenCipher, TokenIssuer, TokenProbe } from '../ports.js';
import { DynamoDBTokenStore } from './dynamodb-token-store.js';
import { EmfMetrics } from './emf-metrics.js';

/** Structured JSON logs; level from POWERTOOLS_LOG_LEVEL, service from POWERTOOLS_SERVICE_NAME. */
export const createLogger = (): Logger => new Logger({ serviceName: 'token-broker' });

/** CloudWatch metrics as EMF; namespace from POWERTOOLS_METRICS_NAMESPACE (default TokenBroker). */
export const createMetrics = (): EmfMetrics =>
  new EmfMetrics(new Metrics({ namespace: 'TokenBroker', serviceName: 'token-broker' }));

/**
 * Every AWS client's limits: a stalled connection (accepts, never answers) fails within
 * `timeoutMs`, twice at most, instead of holding the caller past its Lambda deadline. Without
 * `throwOnRequestTimeout`, the SDK's HTTP handler only logs a warning when `requestTimeout`
 * passes and keeps waiting (found by the chaos suite: a lost DynamoDB answer held a call 5 s).
 */
export const boundedClientConfig = (timeoutMs: number) => ({
  maxAttempts: 2,
  requestHandler: {
    connectionTimeout: timeoutMs,
    requestTimeout: timeoutMs,
    throwOnRequestTimeout: true,
  },
});

export interface AwsClients {
  readonly dynamodb?: DynamoDBClient;
  readonly secretsManager?: SecretsManagerClient;
  readonly fetch?: typeof fetch;
}

export const createAwsBroker = (
  config: BrokerConfig,
  logger: Logger,
  metrics?: BrokerMetrics,
  clients: AwsClients = {},
): TokenBroker => {
  // Secrets are needed only to issue a token, never to serve one from DynamoDB: the Secrets
  // Manager client is loaded on the first issuance, keeping it out of the cold start. These
  // dynamic imports name this project's own modules (which import the SDK clients statically):
  // in the bundle each is a chunk that a cold start neither loads nor parses (issue 25).
  const bounded = boundedClientConfig(config.awsTimeoutMs);
  const secrets = lazySecretSource(async () =>
    (await import('./secrets-manager-secret-source.js')).secretsManagerSecretSource(
      bounded,
      clients.secretsManager,
      config.secretMaxAgeSeconds,
      {
        staleMaxSeconds: config.secretStaleMaxSeconds,
        onStale: (secretId, reason) =>
          logger.warn('Secrets Manager unavailable; using the last secret read', {
            secretId,
            reason,
          }),
      },
    ),
  );
  const { kmsKeyId } = config;
  if (!kmsKeyId) {
    logger.warn(
      'BROKER_KMS_KEY_ID is not set: tokens are stored without application-level encryption (the table encryption still applies)',
    );
  }
  // Loaded on the first read or write of a token, not at cold start.
  const cipher = kmsKeyId
    ? lazyCipher(async () =>
        (await import('./kms-token-cipher.js')).kmsTokenCipher(bounded, kmsKeyId),
      )
    : undefined;
  // The upstream client (and its resilience library) is needed only to issue a token, or to
  // probe a reported one: one client for both, built on first use.
  const openApi = onFirstUse(async () => {
    const [{ OpenApiClient }, { DEFAULT_RESILIENCE, UpstreamResilience }] = await Promise.all([
      import('../upstream/open-api.js'),
      import('../upstream/resilience.js'),
    ]);
    return new OpenApiClient({
      timeoutMs: config.upstreamTimeoutMs,
      limits: { maxLifetimeSeconds: config.maxTokenLifetimeSeconds },
      resilience: new UpstreamResilience({
        ...DEFAULT_RESILIENCE,
        onCircuitChange: (connection, state) => {
          if (state === 'open') {
            metrics?.record(MetricName.CircuitOpened, connection);
            logger.error('Open API circuit opened: calls pause, cached tokens are still served', {
              connection,
            });
          } else {
            logger.info(`Open API circuit ${state}`, { connection });
          }
        },
      }),
      ...(clients.fetch ? { fetch: clients.fetch } : {}),
    });
  });
  return new TokenBroker({
    config,
    timing: config.timing,
    logger,
    ...(metrics ? { metrics } : {}),
    store: new DynamoDBTokenStore(
      clients.dynamodb ?? new DynamoDBClient(bounded),
      config.tableName,
      cipher,
      // Conflicts (MRSC) are retried for as long as one call may already take under the SDK's
      // own bounds (`maxAttempts` × the request timeout): a conflict holds a caller no longer
      // than a store that does not answer would.
      { conflictRetry: { budgetMs: bounded.maxAttempts * config.awsTimeoutMs } },
    ),
    secrets,
    issuer: lazyIssuer(openApi),
    probe: lazyProbe(openApi),
  });
};

/**
 * Builds a dependency on first use, once (concurrent first uses share the build). The modules
 * it imports dynamically stay out of the cold start: in the bundle they are chunks of their own
 * (scripts/build.mjs), loaded on first use.
 */
const onFirstUse = <T>(load: () => Promise<T>): (() => Promise<T>) => {
  let value: Promise<T> | undefined;
  return () => {
    value ??= load();
    return value;
  };
};

const lazyIssuer = (issuer: () => Promise<TokenIssuer>): TokenIssuer => {
  return {
    authorize: async (...args) => (await issuer()).authorize(...args),
    requestToken: async (...args) => (await issuer()).requestToken(...args),
  };
};

const lazyProbe = (probe: () => Promise<TokenProbe>): TokenProbe => ({
  probe: async (...args) => (await probe()).probe(...args),
});

/**
 * The cipher, loaded on first use. `prepare` starts the load without waiting: the store calls it
 * as it sends a read, so that a cold start with `BROKER_KMS_KEY_ID` loads the KMS client while
 * DynamoDB answers, not after. A load that fails fails the `open` or `seal` that awaits it.
 */
export const lazyCipher = (load: () => Promise<TokenCipher>): TokenCipher => {
  const cipher = onFirstUse(load);
  return {
    seal: async (...args) => (await cipher()).seal(...args),
    open: async (...args) => (await cipher()).open(...args),
    prepare: () => {
      cipher().catch(() => undefined);
    },
  };
};

const lazySecretSource = (load: () => Promise<SecretSource>): SecretSource => {
  const source = onFirstUse(load);
  return { getCredentials: async (...args) => (await source()).getCredentials(...args) };
};
