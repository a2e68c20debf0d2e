/**
 * The container's wiring, once per container (cold start), loaded by the entry (./index.ts); a
 * bad configuration fails here, with a message naming the variable, the connection and the
 * field.
 */
import { createAwsBroker, createLogger, createMetrics } from '../../lib/adapters/aws.js';
import { loadConfigAtInit } from '../../lib/config/at-init.js';
import { type Compute, computeOf } from '../../lib/config/compute.js';
import { Invocations, type Registration, registerAfterResponse } from './after-response.js';
import { createHandler } from './handler.js';

/** Lambda gives the runtime 500 ms after SIGTERM with internal extensions only: kept under. */
const SHUTDOWN_BUDGET_MS = 400;

/** The parts of the runtime's InvokeStore (`@aws/lambda-invoke-store`) init uses. */
interface InvokeStore {
  hasContext(): boolean;
  run<T>(context: Record<string | symbol, unknown>, fn: () => T): T;
}

/**
 * Runs init in an invocation context of its own on Lambda Managed Instances (issue 37). There the
 * runtime creates its InvokeStore before it loads the function and runs only invocations in its
 * contexts; Powertools keeps its state in that store and throws "No context available" when
 * there is none: `new Metrics()` at init did, and any log line of init. Timers and work that init
 * starts keep that context. Elsewhere init runs as it is.
 */
const inInitContext = <T>(compute: Compute, fn: () => Promise<T>): Promise<T> => {
  const store = (globalThis as { awslambda?: { InvokeStore?: InvokeStore } }).awslambda
    ?.InvokeStore;
  if (compute !== 'managed-instances' || !store || store.hasContext()) return fn();
  return store.run({}, fn);
};

/**
 * Wires the broker and registers the extension, whose registration the entry sent already
 * (`runtimeApi` undefined: none, as on Lambda Managed Instances). Returns the Lambda handler.
 */
export const init = (
  runtimeApi: string | undefined,
  registration: Registration | undefined,
): Promise<ReturnType<typeof createHandler>> =>
  inInitContext(computeOf(process.env), () => wire(runtimeApi, registration));

const wire = async (
  runtimeApi: string | undefined,
  registration: Registration | undefined,
): Promise<ReturnType<typeof createHandler>> => {
  // Connections from an SSM parameter when BROKER_CONNECTIONS_PARAMETER names one (read once);
  // its module, and the SSM client with it, is loaded only then (a file of its own in the build).
  const env = process.env.BROKER_CONNECTIONS_PARAMETER?.trim()
    ? await (await import('../../lib/adapters/ssm-connections.js')).withConnectionsParameter(
        process.env,
      )
    : process.env;
  // loadConfig's answer; the schema library is loaded only for a configuration it must judge.
  const config = await loadConfigAtInit(env);
  const logger = createLogger();
  const metrics = createMetrics();

  const broker = createAwsBroker(config, logger, metrics);
  const invocations = new Invocations();

  // Work after the response (issue 17): in Lambda, an internal extension keeps the environment
  // thawed until a refresh the invocation started has ended. Registered during init, before the
  // runtime asks for its first invocation. On Lambda Managed Instances there is none (no
  // `runtimeApi`): nothing freezes, and the refresh goes on in the process after the answer.
  const registered = await registerAfterResponse({
    runtimeApi,
    registration,
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
  return createHandler({
    broker,
    logger,
    metrics,
    invocations,
    timeoutSettings: config,
    operatorCallers: config.operatorCallers,
    urlQualifier: config.urlQualifier,
  });
};
