/**
 * The callers' side: reports of a rejected token (probe-verified) and the operator's commands
 * (status, warm-up, readiness). Depends on `view/`, `issuance/` and `observer/`.
 */
export { Operator } from './operator.js';
export { Reports } from './reports.js';
