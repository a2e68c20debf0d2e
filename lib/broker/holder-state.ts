/**
 * The holder: the container that holds a connection's lease, as an explicit state machine.
 * `transition` is pure; `held-lease.ts` (timers and lease writes) and `issue-under-lease.ts`
 * (the flow: authorize, fence, POST, write) drive it.
 *
 *   counting ─┬─ step written ──────────────────────────────▸ counting (one lower)
 *             ├─ confirmed (countdown 0, covers POST + grace) ▸ fenced
 *             └─ lease lost (write refused, time ran out) ───▸ lost (nothing sent)
 *   fenced ───┬─ POST sent while the confirmation is fresh ──▸ posting
 *             └─ lease lost (confirmation stale) ────────────▸ lost (nothing sent)
 *   posting ──┬─ token written (the lease goes with it) ─────▸ written
 *             ├─ token write refused (taken over after) ─────▸ superseded
 *             ├─ refused for the credentials (a rotated secret) ▸ counting (0): fenced again
 *             │   before the second request (a definite refusal: nothing was issued)
 *             ├─ timeout or reset after sending ─────────────▸ outcome-unknown
 *             └─ a definite refusal ─────────────────────────▸ failed
 *
 * I1: a POST leaves only from `fenced` (and once it has, the holder is in `posting`): no
 * access-token request without a fresh confirmation of the lease.
 */

export type HolderState =
  | { readonly name: 'counting'; readonly countdown: number }
  | { readonly name: 'fenced'; readonly confirmedUntil: number }
  | { readonly name: 'posting'; readonly confirmedUntil: number }
  | { readonly name: 'written' }
  | { readonly name: 'superseded' }
  | { readonly name: 'lost'; readonly reason: string }
  | { readonly name: 'outcome-unknown' }
  | { readonly name: 'failed' };

export type HolderEvent =
  | { readonly type: 'step-written'; readonly countdown: number }
  | { readonly type: 'confirmed'; readonly until: number }
  | { readonly type: 'lease-lost'; readonly reason: string }
  | { readonly type: 'post-sent' }
  /** The POST was answered with a definite refusal, and the flow sends another (rotation). */
  | { readonly type: 'post-refused' }
  | { readonly type: 'token-written' }
  | { readonly type: 'token-refused' }
  | { readonly type: 'outcome-unknown' }
  | { readonly type: 'failed' };

/** States after which nothing more happens. */
export const isFinal = (state: HolderState): boolean =>
  state.name !== 'counting' && state.name !== 'fenced' && state.name !== 'posting';

/** Whether an access-token request may leave now (I1). */
export const mayPost = (state: HolderState): boolean => state.name === 'fenced';

/**
 * The state after `event`. An event that does not apply to the state leaves it as it is (a
 * heartbeat answered after the flow ended, a timer that fired late): only the listed arrows move.
 */
export const transition = (state: HolderState, event: HolderEvent): HolderState => {
  switch (state.name) {
    case 'counting':
      if (event.type === 'step-written' && event.countdown <= state.countdown) {
        return { name: 'counting', countdown: event.countdown };
      }
      if (event.type === 'confirmed') return { name: 'fenced', confirmedUntil: event.until };
      if (event.type === 'lease-lost') return { name: 'lost', reason: event.reason };
      // A flow that fails before its POST (the authorize step) sent nothing.
      if (event.type === 'failed') return { name: 'failed' };
      return state;
    case 'fenced':
      if (event.type === 'post-sent')
        return { name: 'posting', confirmedUntil: state.confirmedUntil };
      if (event.type === 'lease-lost') return { name: 'lost', reason: event.reason };
      if (event.type === 'failed') return { name: 'failed' };
      return state;
    case 'posting':
      if (event.type === 'token-written') return { name: 'written' };
      if (event.type === 'token-refused') return { name: 'superseded' };
      if (event.type === 'outcome-unknown') return { name: 'outcome-unknown' };
      if (event.type === 'failed') return { name: 'failed' };
      if (event.type === 'post-refused') return { name: 'counting', countdown: 0 };
      // A lease lost while the POST is out changes nothing: only its answer tells what it did.
      return state;
    default:
      return state;
  }
};
