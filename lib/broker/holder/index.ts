/**
 * The holder side: the lease holder's reducer (`state.ts`), its driver (`held-lease.ts`), and the
 * flow under the lease with its clean-up. Depends on `timing/`, `view/`, `issuance/`, `observer/`.
 */
export { type HolderDeps, issueUnderLease, LOST } from './issue-under-lease.js';
