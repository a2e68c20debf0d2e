/**
 * What a failed flow leaves behind, by what is known of its token request:
 * - the lease was lost before it (LeaseLost): nothing was sent; the new holder's token wins;
 * - its outcome is unknown: it may still land and revoke the token it replaces, so that token
 *   is dropped everywhere and the lease is held through the grace, so that no other POST
 *   starts while this one could land;
 * - it failed for sure: nothing was issued; the lease is freed and the token it would have
 *   replaced is good again.
 */
import { randomUUID } from 'node:crypto';
import type { ConnectionConfig } from '../config.js';
import { isOutcomeUnknown } from '../errors.js';
import { MetricName } from '../metrics.js';
import type { LeaseRef } from '../ports.js';
import { LeaseLost } from './held-lease.js';
import type { HolderDeps, LeasedFlow } from './holder-deps.js';

export const afterFailedFlow = async (
  deps: Pick<HolderDeps, 'store' | 'view' | 'clock' | 'logger' | 'metrics' | 'settings'> & {
    /** Cuts a store call to the caller's deadline: the caller is answered before it, always. */
    readonly bounded: <T>(operation: Promise<T>) => Promise<T>;
  },
  connection: ConnectionConfig,
  flow: LeasedFlow & {
    /** Until when the fence's confirmation reserved the lease for the POST and its grace. */
    readonly confirmedUntil: number | undefined;
    /** The lease as last written: its release and the grace name exactly it. */
    readonly held: LeaseRef;
  },
  error: unknown,
): Promise<undefined> => {
  const { name } = connection;
  const { store, view, clock, logger, metrics, settings, bounded } = deps;
  if (flow.suspect && flow.replacing && !isOutcomeUnknown(error)) {
    // I2. The lease this flow took over had counted down: its holder's POST may be out, and
    // the token it replaced revoked. That is why it was not served; letting the lease go would
    // make it servable again, so it goes first (compare-and-delete), as after an unknown outcome.
    view.forget(flow.replacing);
    await bounded(
      store.deleteIfMatches(name, flow.replacing.tokenDigest, { reportedAt: clock.now() }),
    ).catch(() => undefined);
  }
  if (error instanceof LeaseLost) {
    // Nothing was sent: our lease, if still ours, is freed; the new holder's token wins.
    await bounded(store.releaseLease(name, flow.held)).catch(() => undefined);
    logger.warn('Lease lost before the access-token request; nothing was sent', {
      connection: name,
      reason: error.message,
    });
    return undefined;
  }
  if (isOutcomeUnknown(error)) {
    // The POST may still land and revoke the token it replaces: that token is dropped now,
    // everywhere, and the lease is held through the grace so that no other POST starts
    // while this one could land. The next caller after the grace issues afresh.
    metrics.record(MetricName.UnknownOutcomes, name);
    logger.error('Access-token request outcome unknown; the current token is dropped', {
      connection: name,
      tokenDigest: flow.replacing?.tokenDigest,
      graceMs: settings.upstreamTimeoutMs,
    });
    if (flow.replacing) {
      view.forget(flow.replacing);
      await bounded(
        store.deleteIfMatches(name, flow.replacing.tokenDigest, { reportedAt: clock.now() }),
      ).catch(() => undefined);
    }
    await bounded(
      // Never shorter than what the confirmation reserved: the POST may land until then.
      renewForGrace(store, name, clock.now(), settings.upstreamTimeoutMs, flow),
    ).catch(() => undefined);
    throw error;
  }
  // The flow failed and nothing was issued: free the lease now rather than make others
  // wait for it to expire; the token it would have replaced is good again. Nobody could
  // replace it while we held the lease, and a replacement after it announces a countdown
  // that outlasts a re-check, so it counts as confirmed when we let go.
  // Only if the release proves we still held it: a holder paused past its lease may find that
  // another took over and revoked that token meanwhile.
  const releasedAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
  const held = await bounded(store.releaseLease(name, flow.held)).catch(() => false);
  if (flow.replacing && view.entry(name)?.record.tokenDigest === flow.replacing.tokenDigest) {
    if (held) view.confirmed(flow.replacing, releasedAt);
    else view.drop(name);
  }
  throw error;
};

/** The lease through the grace after a POST that may still land, and the reservation before it. */
const renewForGrace = (
  store: HolderDeps['store'],
  connection: string,
  now: number,
  graceMs: number,
  {
    confirmedUntil,
    held,
  }: { readonly confirmedUntil: number | undefined; readonly held: LeaseRef },
): Promise<boolean> => {
  // A new version, whose duration watchers count from when they first see it: never shorter,
  // on anyone's clock, than the reservation.
  const until = Math.max(now + graceMs, confirmedUntil ?? 0);
  return store.renewLease(connection, held, {
    version: randomUUID(),
    leaseExpiresAt: until,
    durationMs: until - now,
    countdown: 0,
  });
};
