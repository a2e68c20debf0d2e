/**
 * The observer side: the pure decision after each read (`decide()`) and its loop, the bounds on a
 * caller's word (I4), the waits for a holder's token, and the store calls. Depends on `timing/`,
 * `view/` and `issuance/`.
 */
export { type CallerBoundSettings, tokenRequest, waitBeforeReplacing } from './caller-bounds.js';
export { notEnoughTime, unsatisfiable } from './observer.js';
export { type AcquirePlan, obtain } from './obtain.js';
export { StoreReachability, storeFailure } from './store-calls.js';
