/**
 * The fleet side: leased issuance (the observer's loop with the holder's side) and the work in
 * flight (shared loads, refresh ahead). Depends on every side below it.
 */
export { InFlight } from './in-flight.js';
export { LeasedIssuance } from './leased-issuance.js';
