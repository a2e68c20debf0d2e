/**
 * All of the protocol's timing in one pure module: `protocol-timing.ts`, the constants as one
 * injectable value (`ProtocolTiming`, `DEFAULT_TIMING`); `relations.ts`, the relations between
 * them that the safety argument rests on, validated once; `bounds.ts`, the safety bounds that
 * must never be wrong; and `estimates.ts`, the liveness estimates that may be (each never below
 * the bound it stands in for).
 */
export * from './bounds.js';
export * from './estimates.js';
export * from './protocol-timing.js';
export * from './relations.js';
