/**
 * The observer side: `decide()` after each read, its loop `obtain()` with the store calls, and
 * the bounds on a caller's word (I4). Depends on `timing/`, `view/` and `issuance/`.
 */
export { type CallerBoundSettings, tokenRequest, waitBeforeReplacing } from './caller-bounds.js';
export { notEnoughTime, unsatisfiable } from './observer.js';
export { type AcquirePlan, obtain, StoreReachability, storeFailure } from './obtain.js';
