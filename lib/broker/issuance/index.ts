/**
 * The issuance side: one run of the upstream flow (`issue-flow.ts`: authorize, the fence, the
 * token request), its retry on a rotated secret (`credential-rotation.ts`), what is recorded
 * of an issued token (`issued-token.ts`), and why a token was issued (`issuance-cause.ts`).
 * Knows nothing of the lease or the store.
 */
export {
  type Issue,
  isCredentialRejection,
  withCredentialRotation,
} from './credential-rotation.js';
export {
  type Caller,
  causeOf,
  IssuanceCause,
  isCallersWord,
  UNNAMED_CALLER,
} from './issuance-cause.js';
export { issueWith } from './issue-flow.js';
export { recordIssued } from './issued-token.js';
