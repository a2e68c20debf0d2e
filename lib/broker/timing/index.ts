/**
 * All of the protocol's timing, pure: the constants (`protocol-timing.ts`), their relations
 * (`relations.ts`), the safety bounds (`bounds.ts`) and the liveness estimates (`estimates.ts`).
 */
export {
  ABSURD_LEASE_DURATION_MS,
  leaseCountdown,
  leaseNeedsMs,
  leaseTerm,
  MAX_COUNTDOWN,
  MAX_MEMORY_RECHECK_MS,
  MAX_TOKEN_LIFETIME_MS,
  ownRecheckMs,
  postLandsWithinMs,
  postSendWindowMs,
  proofMs,
  type RefreshSettings,
  recheckMs,
  replacementMayBeOut,
  reusableUntil,
  staleIfErrorMs,
  stepsToCover,
  type TokenTimes,
  TTL_MARGIN_SECONDS,
  windowMs,
} from './bounds.js';
export {
  cutOverEstimate,
  dueForRefresh,
  pollWaitMs,
  readReserveMs,
  refreshBudgetMs,
} from './estimates.js';
export {
  cutOverRereadMs,
  DEFAULT_TIMING,
  leaseHeartbeatMs,
  maxMemoryRecheckMs,
  type ProtocolTiming,
  pollBaseMs,
  pollCapMs,
  storeReserveMs,
} from './protocol-timing.js';
export {
  MAX_TIMING_SCALE,
  MIN_TIMING_SCALE,
  protocolTiming,
  scaledTiming,
  validateTiming,
} from './relations.js';
