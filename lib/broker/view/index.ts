/**
 * The view side: what this container knows of each connection's item and token, and since
 * when (the proof I2 rests on). `connection-view.ts` keeps one view per connection over
 * `token-memory.ts` (this container's copy of the token) and `lease-watch.ts` (what it last
 * read of the lease). Depends on `timing/` only.
 */
export * from './connection-view.js';
