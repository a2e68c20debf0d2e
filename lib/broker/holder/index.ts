/**
 * The holder side: the lease holder's reducer (`state.ts`), its driver (`held-lease.ts`), the flow
 * under the lease and its clean-up, and taking the lease. Depends on `timing/`, `view/`,
 * `issuance/`, `observer/`.
 */
export { type HolderDeps, issueUnderLease, type LeasedFlow, LOST } from './issue-under-lease.js';
export { LeaseTaker } from './lease-taker.js';
