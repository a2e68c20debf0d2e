/**
 * The callers' side: a caller's report of a rejected token, checked with the Open API where the
 * connection has a probe. Depends on `view/`, `issuance/` and `observer/`.
 */
export { Reports } from './reports.js';
