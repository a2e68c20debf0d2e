/**
 * Wires the broker to AWS. Clients are built without explicit endpoints, so the standard
 * AWS_ENDPOINT_URL_DYNAMODB / AWS_ENDPOINT_URL_SECRETS_MANAGER variables redirect them.
 */
import { Logger } from '@aws-lambda-powertools/logger';
import { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { TokenBroker } from '../broker.js';
import type { BrokerConfig } from '../config.js';
import { OpenApiClient } from '../upstream/open-api.js';
import { DynamoDBTokenStore } from './dynamodb-token-store.js';
import { SecretsManagerSecretSource } from './secrets-manager-secret-source.js';

/** Structured JSON logs; level from POWERTOOLS_LOG_LEVEL, service from POWERTOOLS_SERVICE_NAME. */
export const createLogger = (): Logger => new Logger({ serviceName: 'token-broker' });

export interface AwsClients {
  readonly dynamodb?: DynamoDBClient;
  readonly secretsManager?: SecretsManagerClient;
  readonly fetch?: typeof fetch;
}

export const createAwsBroker = (
  config: BrokerConfig,
  logger: Logger,
  clients: AwsClients = {},
): TokenBroker => {
  const secretsProvider = new SecretsProvider({
    awsSdkV3Client: clients.secretsManager ?? new SecretsManagerClient({}),
  });
  return new TokenBroker({
    config,
    logger,
    store: new DynamoDBTokenStore(clients.dynamodb ?? new DynamoDBClient({}), config.tableName),
    secrets: new SecretsManagerSecretSource(secretsProvider, config.secretMaxAgeSeconds),
    issuer: new OpenApiClient({
      timeoutMs: config.upstreamTimeoutMs,
      limits: { maxLifetimeSeconds: config.maxTokenLifetimeSeconds },
      ...(clients.fetch ? { fetch: clients.fetch } : {}),
    }),
  });
};
