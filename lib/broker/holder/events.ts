/**
 * The holder's state, the events that move it and the commands it gives (`holder/state.ts` is
 * the reducer over them; `held-lease.ts` runs the commands and turns their results into events).
 * Every instant is monotonic milliseconds (`at`), except `expiresAt` and `confirmedUntil`: the
 * stored expiry, on the wall clock.
 */

import type { ProtocolTiming } from '../timing/index.js';

/**
 * - `counting`: the lease is held and its countdown lowered, one write at a time, down to 1;
 *   the flow authorizes meanwhile, then asks for the fence.
 * - `fenced`: the confirmation (countdown 0, covering the POST and its grace) was written and is
 *   fresh: the POST may leave (it leaves at once: `posting`).
 * - `posting`: the POST is out; only its answer tells what it did.
 * - `writing`: the POST issued a token; it is written under the confirmed version.
 * - `lost`: the lease went elsewhere, or its time ran out, before the POST (nothing sent); final
 *   once the flow has ended and the lease was released.
 * - `written`, `superseded`, `outcome-unknown`, `failed`: final.
 */
export type HolderName =
  | 'counting'
  | 'fenced'
  | 'posting'
  | 'writing'
  | 'written'
  | 'superseded'
  | 'lost'
  | 'outcome-unknown'
  | 'failed';

/** What a holder knows from its start and never changes. */
export interface HolderTerms {
  /**
   * The caller's deadline as a monotonic instant (ms), a number rather than a `Deadline`: the
   * reducer is pure and reads no clock (`HeldLeaseOptions.deadline.at`).
   */
  readonly deadlineAt: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** The flow replaces a valid token (dropped if the POST may have revoked it). */
  readonly replacesToken: boolean;
  /** That token may already be revoked (a lease taken over after a countdown). */
  readonly suspect: boolean;
  /** The protocol's timing (step, heartbeat, lease, reserves). */
  readonly timing: ProtocolTiming;
}

/** A lease write in flight (writes never overlap). */
export interface LeaseWrite {
  /** A step (the countdown one lower, or kept at 1: the heartbeat), or the fence (0). */
  readonly write: 'step' | 'fence';
  readonly countdown: number;
  readonly durationMs: number;
  /** When it was sent (monotonic): its duration counts from here. */
  readonly sentAt: number;
  /** The fence's POST budget. */
  readonly budget?: number | undefined;
  /** The fence's send window: no attempt of the POST leaves later than `sentAt` plus it. */
  readonly sendWindow?: number | undefined;
  /** The expiry it stores (wall clock), once sent. */
  readonly expiresAt?: number | undefined;
}

export interface HolderState {
  readonly name: HolderName;
  readonly terms: HolderTerms;
  /** The countdown last written (0 once confirmed). */
  readonly countdown: number;
  /** The version last written: each write names it, and sets a new one. */
  readonly version: string;
  /** A version sent whose answer never came: it may have landed (a release names it too). */
  readonly unanswered: string | undefined;
  /** The lease is ours until this instant. */
  readonly ownedUntil: number;
  /** When the last lease write was answered: the next step counts from here. */
  readonly answeredAt: number;
  readonly writing: LeaseWrite | undefined;
  /** Since when the flow waits at the fence (undefined: it does not). */
  readonly fenceAskedAt: number | undefined;
  /** How long the flow waited at the fence, in all (not part of an issuance's duration). */
  readonly waitedMs: number;
  /** The stored expiry the confirmation wrote: no other container takes the lease before it. */
  readonly confirmedUntil: number | undefined;
  /**
   * The same confirmation's term on this container's monotonic clock (its send plus its
   * duration): no other container finds it stale before then. What memory may vouch for a token
   * whose write failed counts to here, never to `confirmedUntil` (a wall clock stepped back
   * after the confirmation would stretch that). I2.
   */
  readonly confirmedUntilMonotonic: number | undefined;
  /**
   * The POST's last instant to leave, and the instant it is aborted (monotonic), once fenced:
   * what the renewal after an unknown outcome counts A1's bound from.
   */
  readonly postSendBy?: number | undefined;
  readonly postAbortAt?: number | undefined;
  /** Why the lease was lost. */
  readonly reason: string | undefined;
  /** The flow is over and cleaned up: nothing more happens. */
  readonly finished: boolean;
}

