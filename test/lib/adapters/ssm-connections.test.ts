/**
 * Connections from an SSM parameter, read by the real `@aws-sdk/client-ssm` through
 * AWS_ENDPOINT_URL_SSM from a loopback endpoint that speaks GetParameter.
 */
import { SSMClient } from '@aws-sdk/client-ssm';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { withConnectionsParameter } from '../../../lib/adapters/ssm-connections.js';
import { loadConfig } from '../../../lib/config.js';
import { ConfigError } from '../../../lib/errors.js';
import { type SsmEmulator, startSsmEmulator } from '../../../local/ssm-emulator.js';
import { caught, unexpected } from '../../support/errors.js';

let ssm: SsmEmulator;
let client: SSMClient;
const connections = JSON.stringify({
  sandbox: { variant: 'v3', baseUrl: 'https://sandbox.example.com', secretId: 'open-api/sandbox' },
});

beforeAll(async () => {
  ssm = await startSsmEmulator();
  client = new SSMClient({
    endpoint: ssm.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
});
afterAll(async () => {
  client.destroy();
  await ssm.close();
});

describe('Function: withConnectionsParameter', () => {
  it('reads the connections from the parameter, once, for the one configuration loader', async () => {
    ssm.setParameter('/token-broker/prod/connections', connections);
    const before = ssm.calls();
    const env = await withConnectionsParameter(
      {
        BROKER_TABLE_NAME: 'tokens',
        BROKER_CONNECTIONS_PARAMETER: '/token-broker/prod/connections',
      },
      { client },
    );
    expect(ssm.calls() - before).toBe(1);
    expect(loadConfig(env).connections.get('sandbox')?.secretId).toBe('open-api/sandbox');
  });

  it('leaves the environment alone without the variable (no SSM call)', async () => {
    const before = ssm.calls();
    const env = { BROKER_CONNECTIONS: connections };
    expect(await withConnectionsParameter(env, { client })).toBe(env);
    expect(ssm.calls()).toBe(before);
  });

  it('refuses both variables at once, and names a parameter it cannot read or that is empty', async () => {
    const both = await withConnectionsParameter(
      { BROKER_CONNECTIONS: connections, BROKER_CONNECTIONS_PARAMETER: '/x' },
      { client },
    ).then(unexpected, caught);
    expect(both).toBeInstanceOf(ConfigError);
    expect(both.message).toBe(
      'Set BROKER_CONNECTIONS or BROKER_CONNECTIONS_PARAMETER, not both: which one holds the connections?',
    );
    const missing = await withConnectionsParameter(
      { BROKER_CONNECTIONS_PARAMETER: '/token-broker/none' },
      { client },
    ).then(unexpected, caught);
    expect(missing).toBeInstanceOf(ConfigError);
    expect(missing.message).toBe(
      "BROKER_CONNECTIONS_PARAMETER: parameter '/token-broker/none' could not be read (ParameterNotFound)",
    );
    ssm.setParameter('/token-broker/blank', ' ');
    const blank = await withConnectionsParameter(
      { BROKER_CONNECTIONS_PARAMETER: '/token-broker/blank' },
      { client },
    ).then(unexpected, caught);
    expect(blank.message).toBe(
      "BROKER_CONNECTIONS_PARAMETER: parameter '/token-broker/blank' is empty",
    );
  });
});
