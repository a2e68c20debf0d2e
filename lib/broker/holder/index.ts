/**
 * The holder side: the container that holds the lease. `state.ts` is one reducer,
 * `step(state, event) → { state, commands }`, the only writer of the holder's state (with
 * `events.ts` and `lease-writes.ts`); `held-lease.ts` is its driver; `issue-under-lease.ts`
 * runs the upstream flow under the lease and `failed-flow.ts` carries out the clean-up;
 * `lease-taker.ts` takes the lease. Depends on `timing/`, `view/`, `issuance/`, `observer/`.
 */
export type { HolderDeps, LeasedFlow } from './deps.js';
export { issueUnderLease, LOST } from './issue-under-lease.js';
export { LeaseTaker } from './lease-taker.js';
