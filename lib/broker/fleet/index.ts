/**
 * The fleet side: how one container's callers meet the fleet's lease. `leased-issuance.ts` runs
 * the observer's loop with the holder's side (take the lease, issue under it); `shared-loads.ts`
 * joins concurrent callers of one connection into one load; `refresh-ahead.ts` refreshes before
 * the window. Depends on every side below it.
 */
export { LeasedIssuance } from './leased-issuance.js';
export { RefreshAhead } from './refresh-ahead.js';
export { SharedLoads } from './shared-loads.js';
