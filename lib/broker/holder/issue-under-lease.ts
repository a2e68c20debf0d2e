/**
 * The holder's flow: authorize while the lease counts down, the fence, the POST, then the token
 * write, which releases the lease under the version it confirmed (I1). Decisions are `step`'s;
 * the clean-up after a failed flow is a best-effort store call each, cut to the caller's deadline.
 */
import { randomUUID } from 'node:crypto';
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { isOutcomeUnknown } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { ReplacedToken, TokenRecord, TokenStore } from '../../ports.js';
import { type Issuance, type Issue, recordIssued } from '../issuance/index.js';
import { type CallerBoundSettings, unsatisfiable } from '../observer/index.js';
import { ownRecheckMs, storeReserveMs } from '../timing/index.js';
import type { BrokerLogger, ServedToken } from '../types.js';
import type { ConnectionView } from '../view/index.js';
import { HeldLease, type HeldLeaseOptions, type HolderEffects, LeaseLost } from './held-lease.js';
import type { PostAnswer } from './state.js';

export interface HolderDeps {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly issue: Issue;
  readonly view: ConnectionView;
  readonly settings: CallerBoundSettings & { readonly upstreamTimeoutMs: number };
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  /** The leases this container holds now (given up when its environment shuts down). */
  readonly held: Set<{ abandon(reason: string): void }>;
  /** Cuts a store call to `waitMs`: the caller is answered before its deadline, always (I3). */
  readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
}

/** One run of the upstream flow under a lease (`suspect`: `replaced` may already be revoked). */
export interface LeasedFlow
  extends Pick<
      HeldLeaseOptions,
      'lease' | 'deadline' | 'leasedAt' | 'answeredAt' | 'countdown' | 'suspect'
    >,
    Issuance {
  /** The valid token replaced (dropped if the POST is lost), or a suspect one, maybe unreadable. */
  readonly replaced: ReplacedToken | undefined;
}

/** The lease was lost during a flow: the new holder's token wins. */
export const LOST = Symbol('lost');

/** How the upstream answered the flow, for the holder (the one place errors are classified). */
const answerOf = (error: unknown): PostAnswer =>
  isOutcomeUnknown(error) ? 'outcome-unknown' : error instanceof LeaseLost ? 'not-sent' : 'failed';

/** Runs the flow under the lease and writes the token; LOST when the lease was lost meanwhile. */
export const issueUnderLease = async (
  deps: HolderDeps,
  connection: ConnectionConfig,
  flow: LeasedFlow,
): Promise<ServedToken | typeof LOST> => {
  const { name } = connection;
  const { clock, store, logger, metrics, settings, view, bounded } = deps;
  let record: TokenRecord | undefined;
  let writtenAt = { sentAt: 0, sentAtMonotonic: 0 };
  const lease = new HeldLease({
    ...flow,
    store,
    clock,
    connection: name,
    upstreamTimeoutMs: settings.upstreamTimeoutMs,
    timing: settings.timing,
    // Stryker disable next-line ConditionalExpression: equivalent: the clean-up skips a flow that replaces no token
    replacesToken: flow.replaced !== undefined,
    bounded,
    effects: {
      ...cleanUp(deps, connection, flow),
      writeToken: (ref) => {
        writtenAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
        const put = store.putToken(record as TokenRecord, ref, { deadline: flow.deadline });
        return bounded(put, flow.deadline.leftMs()).catch((error: unknown) => {
          logger.error('Token store write failed; token kept in memory only', {
            connection: name,
            error: { name: (error as Error)?.name },
          });
          throw error;
        });
      },
    },
  });
  deps.held.add(lease);
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
    // The issuance's duration, countdown excluded (XFetch's δ).
    view.measured(name, 'issuance', took - lease.state.waitedMs);
    const issuedRecord = recordIssued(connection, issued, took, deps, flow);
    // The re-check this container's readers apply travels with the token (mixed settings, I2).
    record = { ...issuedRecord, recheckMs: ownRecheckMs(issuedRecord, settings) };
  } catch (error) {
    failure = error;
  }
  const outcome = await lease.answered(record ? 'issued' : answerOf(failure));
  deps.held.delete(lease);
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
  }
  const written = record as TokenRecord;
  // When memory may vouch for the token: a re-check, or, if unwritten, the confirmed lease's term.
  let untilAtMost = Number.POSITIVE_INFINITY;
  if (outcome === 'written-in-memory') {
    // On the monotonic clock from the token write's send, so a wall clock stepped back cannot
    // let memory outlast the confirmed lease. I2.
    const confirmedForMs =
      (lease.state.confirmedUntilMonotonic ?? writtenAt.sentAtMonotonic) -
      writtenAt.sentAtMonotonic;
    untilAtMost = writtenAt.sentAt + confirmedForMs - settings.timing.proofMarginMs;
  }
  view.confirmed(written, writtenAt, untilAtMost);
  if (written.expiresAt - clock.now() <= flow.needMs) throw unsatisfiable(written, flow.needMs);
  return { record: written, source: 'upstream' };
};

/** The clean-up after a failed flow, each a best-effort store call cut to the deadline. */
export const cleanUp = (
  { store, view, clock, bounded: cut }: Pick<HolderDeps, 'store' | 'view' | 'clock' | 'bounded'>,
  { name }: ConnectionConfig,
  { replaced, deadline }: Pick<LeasedFlow, 'replaced' | 'deadline'>,
): Omit<HolderEffects, 'writeToken'> => {
  const attempt = <T>(call: Promise<T>) => cut(call, deadline.leftMs()).catch(() => undefined);
  return {
    dropReplaced: async () => {
      // Stryker disable next-line ConditionalExpression: equivalent: the holder commands it only when the flow replaces a token
      if (!replaced) return;
      view.forget(replaced);
      const reported = { reportedAt: clock.now(), deadline };
      await attempt(store.deleteIfMatches(name, replaced.tokenDigest, reported));
    },
    forgetReplaced: () => {
      // Stryker disable next-line ConditionalExpression: equivalent: the holder commands it only when the flow replaces a token
      if (replaced) view.forget(replaced);
    },
    release: async (held, restore) => {
      const releasedAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
      const released = await attempt(store.releaseLease(name, held, { deadline }));
      if (!restore || !replaced) return;
      // Counts as confirmed only if the release proves we still held the lease.
      const kept = view.entry(name)?.record;
      if (kept?.tokenDigest === replaced.tokenDigest) {
        if (released) view.confirmed(kept, releasedAt);
        else view.drop(name);
      }
    },
    holdForGrace: async (held, confirmedUntil, until) => {
      // The lease through the grace after a POST that may still land: a new version, never
      // shorter on anyone's clock than the reservation, its expiry past the confirmation's (older
      // releases tell writes apart by holder and expiry alone). Counted again from the give-up,
      // so a holder paused across its POST's abort still holds (A2).
      const now = clock.now();
      const expiresAt = Math.max(
        now + Math.max(0, until - clock.monotonic()),
        (confirmedUntil ?? 0) + 1,
      );
      const durationMs = expiresAt - now;
      const terms = { version: randomUUID(), leaseExpiresAt: expiresAt, durationMs, countdown: 0 };
      await attempt(store.renewLease(name, held, terms, { deadline }));
    },
  };
};
