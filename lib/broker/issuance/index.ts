/**
 * The issuance side: one run of the upstream flow (`issue-flow.ts`: authorize, the fence, the
 * token request), its retry on a rotated secret (`credential-rotation.ts`), what is recorded
 * of an issued token (`issued-token.ts`), and why a token was issued (`issuance-cause.ts`).
 * Knows nothing of the lease or the store.
 */
export * from './credential-rotation.js';
export * from './issuance-cause.js';
export * from './issued-token.js';
