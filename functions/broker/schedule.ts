/** The EventBridge "Scheduled Event" (no custom input): warm every connection's token. */
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context, ScheduledEvent } from 'aws-lambda';
import type { TokenBroker, WarmUpReport } from '../../lib/broker/index.js';
import type { BrokerError } from '../../lib/errors.js';
import { logRefusal } from './errors.js';
import { deadlineOf } from './shared.js';
import type { TimeoutGate } from './timeout-gate.js';

export const isScheduledEvent = (event: unknown): event is ScheduledEvent => {
  const candidate = event as Partial<ScheduledEvent> | null;
  return (
    typeof candidate === 'object' &&
    candidate !== null &&
    candidate.source === 'aws.events' &&
    candidate['detail-type'] === 'Scheduled Event'
  );
};

export const createScheduleHandler =
  (broker: TokenBroker, logger: Logger, gate: TimeoutGate = () => {}) =>
  async (_event: ScheduledEvent, context: Context): Promise<WarmUpReport> => {
    try {
      gate(context);
    } catch (error) {
      logRefusal(logger, error as BrokerError);
      throw error;
    }
    const report = await broker.warmUp(deadlineOf(broker, context));
    const log = report.failed > 0 ? logger.error.bind(logger) : logger.info.bind(logger);
    log('Warm-up finished', { issued: report.issued, failed: report.failed, report });
    return report;
  };
