/**
 * The holder's flow: authorize while the lease counts down, the fence, the access-token POST,
 * then the token write, which releases the lease in the same step (only under the very version
 * it confirmed: I1). What the holder does at each step, and after a failure, is `step`'s
 * (`holder/state.ts`); `held-lease.ts` runs it. This file runs the upstream flow, tells the
 * holder how it was answered, and tells the caller how it ended.
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
 * Runs the flow while holding the lease and writes the token, which releases the lease.
 * LOST when the lease was lost meanwhile (the new holder's token wins).
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
    // Authorize while the lease counts down; the fence waits for the countdown's end, then
    // confirms the lease; only then does the POST leave (I1, I2).
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
  // When memory may vouch for the token: a re-check from now, or, if it could not be written,
  // only until other containers may take the confirmed lease over (and revoke it by issuing).
  let untilAtMost = Number.POSITIVE_INFINITY;
  if (outcome === 'written-in-memory') {
    // The token is valid: serve it rather than fail the caller, and keep it in memory only
    // while the confirmed lease keeps everyone else from replacing it.
    // Counted on the monotonic clock from the token write's send: the confirmation's stored
    // expiry is a wall-clock instant, and a wall clock stepped back during the POST would let
    // memory outlast the lease that others take over (and issue under) at its duration. I2.
    const confirmedForMs =
      (lease.confirmedUntilMonotonic ?? writtenAt.sentAtMonotonic) - writtenAt.sentAtMonotonic;
    untilAtMost = writtenAt.sentAt + confirmedForMs - settings.timing.proofMarginMs;
  }
  view.confirmed(written, writtenAt, untilAtMost);
  if (written.expiresAt - clock.now() <= flow.needMs) throw unsatisfiable(written, flow.needMs);
  return { record: written, source: 'upstream' };
};
