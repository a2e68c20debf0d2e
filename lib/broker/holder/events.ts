/**
 * The holder's state, events and commands (`state.ts` is the reducer, `held-lease.ts` the driver).
 * Instants are monotonic ms, except `expiresAt` and `confirmedUntil`: the stored wall-clock expiry.
 */

import type { ProtocolTiming } from '../timing/index.js';

/**
 * `counting` (countdown to 1) → `fenced` (POST may leave) → `posting` → `writing` (the token);
 * final: `written`, `superseded`, `lost` (nothing sent), `outcome-unknown`, `failed`.
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
  /** The caller's deadline, monotonic ms (a number: the reducer reads no clock). */
  readonly deadlineAt: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** The flow replaces a valid token (dropped if the POST may have revoked it). */
  readonly replacesToken: boolean;
  /** That token may already be revoked (a lease taken over after a countdown). */
  readonly suspect: boolean;
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
  /** The confirmation's term on the monotonic clock: what memory vouches for counts to here. I2. */
  readonly confirmedUntilMonotonic: number | undefined;
  /** The POST's last instant to leave and its abort instant (monotonic), once fenced (A1). */
  readonly postSendBy?: number | undefined;
  readonly postAbortAt?: number | undefined;
  readonly reason: string | undefined;
  /** The flow is over and cleaned up: nothing more happens. */
  readonly finished: boolean;
}

/** How the POST (or the flow before it) ended, as the driver classifies the upstream's answer. */
export type PostAnswer = 'issued' | 'failed' | 'outcome-unknown' | 'not-sent';

export type HolderEvent = { readonly at: number } & (
  | { readonly type: 'started' }
  /** The next periodic write is due (a step while counting, a heartbeat at 1). */
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
  /** A conditional write of the lease on the last version, as the next, for `durationMs`. */
  | {
      readonly do: 'write-lease';
      readonly write: LeaseWrite['write'];
      readonly countdown: number;
      readonly durationMs: number;
      readonly boundMs?: number;
    }
  /** Stops the flow's upstream requests in flight (the lease's signal). */
  | { readonly do: 'abort'; readonly reason: string }
  /** The fence's answer: the POST may leave now (I1), no attempt after `sendBy` (monotonic). */
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
  /** Hold the lease until `until` (monotonic): the POST may land until then (A1). */
  | { readonly do: 'hold-for-grace'; readonly until: number }
  /** The flow is over: its caller is told. */
  | { readonly do: 'finish'; readonly outcome: HolderOutcome };
