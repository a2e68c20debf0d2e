/**
 * The observer side: a container that reads the item and decides, as a pure function
 * (`observer.ts`, `decide()`), whether to serve, wait for the holder, take the lease or refuse,
 * and the loop that does it (`obtain.ts`); how far a caller's word may go (`caller-bounds.ts`,
 * I4); the wait across a cut-over (`cut-over-wait.ts`) and for a token the container does not
 * have (`issuance-wait.ts`); and the store calls as callers are told them (`store-calls.ts`).
 * Depends on `timing/`, `view/` and `issuance/`.
 */
export { type CallerBoundSettings, tokenRequest, waitBeforeReplacing } from './caller-bounds.js';
export { notEnoughTime, unsatisfiable } from './observer.js';
export { type AcquirePlan, obtain } from './obtain.js';
export { StoreReachability, storeFailure } from './store-calls.js';