/** How the POST (or the flow before it) ended, as the driver classifies the upstream's answer. */
export type PostAnswer = 'issued' | 'failed' | 'outcome-unknown' | 'not-sent';

export type HolderEvent = { readonly at: number } & (
  | { readonly type: 'started' }
  /**
   * The next periodic write is due (a step after the last answer while counting down, a
   * heartbeat period at 1): the next step, or the fence.
   */
  | { readonly type: 'step-due' }
  /** I3: the POST and the write after it no longer fit before the deadline. */
  | { readonly type: 'last-call' }
  /** The POST's confirmed budget ran out. */
  | { readonly type: 'post-timer' }
  /** The execution environment shuts down: a lease not yet used is given up. */
  | { readonly type: 'abandon'; readonly reason: string }
  /** The flow asks to send its POST (it waits for `send-post` or `refuse-fence`). */
  | { readonly type: 'fence-asked' }
  /** The lease write commanded left, naming this version and storing this expiry. */
  | { readonly type: 'write-sent'; readonly version: string; readonly expiresAt: number }
  | { readonly type: 'write-landed' }
  /** The conditional write was refused: the lease is another's. */
  | { readonly type: 'write-refused' }
  /** No answer (an error, or the fence's budget ran out): the write may have landed. */
  | { readonly type: 'write-failed' }
  | { readonly type: 'post-sent' }
  | { readonly type: 'answered'; readonly outcome: PostAnswer }
  | { readonly type: 'token-written' }
  /** The token write was refused: the lease was taken over after the POST. */
  | { readonly type: 'token-refused' }
  /** The token write failed: the token is served from memory only. */
  | { readonly type: 'token-write-failed' }
);

export type HolderTimer = 'step' | 'last-call' | 'post';

/** How the holder's flow ended, as its caller is told. */
export type HolderOutcome =
  | 'written'
  | 'written-in-memory'
  | 'superseded'
  | 'lost'
  | 'outcome-unknown'
  | 'failed';

export type HolderCommand =
  /** Arms a timer (each fires once), replacing one armed before. */
  | { readonly do: 'arm'; readonly timer: HolderTimer; readonly ms: number }
  | { readonly do: 'cancel'; readonly timer: HolderTimer }
  /**
   * A conditional write of the lease on the version last written, as the next version (chosen
   * by the driver: `write-sent`), stored for `durationMs`; the fence's is bounded by its budget.
   */
  | {
      readonly do: 'write-lease';
      readonly write: LeaseWrite['write'];
      readonly countdown: number;
      readonly durationMs: number;
      readonly boundMs?: number;
    }
  /** Stops the flow's upstream requests in flight (the lease's signal). */
  | { readonly do: 'abort'; readonly reason: string }
  /**
   * The fence's answer: the POST may leave now (I1), and no attempt of it after `sendBy`
   * (monotonic: the confirmation's send plus its budget, which the confirmation covers).
   */
  | { readonly do: 'send-post'; readonly sendBy: number }
  /** The fence's answer: nothing may be sent. */
  | { readonly do: 'refuse-fence' }
  /** Writes the issued token under the lease as last written; the lease goes with it. */
  | { readonly do: 'write-token' }
  /** The replaced token may be revoked: forgotten here, and deleted from the store if unchanged. */
  | { readonly do: 'drop-replaced' }
  /** The replaced token is revoked (ours was issued): forgotten here. */
  | { readonly do: 'forget-replaced' }
  /** Releases the lease; `restore`: the replaced token is good again if the release proves it. */
  | { readonly do: 'release'; readonly restore: boolean }
  /** Holds the lease through the grace after a POST that may still land. */
  /** Hold the lease until `until` (monotonic): the POST may land until then (A1). */
  | { readonly do: 'hold-for-grace'; readonly until: number }
  /** The flow is over: its caller is told. */
  | { readonly do: 'finish'; readonly outcome: HolderOutcome };
