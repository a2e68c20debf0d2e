/**
 * The holder's clean-up commands after a failed flow (`drop-replaced`, `release`,
 * `hold-for-grace`), each a best-effort store call cut to the caller's deadline. The grace is
 * counted again from the give-up, so a holder paused across its POST's abort still holds (A2).
 */
import { randomUUID } from 'node:crypto';
import type { Deadline } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import type { LeaseRef } from '../../ports.js';
import type { HolderDeps, LeasedFlow } from './deps.js';
import type { HolderEffects } from './held-lease.js';

type CleanUp = Omit<HolderEffects, 'writeToken'>;

export const cleanUp = (
  deps: Pick<HolderDeps, 'store' | 'view' | 'clock' | 'settings'> & {
    /** Cuts a store call to the caller's deadline: the caller is answered before it, always. */
    readonly bounded: <T>(operation: Promise<T>) => Promise<T>;
  },
  connection: ConnectionConfig,
  flow: Pick<LeasedFlow, 'replaced' | 'deadline'>,
): CleanUp => {
  const { name } = connection;
  const { store, view, clock, bounded } = deps;
  const { replaced, deadline } = flow;
  return {
    dropReplaced: async () => {
      // Stryker disable next-line ConditionalExpression: equivalent: the holder commands it only when the flow replaces a token
      if (!replaced) return;
      view.forget(replaced);
      await bounded(
        store.deleteIfMatches(name, replaced.tokenDigest, { reportedAt: clock.now(), deadline }),
      ).catch(() => undefined);
    },
    forgetReplaced: () => {
      // Stryker disable next-line ConditionalExpression: equivalent: the holder commands it only when the flow replaces a token
      if (replaced) view.forget(replaced);
    },
    release: async (held, restore) => {
      const releasedAt = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
      // Stryker disable next-line ArrowFunction: equivalent: undefined and false alike mean not released
      const released = await bounded(store.releaseLease(name, held, { deadline })).catch(
        () => false,
      );
      if (!restore || !replaced) return;
      // Counts as confirmed only if the release proves we still held the lease.
      const kept = view.entry(name)?.record;
      if (kept?.tokenDigest === replaced.tokenDigest) {
        if (released) view.confirmed(kept, releasedAt);
        else view.drop(name);
      }
    },
    holdForGrace: async (held, confirmedUntil, until) => {
      await bounded(
        renewForGrace(store, name, clock.now(), Math.max(0, until - clock.monotonic()), {
          confirmedUntil,
          held,
          deadline,
        }),
      ).catch(() => undefined);
    },
  };
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
    deadline,
  }: {
    readonly confirmedUntil: number | undefined;
    readonly held: LeaseRef;
    readonly deadline: Deadline;
  },
): Promise<boolean> => {
  // A new version, never shorter on anyone's clock than the reservation, its expiry past the
  // confirmation's (older releases tell writes apart by holder and expiry alone).
  const until = Math.max(now + graceMs, (confirmedUntil ?? 0) + 1);
  return store.renewLease(
    connection,
    held,
    {
      version: randomUUID(),
      leaseExpiresAt: until,
      durationMs: until - now,
      countdown: 0,
    },
    { deadline },
  );
};
