/**
 * All of the protocol's timing, pure: the constants and their relations (`protocol-timing.ts`),
 * the safety bounds (`bounds.ts`) and the liveness estimates (`estimates.ts`).
 */
export {
  leaseCountdown,
  leaseNeedsMs,
  leaseTerm,
  ownRecheckMs,
  proofMs,
  type RefreshSettings,
  recheckMs,
  replacementMayBeOut,
  reusableUntil,
  staleIfErrorMs,
  type TokenTimes,
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
  ABSURD_LEASE_DURATION_MS,
  cutOverRereadMs,
  DEFAULT_TIMING,
  leaseHeartbeatMs,
  MAX_COUNTDOWN,
  MAX_MEMORY_RECHECK_MS,
  MAX_TIMING_SCALE,
  MAX_TOKEN_LIFETIME_MS,
  MIN_TIMING_SCALE,
  maxMemoryRecheckMs,
  type ProtocolTiming,
  pollBaseMs,
  pollCapMs,
  postLandsWithinMs,
  postSendWindowMs,
  protocolTiming,
  scaledTiming,
  stepsToCover,
  storeReserveMs,
  TTL_MARGIN_SECONDS,
  validateTiming,
} from './protocol-timing.js';
