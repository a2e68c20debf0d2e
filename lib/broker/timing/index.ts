/**
 * All of the protocol's timing in one pure module, in two groups: `bounds.ts`, the safety
 * bounds that must never be wrong, and `estimates.ts`, the liveness estimates that may be
 * (each never below the bound it stands in for).
 */
export * from './bounds.js';
export * from './estimates.js';
