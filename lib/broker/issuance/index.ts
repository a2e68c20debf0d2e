/**
 * The issuance side: one run of the upstream flow, its retry on a rotated secret, the issued
 * token's record, and why it was issued. Knows nothing of the lease or the store.
 */
export {
  type Caller,
  causeOf,
  type Issuance,
  IssuanceCause,
  isCallersWord,
  recordIssued,
  UNNAMED_CALLER,
} from './issuance-cause.js';
export { type Issue, issueWith, withCredentialRotation } from './issue-flow.js';
