/**
 * The holder's flow, which drives `held-lease.ts` through its states: authorize while the
 * lease counts down, the fence, the access-token POST, then the token write, which releases the
 * lease in the same step (only under the very version it confirmed: I1). What a failed flow
 * leaves behind is `failed-flow.ts`'s.
 */
import type { ConnectionConfig } from '../config.js';
import { isOutcomeUnknown } from '../errors.js';
import type { TokenRecord } from '../ports.js';
import { afterFailedFlow } from './failed-flow.js';
import { HeldLease } from './held-lease.js';
import type { HolderDeps, LeasedFlow } from './holder-deps.js';
import { recordIssued } from './issued-token.js';
import { unsatisfiable } from './observer.js';
import { ownRecheckMs, PROOF_MARGIN_MS, STORE_RESERVE_MS } from './timing/index.js';
import type { ServedToken } from './types.js';

/** The lease was lost during a flow: the new holder's token wins. */
export const LOST = Symbol('lost');

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
  const { clock, store, logger, settings, view, bounded } = deps;
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
    bounded,
  });
  deps.held?.add(lease);
  let record: TokenRecord;
  try {
    // Authorize while the lease counts down; the fence waits for the countdown's end, then
    // confirms the lease; only then does the POST leave (I1, I2).
    const started = clock.monotonic();
    const issued = await deps.issue(connection, {
      deadline: flow.deadline.minus(STORE_RESERVE_MS),
      signal: lease.signal,
      fence: () => lease.fence(),
    });
    lease.stop();
    const took = clock.monotonic() - started;
    measured(took - lease.waitedMs);
    const issuedRecord = recordIssued(connection, issued, took, deps, flow);
    // The re-check this container's readers apply travels with the token (mixed settings, I2).
    record = { ...issuedRecord, recheckMs: ownRecheckMs(issuedRecord, settings) };
  } catch (error) {
    lease.end(isOutcomeUnknown(error) ? { type: 'outcome-unknown' } : { type: 'failed' });
    deps.held?.delete(lease);
    await afterFailedFlow(
      { ...deps, bounded: (operation) => bounded(operation, flow.deadline.leftMs()) },
      connection,
      { ...flow, confirmedUntil: lease.confirmedUntil, held: lease.ref },
      error,
    );
    return LOST;
  }
  // When memory may vouch for the token: a re-check from now, or, if it could not be written,
  // only until other containers may take the confirmed lease over (and revoke it by issuing).
  const writtenAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
  let untilAtMost = Number.POSITIVE_INFINITY;
  let written: boolean;
  try {
    written = await bounded(store.putToken(record, lease.ref), flow.deadline.leftMs());
  } catch (error) {
    // The token is valid: serve it rather than fail the caller, and keep it in memory only
    // while the confirmed lease keeps everyone else from replacing it.
    logger.error('Token store write failed; token kept in memory only', {
      connection: name,
      error: { name: (error as Error)?.name },
    });
    written = true;
    untilAtMost = (lease.confirmedUntil ?? writtenAt.sentAt) - PROOF_MARGIN_MS;
  }
  lease.end(written ? { type: 'token-written' } : { type: 'token-refused' });
  deps.held?.delete(lease);
  if (!written) {
    logger.warn('Lease was taken over while issuing; using the new holder’s token', {
      connection: name,
      tokenDigest: record.tokenDigest,
    });
    // Our token request went out: the token it replaced is revoked, wherever it is held.
    if (flow.replacing) view.forget(flow.replacing);
    return LOST;
  }
  view.confirmed(record, writtenAt, untilAtMost);
  if (record.expiresAt - clock.now() <= flow.needMs) throw unsatisfiable(record, flow.needMs);
  return { record, source: 'upstream' };
};
