/**
 * The protocol's safety bounds, each proving something an invariant of docs/protocol.md rests on
 * (mostly I2): pure functions of a token, a lease, the time, the settings and the timing.
 */
import type { Lease, TokenRecord } from '../../ports.js';
import {
  leaseHeartbeatMs,
  type ProtocolTiming,
  reuseMarginMs,
  stepsToCover,
  storeReserveMs,
  TTL_MARGIN_SECONDS,
} from './protocol-timing.js';

export type TokenTimes = Pick<TokenRecord, 'issuedAt' | 'expiresAt' | 'recheckMs'>;

/** The settings the protocol reads, in milliseconds, and the timing it runs at. */
export interface RefreshSettings {
  /** The protocol's timing (validated once, by the broker). */
  readonly timing: ProtocolTiming;
  /** BROKER_REFRESH_WINDOW_SECONDS, in ms (before clamping to the token's lifetime). */
  readonly refreshWindowMs: number;
  /** BROKER_MEMORY_RECHECK_SECONDS, in ms (at most `maxMemoryRecheckMs`). */
  readonly memoryRecheckMs: number;
  /** BROKER_STORE_OUTAGE_GRACE_SECONDS, in ms (0 unless an operator trades the guarantee). */
  readonly storeOutageGraceMs?: number;
}

/** The refresh window of a token: configured, but never more than half its lifetime. */
export const windowMs = (record: TokenTimes, settings: RefreshSettings): number =>
  // A window as long as the lifetime would refresh on every request, forever.
  Math.min(settings.refreshWindowMs, (record.expiresAt - record.issuedAt) / 2);

/**
 * How long memory serves a token after a read (sent) that found no lease on it: the configured
 * re-check, at most a quarter of the token's window so a cut-over lands inside it.
 */
export const ownRecheckMs = (record: TokenTimes, settings: RefreshSettings): number =>
  Math.min(
    settings.memoryRecheckMs,
    Math.max(settings.timing.countdownStepMs, windowMs(record, settings) / 4),
  );

/** The re-check a reader applies: the shorter of its own and the writer's (I2, mixed settings). */
export const recheckMs = (record: TokenTimes, settings: RefreshSettings): number =>
  Math.min(ownRecheckMs(record, settings), record.recheckMs ?? Number.POSITIVE_INFINITY);

/** I2. The countdown replacing `record` starts with: its last step more than a re-check away. */
export const countdownFor = (record: TokenTimes, settings: RefreshSettings): number =>
  stepsToCover(Math.max(ownRecheckMs(record, settings), record.recheckMs ?? 0), settings.timing);

/**
 * I2. How long after a read of the store was sent no token request under `lease` (or a lease
 * taking it over) can leave, less the margin: 0 when one may be out already (countdown 0 or 1).
 */
export const announcedMs = (lease: Lease, timing: ProtocolTiming): number =>
  Math.max(0, (lease.countdown - 1) * timing.countdownStepMs - timing.proofMarginMs);

/** I2. How long (ms) after a read was sent that read proves a valid token safe to serve. */
export const proofMs = (
  record: TokenRecord,
  lease: Lease | undefined,
  settings: RefreshSettings,
): number => {
  const { timing } = settings;
  // Any replacement counts down at least this reader's re-check (see `recheckMs`).
  const unleased =
    stepsToCover(recheckMs(record, settings), timing) * timing.countdownStepMs -
    timing.proofMarginMs;
  return lease ? Math.min(announcedMs(lease, timing), unleased) : unleased;
};

/** I2. A token under a lease whose countdown has ended: its replacement's request may be out. */
export const replacementMayBeOut = (lease: Lease | undefined, timing: ProtocolTiming): boolean =>
  lease !== undefined && announcedMs(lease, timing) <= 0;

/**
 * I2 in callers' caches. Until when (local epoch ms) the caller may reuse `entry`'s token: no
 * longer than memory would serve it, less the margin, nor past leaving only `needMs` of validity.
 */
export const reusableUntil = (
  entry: { readonly record: TokenRecord; readonly checkedAt: number; readonly until: number },
  needMs: number,
  settings: RefreshSettings,
): number => {
  const proof = Math.min(entry.until, entry.checkedAt + recheckMs(entry.record, settings));
  return Math.min(proof - reuseMarginMs(settings.timing), entry.record.expiresAt - needMs);
};

/** Kept between a stale-if-error grant's end and expiry, ms: a minute, or a tenth of lifetime. */
export const staleMarginMs = (record: TokenTimes): number =>
  Math.min(TTL_MARGIN_SECONDS * 1000, (record.expiresAt - record.issuedAt) / 10);

/**
 * A trade against I2, bounded by the grant (docs/adr/0017). How long (ms) after `reusableUntil`
 * a caller that cannot reach the broker may still use `entry`'s token: up to its expiry less
 * `staleMarginMs`. None for a token leased, unstored or reported, or an answer not to be reused.
 */
export const staleIfErrorMs = (
  entry: {
    readonly record: TokenTimes;
    readonly lease?: Lease | undefined;
    readonly reported?: boolean | undefined;
    readonly unstored?: boolean | undefined;
  },
  reusableUntil: number,
  now: number,
): number =>
  entry.lease || entry.reported || entry.unstored || reusableUntil <= now
    ? 0
    : Math.max(0, entry.record.expiresAt - staleMarginMs(entry.record) - reusableUntil);

/**
 * I1 and I3. The least time (ms) a lease with `countdown` needs before its POST can leave and the
 * token be written; a lease is not taken with less (the fence would let it go, in a loop).
 */
export const leaseNeedsMs = (countdown: number, timing: ProtocolTiming): number =>
  countdown * timing.countdownStepMs + timing.minPostMs + storeReserveMs(timing);

/** A lease version's life while its holder counts down, ms: a step, two round trips, slack. */
export const countingLeaseMs = (timing: ProtocolTiming): number =>
  timing.countdownStepMs + 2 * timing.storeRoundTripMs + leaseHeartbeatMs(timing) / 2;

/**
 * I1. How long a lease version lasts, ms, cut to the time left: `countingLeaseMs` when a
 * countdown step follows it, else `leaseMs`.
 */
export const leaseTerm = (leftMs: number, timing: ProtocolTiming, counting = false): number =>
  Math.max(0, Math.min(leftMs, counting ? countingLeaseMs(timing) : timing.leaseMs));

/**
 * I2. The countdown a lease replacing `token` is written with: fresh, or going on from exactly
 * the version it takes over; 0 without a token to protect or where re-issue does not revoke.
 */
export const leaseCountdown = (
  revokesOnReissue: boolean,
  token: TokenTimes | undefined,
  takeOver: Lease | undefined,
  settings: RefreshSettings,
): number => {
  if (!revokesOnReissue || !token) return 0;
  return takeOver ? takeOver.countdown : countdownFor(token, settings);
};
