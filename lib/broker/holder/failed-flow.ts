/**
 * What a failed flow leaves behind: the clean-up commands of the holder (`holder/state.ts`
 * chooses them by its final state; this file only carries them out), each a best-effort store
 * call cut to the caller's deadline:
 * - `drop-replaced`: the token it replaces may be revoked (an outcome unknown, or a lease taken
 *   over after a countdown): forgotten here, deleted from the store if unchanged;
 * - `release`: the lease is freed (lost, or failed for sure); after a failure for sure the
 *   replaced token is good again, if the release proves we still held the lease;
 * - `hold-for-grace`: the lease is held through the grace after a POST that may still land.
 *   The fence already covers A1's bound after the latest instant the POST could leave; this
 *   write counts it again from the give-up, which no attempt of the POST can follow: a holder
 *   paused across its POST's abort (its timer late, an attempt sent after it) still holds the
 *   lease until that attempt may land (A2, docs/protocol.md).
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
      // Nobody could replace the token while we held the lease, and a replacement after it
      // announces a countdown that outlasts a re-check, so it counts as confirmed when we let
      // go; only if the release proves we still held it: a holder paused past its lease may find
      // that another took over and revoked that token meanwhile.
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
  // A new version, whose duration watchers count from when they first see it: never shorter,
  // on anyone's clock, than the reservation. Its expiry differs from the confirmation's too
  // (1 ms past it at least): the previous release (0.1.0) tells writes apart by holder and
  // expiry alone, and would count this shorter duration from its first sight of the
  // confirmation, taking the lease over while the POST may still land (review 4:
  // test/lib/broker/grace-renewal-older-release.test.ts).
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
