/**
 * The view side: what this container knows of each connection's item and token, and since
 * when (the proof I2 rests on). `connection-state.ts` holds one connection's knowledge (its
 * copy of the token, the tokens it has learned, the lease version last seen, probe verdicts,
 * measured durations), changed only by `apply(event)`; `connection-view.ts` keeps one state per
 * connection; `serving.ts` holds the request and the one serving rule. Depends on `timing/` only.
 */
export { ConnectionView, type ReadSent, type Seen } from './connection-view.js';
export { ownRequest, suspectToken, type TokenRequest, validityNeeded } from './serving.js';
