/**
 * The fleet side: leased issuance (the observer's loop with the holder's side), shared loads and
 * refresh ahead. Depends on every side below it.
 */
export { LeasedIssuance } from './leased-issuance.js';
export { RefreshAhead } from './refresh-ahead.js';
export { SharedLoads } from './shared-loads.js';
