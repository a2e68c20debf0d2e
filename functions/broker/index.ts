/**
 * Lambda entry point. Everything is wired once per container (cold start); a bad configuration
 * fails here, with a message naming the variable, the connection and the field.
 */
import { createAwsBroker, createLogger, createMetrics } from '../../lib/adapters/aws.js';
import { loadConfig } from '../../lib/config.js';
import { Invocations, registerAfterResponse } from './after-response.js';
import { createHandler } from './handler.js';

/** Lambda gives the runtime 500 ms after SIGTERM with internal extensions only: kept under. */
const SHUTDOWN_BUDGET_MS = 400;

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

const broker = createAwsBroker(config, logger, metrics);
const invocations = new Invocations();

// Work after the response (issue 17): in Lambda, an internal extension keeps the environment
// thawed until a refresh the invocation started has ended. Registered during init, before the
// runtime asks for its first invocation.
const registered = await registerAfterResponse({
  // BROKER_LAMBDA_EXTENSION=off: none (for comparison; see docs/configuration.md).
  runtimeApi:
    process.env.BROKER_LAMBDA_EXTENSION?.trim() === 'off'
      ? undefined
      : process.env.AWS_LAMBDA_RUNTIME_API,
  idle: () => broker.idle(),
  invocations,
  log: logger,
});

// Shutdown: with an extension registered, Lambda sends the runtime SIGTERM before it ends the
// environment. Leases held here are given up and released, so no other container waits them out.
if (registered) {
  process.once('SIGTERM', () => {
    void broker.shutdown(broker.deadlineIn(SHUTDOWN_BUDGET_MS)).finally(() => process.exit(0));
  });
}

// The function's timeout is known only at the first invocation: the settings are checked then.
export const handler = createHandler({
  broker,
  logger,
  metrics,
  invocations,
  timeoutSettings: config,
});
