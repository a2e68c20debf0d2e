/**
 * The fleet side: how one container's callers meet the fleet's lease. `leased-issuance.ts`
 * observes the item and takes the lease or waits for its holder; `shared-loads.ts` joins
 * concurrent callers of one connection into one load; `refresh-ahead.ts` refreshes before the
 * window. Depends on every side below it: `timing/`, `view/`, `issuance/`, `observer/`, `holder/`.
 */
export * from './leased-issuance.js';
export * from './refresh-ahead.js';
export * from './shared-loads.js';
