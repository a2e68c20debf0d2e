/** The whole Lambda handler as tests run it, and the output it writes. */
import { createHandler } from '../../functions/broker/handler.js';
import { createAwsBroker, createLogger, createMetrics } from '../../lib/adapters/aws.js';
import { loadConfig } from '../../lib/config.js';
import type { LambdaHandler } from '../../local/lambda-events.js';

/** A new container: the production wiring, configured from process.env at this moment. */
export const newContainer = (): LambdaHandler => {
  const logger = createLogger();
  const metrics = createMetrics();
  const config = loadConfig(process.env);
  return createHandler({
    broker: createAwsBroker(config, logger, metrics),
    logger,
    metrics,
    operatorCallers: config.operatorCallers,
    urlQualifier: config.urlQualifier,
  }) as LambdaHandler;
};

/** A new container configured without the variable `name` (put back right after). */
export const newContainerWithout = (name: string): LambdaHandler => {
  const saved = process.env[name];
  delete process.env[name];
  try {
    return newContainer();
  } finally {
    if (saved !== undefined) process.env[name] = saved;
  }
};

/**
 * Records everything written to stdout and stderr (Powertools logs and EMF lines) until stopped,
 * instead of printing it: `npm test` prints a test report, not logs. Set TEST_ECHO_LOGS=1 to
 * see them as well while debugging.
 */
export const captureOutput = () => {
  const chunks: string[] = [];
  const undo: (() => void)[] = [];
  const echo = process.env.TEST_ECHO_LOGS === '1';
  for (const stream of [process.stdout, process.stderr]) {
    const write = stream.write.bind(stream);
    stream.write = ((chunk: string | Uint8Array, ...rest: unknown[]) => {
      chunks.push(typeof chunk === 'string' ? chunk : Buffer.from(chunk).toString('utf8'));
      if (echo) return (write as (...args: unknown[]) => boolean)(chunk, ...rest);
      // A write's callback (last argument, when given) still fires, as the stream's would.
      const done = rest.at(-1);
      if (typeof done === 'function') queueMicrotask(() => done());
      return true;
    }) as typeof stream.write;
    undo.push(() => {
      stream.write = write as typeof stream.write;
    });
  }
  return {
    text: () => chunks.join(''),
    /** A point in the output: `since(mark)` is what was written after it. */
    mark: () => chunks.length,
    since: (mark: number) => chunks.slice(mark).join(''),
    stop: () => {
      for (const restore of undo) restore();
    },
  };
};
