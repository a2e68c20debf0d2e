/**
 * The callers' side: reports of a rejected token (probe-verified), readiness and the operator's
 * commands. Depends on `view/`, `issuance/` and `observer/`.
 */
export { readStatus, StatusReadTimedOut, warmUp } from './operator.js';
export { type ConnectionReadiness, checkReadiness, type ReadinessReport } from './readiness.js';
export { Reports } from './reports.js';
