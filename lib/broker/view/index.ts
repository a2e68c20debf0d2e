/**
 * The view side: what this container knows of each connection and since when (the proof I2
 * rests on), the request, and the one serving rule. Depends on `timing/` only.
 */
export { ConnectionView, type ReadSent, type Seen } from './connection-state.js';
export { ownRequest, suspectToken, type TokenRequest, validityNeeded } from './serving.js';
