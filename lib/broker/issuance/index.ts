/**
 * The issuance side: one run of the upstream flow, its retry on a rotated secret, the issued
 * token's record, and why it was issued. Knows nothing of the lease or the store.
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
