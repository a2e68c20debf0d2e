/**
 * The baseline the benchmark compares the broker with: what public clients of this Open API
 * do. Each container authenticates for itself and caches its token in memory, refreshing it
 * when it enters the same window the broker uses. It runs the broker's own upstream client and
 * secret source, so the only difference measured is the sharing.
 */
import { SecretsProvider } from '@aws-lambda-powertools/parameters/secrets';
import { SecretsManagerClient } from '@aws-sdk/client-secrets-manager';
import { SecretsManagerSecretSource } from '../lib/adapters/secrets-manager-secret-source.js';
import { issueWith } from '../lib/broker/issuance/index.js';
import { Deadline, systemClock } from '../lib/clock.js';
import { loadConfig } from '../lib/config.js';
import { OpenApiClient } from '../lib/upstream/open-api.js';

const config = loadConfig(process.env);
const secrets = new SecretsManagerSecretSource(
  new SecretsProvider({ awsSdkV3Client: new SecretsManagerClient({}) }),
  config.secretMaxAgeSeconds,
);
const client = new OpenApiClient({
  timeoutMs: config.upstreamTimeoutMs,
  limits: { maxLifetimeSeconds: config.maxTokenLifetimeSeconds },
});
const memory = new Map<string, { accessToken: string; expiresAt: number }>();

interface Event {
  action: 'getToken' | 'invalidate';
  connection: string;
  accessToken?: string;
  source?: string;
}

export const handler = async (event: Event) => {
  if (event.source === 'aws.events') return { skipped: true };
  const connection = config.connections.get(event.connection);
  if (!connection) throw new Error(`Unknown connection '${event.connection}'`);
  const cached = memory.get(connection.name);
  if (event.action === 'invalidate') {
    const invalidated = cached?.accessToken === event.accessToken;
    if (invalidated) memory.delete(connection.name);
    return { invalidated };
  }
  if (cached && cached.expiresAt - Date.now() > config.refreshWindowSeconds * 1000) {
    return { connection: connection.name, ...cached };
  }
  const credentials = await secrets.getCredentials(connection.secretId);
  const issued = await issueWith(client, connection, credentials, {
    deadline: Deadline.in(systemClock, 10_000),
  });
  const token = {
    accessToken: issued.accessToken,
    expiresAt: issued.requestedAt + issued.expiresIn * 1000,
  };
  memory.set(connection.name, token);
  return { connection: connection.name, ...token };
};
