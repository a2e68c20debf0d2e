/**
 * The fleet side: leased issuance (the observer's loop with the holder's side), shared loads and
 * refresh ahead. Depends on every side below it.
 */
export { RefreshAhead, SharedLoads } from './in-flight.js';
export { LeasedIssuance } from './leased-issuance.js';
