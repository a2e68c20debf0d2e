/**
 * Lambda entry point. Everything is wired once per container (cold start); a bad configuration
 * fails here, with a message naming the variable, the connection and the field.
 */
import { createAwsBroker, createLogger, createMetrics } from '../../lib/adapters/aws.js';
import { loadConfig } from '../../lib/config.js';
import { createHandler } from './handler.js';

// Connections from an SSM parameter when BROKER_CONNECTIONS_PARAMETER names one (read once);
// its module, and the SSM client with it, is loaded only then (a file of its own in the build).
const env = process.env.BROKER_CONNECTIONS_PARAMETER?.trim()
  ? await (await import('../../lib/adapters/ssm-connections.js')).withConnectionsParameter(
      process.env,
    )
  : process.env;
const config = loadConfig(env);
const logger = createLogger();
const metrics = createMetrics();

export const handler = createHandler({
  broker: createAwsBroker(config, logger, metrics),
  logger,
  metrics,
});
