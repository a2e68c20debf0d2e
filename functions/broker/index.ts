/**
 * Lambda entry point. Everything is wired once per container (cold start); a bad configuration
 * fails here, with a message naming the variable, the connection and the field.
 */
import { createAwsBroker, createLogger, createMetrics } from '../../lib/adapters/aws.js';
import { loadConfig } from '../../lib/config.js';
import { createHandler } from './handler.js';

const config = loadConfig(process.env);
const logger = createLogger();
const metrics = createMetrics();

export const handler = createHandler({
  broker: createAwsBroker(config, logger, metrics),
  logger,
  metrics,
});
