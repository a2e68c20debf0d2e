/**
 * The holder's flow: authorize while the lease counts down, the fence, the POST, then the token
 * write, which releases the lease under the version it confirmed (I1). Decisions are `step`'s.
 */
import type { ConnectionConfig } from '../../config.js';
import { isOutcomeUnknown } from '../../errors.js';
import { MetricName } from '../../metrics.js';
import type { TokenRecord } from '../../ports.js';
import { recordIssued } from '../issuance/index.js';
import { unsatisfiable } from '../observer/index.js';
import { ownRecheckMs, storeReserveMs } from '../timing/index.js';
import type { ServedToken } from '../types.js';
import type { HolderDeps, LeasedFlow } from './deps.js';
import { cleanUp } from './failed-flow.js';
import { HeldLease, LeaseLost } from './held-lease.js';
import type { PostAnswer } from './state.js';

/** The lease was lost during a flow: the new holder's token wins. */
export const LOST = Symbol('lost');

/** How the upstream answered the flow, for the holder (the one place errors are classified). */
const answerOf = (error: unknown): PostAnswer =>
  isOutcomeUnknown(error) ? 'outcome-unknown' : error instanceof LeaseLost ? 'not-sent' : 'failed';

/**
 * Runs the flow under the lease and writes the token; LOST when the lease was lost meanwhile.
 * @param measured called with the issuance's duration, countdown excluded (XFetch's δ)
 */
export const issueUnderLease = async (
  deps: HolderDeps,
  connection: ConnectionConfig,
  flow: LeasedFlow,
  measured: (issuanceMs: number) => void,
): Promise<ServedToken | typeof LOST> => {
  const { name } = connection;
  const { clock, store, logger, metrics, settings, view, bounded } = deps;
  let record: TokenRecord | undefined;
  const writtenAt = { sentAt: 0, sentAtMonotonic: 0 };
  const lease = new HeldLease({
    store,
    clock,
    connection: name,
    lease: flow.lease,
    deadline: flow.deadline,
    leasedAt: flow.leasedAt,
    answeredAt: flow.answeredAt,
    countdown: flow.countdown,
    upstreamTimeoutMs: settings.upstreamTimeoutMs,
    timing: settings.timing,
    // Stryker disable next-line ConditionalExpression: equivalent: the clean-up skips a flow that replaces no token
    replacesToken: flow.replaced !== undefined,
    suspect: flow.suspect,
    bounded,
    effects: {
      ...cleanUp(
        { ...deps, bounded: (operation) => bounded(operation, flow.deadline.leftMs()) },
        connection,
        flow,
      ),
      writeToken: (ref) => {
        Object.assign(writtenAt, { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() });
        return bounded(
          store.putToken(record as TokenRecord, ref, { deadline: flow.deadline }),
          flow.deadline.leftMs(),
        ).catch((error: unknown) => {
          logger.error('Token store write failed; token kept in memory only', {
            connection: name,
            error: { name: (error as Error)?.name },
          });
          throw error;
        });
      },
    },
  });
  deps.held?.add(lease);
  const started = clock.monotonic();
  let failure: unknown;
  try {
    // The fence waits for the countdown's end and confirms the lease before the POST (I1, I2).
    const issued = await deps.issue(connection, {
      deadline: flow.deadline.minus(storeReserveMs(settings.timing)),
      signal: lease.signal,
      fence: () => lease.fence(),
    });
    const took = clock.monotonic() - started;
    measured(took - lease.waitedMs);
    const issuedRecord = recordIssued(connection, issued, took, deps, flow);
    // The re-check this container's readers apply travels with the token (mixed settings, I2).
    record = { ...issuedRecord, recheckMs: ownRecheckMs(issuedRecord, settings) };
  } catch (error) {
    failure = error;
  }
  const outcome = await lease.answered(record ? 'issued' : answerOf(failure));
  deps.held?.delete(lease);
  switch (outcome) {
    case 'lost':
      logger.warn('Lease lost before the access-token request; nothing was sent', {
        connection: name,
        reason: (failure as Error)?.message,
      });
      return LOST;
    case 'outcome-unknown':
      metrics.record(MetricName.UnknownOutcomes, name);
      logger.error('Access-token request outcome unknown; the current token is dropped', {
        connection: name,
        tokenDigest: flow.replaced?.tokenDigest,
        graceMs: settings.upstreamTimeoutMs,
      });
      throw failure;
    case 'failed':
      throw failure;
    case 'superseded':
      logger.warn('Lease was taken over while issuing; using the new holder’s token', {
        connection: name,
        tokenDigest: record?.tokenDigest,
      });
      return LOST;
    default:
      break;
  }
  const written = record as TokenRecord;
  // When memory may vouch for the token: a re-check, or, if unwritten, the confirmed lease's term.
  let untilAtMost = Number.POSITIVE_INFINITY;
  if (outcome === 'written-in-memory') {
    // On the monotonic clock from the token write's send, so a wall clock stepped back cannot
    // let memory outlast the confirmed lease. I2.
    const confirmedForMs =
      (lease.confirmedUntilMonotonic ?? writtenAt.sentAtMonotonic) - writtenAt.sentAtMonotonic;
    untilAtMost = writtenAt.sentAt + confirmedForMs - settings.timing.proofMarginMs;
  }
  view.confirmed(written, writtenAt, untilAtMost);
  if (written.expiresAt - clock.now() <= flow.needMs) throw unsatisfiable(written, flow.needMs);
  return { record: written, source: 'upstream' };
};
