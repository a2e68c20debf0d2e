/**
 * The callers' side: what callers may say besides "a token, please". Reports of a rejected
 * token (`reports.ts`, verified by a probe in `probe-verdicts.ts`), readiness
 * (`readiness.ts`) and the operator's commands (`operator.ts`). Depends on `view/`,
 * `issuance/` and `observer/`.
 */
export { readStatus, StatusReadTimedOut, warmUp } from './operator.js';
export { type ConnectionReadiness, checkReadiness, type ReadinessReport } from './readiness.js';
export { Reports } from './reports.js';
