/**
 * The protocol's timing, part 1: **safety bounds**, which must never be wrong. Each proves
 * something an invariant of docs/protocol.md rests on (I2 mostly: no request that revokes a
 * token leaves while some reader may still serve it). Pure functions of a token, a lease, the
 * time, the settings and the protocol's timing (`ProtocolTiming`, protocol-timing.ts: every
 * constant with its unit and its reason, carried by the settings or passed), with no I/O. The
 * stored item's caps below are fixed: every container of every release reads the item.
 *
 * A token's life, seen from one container (one read of the store per re-check, in every phase):
 *
 *   issuedAt ───────────── window start ─────── window middle ─────── expiresAt
 *   read every recheckMs   │ XFetch tries ··· ▸ due from the middle │
 *                          │ a try takes the lease with a countdown ─▸ cut-over: the
 *                          │ old token is served until the countdown ends, then the new one
 */
import type { Lease, TokenRecord } from '../../ports.js';
import {
  DEFAULT_TIMING,
  leaseHeartbeatMs,
  maxMemoryRecheckMs,
  type ProtocolTiming,
  reuseMarginMs,
  storeReserveMs,
} from './protocol-timing.js';

/** What the timing reads of a token: its times and the re-check its writer recorded. */
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

/**
 * How long after a token's expiry DynamoDB's TTL may delete its item, s. A container whose clock
 * runs up to `skewToleranceMs` behind still serves the token until its own clock says it
 * expired: were the item gone before then, another container would find nothing and issue with
 * no countdown, revoking it. A minute is past any skew allowed, with room. I1.5, I2. Fixed, like
 * the caps below: it is a property of the stored item, which every container of every release
 * reads.
 */
export const TTL_MARGIN_SECONDS = 60;

/**
 * The largest values a writer of this protocol records in the item: what a read of another
 * container's item may believe. Each mirrors a setting's cap in `lib/config.ts`; a recorded
 * value outside them was not written by the protocol, and is read in the direction that keeps
 * I1 and I2 (see `dynamodb-token-item.ts`).
 */
/** BROKER_MEMORY_RECHECK_SECONDS is at most 100 s (the default timing's `maxMemoryRecheckMs`), ms. */
export const MAX_MEMORY_RECHECK_MS = maxMemoryRecheckMs(DEFAULT_TIMING);
/** BROKER_UPSTREAM_TIMEOUT_MS is at most 60 s. */
const MAX_UPSTREAM_TIMEOUT_MS = 60_000;

/**
 * A1 (docs/protocol.md, "Timing assumptions"): the upstream processes an access-token POST, if
 * at all, within this long of its send, ms: twice the upstream timeout (10 s at the default 5 s),
 * the timeout itself and a grace as long. It counts from the send, not from when the holder gave
 * the POST up: that depends on how much of its invocation the holder had left (issue 35: a POST
 * given up 3.3 s after its send was processed 9 s after it). I1, I2.
 */
export const postLandsWithinMs = (upstreamTimeoutMs: number): number => 2 * upstreamTimeoutMs;

/**
 * How long after the fence's confirmation is sent its POST may still leave, ms (A1): a
 * heartbeat, far more than the confirmation's round trip. Each attempt checks it just before it
 * is sent; the confirmation covers it and A1's bound after it, not the POST's whole budget, so
 * an unknown outcome holds the lease about as long as A1 says, not a budget longer.
 */
export const postSendWindowMs = (timing: ProtocolTiming): number => leaseHeartbeatMs(timing);

/**
 * The longest lease version: the fence, which covers the POST's budget (at most a timeout: the
 * latest the POST may leave) and A1's bound after it.
 */
export const MAX_LEASE_DURATION_MS =
  MAX_UPSTREAM_TIMEOUT_MS + postLandsWithinMs(MAX_UPSTREAM_TIMEOUT_MS);
/**
 * A recorded lease duration above this is absurd (ten times the longest the protocol writes) and
 * read as this: a waiter is held at most this long. Between the longest and this, a duration is
 * read as written: a grace computed past the longest (a wall clock that stepped back while a
 * POST was out, a later release with longer timeouts) must never be cut short (I1).
 */
export const ABSURD_LEASE_DURATION_MS = 10 * MAX_LEASE_DURATION_MS;
/** BROKER_MAX_TOKEN_LIFETIME_SECONDS is at most 365 days, ms. */
export const MAX_TOKEN_LIFETIME_MS = 365 * 86_400_000;

/** The refresh window of a token: configured, but never more than half its lifetime. */
export const windowMs = (record: TokenTimes, settings: RefreshSettings): number =>
  // A window as long as the lifetime would refresh on every request, forever.
  Math.min(settings.refreshWindowMs, (record.expiresAt - record.issuedAt) / 2);

/**
 * How long memory serves a token after a read of the store (sent) that found no lease on it:
 * BROKER_MEMORY_RECHECK_SECONDS, and never more than a quarter of the token's window, so that
 * a cut-over announced a re-check ahead still lands inside the window of a short-lived token.
 */
export const ownRecheckMs = (record: TokenTimes, settings: RefreshSettings): number =>
  Math.min(
    settings.memoryRecheckMs,
    Math.max(settings.timing.countdownStepMs, windowMs(record, settings) / 4),
  );

/**
 * The re-check a *reader* applies to `record` (I2 with mixed settings): its own, or the one the
 * token's writer recorded (`TokenRecord.recheckMs`) when that is shorter. With the holder's rule
 * ({@link countdownFor}: the longer of the two), a deployment whose containers run different
 * re-checks (a rolling configuration change) is as safe as a uniform one.
 */
export const recheckMs = (record: TokenTimes, settings: RefreshSettings): number =>
  Math.min(ownRecheckMs(record, settings), record.recheckMs ?? Number.POSITIVE_INFINITY);

/** Countdown steps whose end lies more than `recheck` (plus the margin) after their start. */
export const stepsToCover = (recheck: number, timing: ProtocolTiming): number =>
  Math.ceil((recheck + timing.proofMarginMs) / timing.countdownStepMs);

/**
 * I2. The countdown a lease that replaces `record` starts with: its last step (the confirmation
 * before the token request) is sent more than a re-check (plus the margin) after the lease was
 * written, so every container that read the token without a lease just before reads it again,
 * sees the countdown, and stops serving the token at its end. The re-check is the longer of
 * this container's and the one the token's writer recorded (readers apply the shorter).
 */
export const countdownFor = (record: TokenTimes, settings: RefreshSettings): number =>
  stepsToCover(Math.max(ownRecheckMs(record, settings), record.recheckMs ?? 0), settings.timing);

/**
 * The longest countdown a lease of this protocol announces: a fresh one over the longest
 * re-check, at the default timing (no valid timing announces more: relations.ts).
 */
export const MAX_COUNTDOWN = stepsToCover(MAX_MEMORY_RECHECK_MS, DEFAULT_TIMING);

/**
 * I2. How long after a read of the store was sent no token request under `lease` (or a lease
 * taking it over) can leave, less the margin: 0 when one may be out already (countdown 0 or 1).
 */
export const announcedMs = (lease: Lease, timing: ProtocolTiming): number =>
  Math.max(0, (lease.countdown - 1) * timing.countdownStepMs - timing.proofMarginMs);

/**
 * I2. How long (ms) after a read of the store was sent that read proves a valid token safe to
 * serve: no request that revokes it can leave before then. With no lease on it, a replacement
 * still has to take the lease and count all the way down (more than a re-check); with one, what
 * its countdown announced.
 */
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
 * I2 in callers' caches. Until when (local epoch ms) the caller just served `entry`'s token may
 * reuse it without asking again (the `maxAgeMs` of the answer): no longer than this container
 * would serve it from memory, less the margin, and never past the instant the token keeps only
 * the `needMs` of validity the caller asked for.
 */
export const reusableUntil = (
  entry: { readonly record: TokenRecord; readonly checkedAt: number; readonly until: number },
  needMs: number,
  settings: RefreshSettings,
): number => {
  const proof = Math.min(entry.until, entry.checkedAt + recheckMs(entry.record, settings));
  return Math.min(proof - reuseMarginMs(settings.timing), entry.record.expiresAt - needMs);
};

/**
 * What is kept between the end of a stale-if-error grant and `record`'s expiry, ms: a minute
 * (`TTL_MARGIN_SECONDS`'s: past any skew allowed, the expiry being on its writer's clock, with
 * room; fixed, not timing), or a tenth of the lifetime of a shorter-lived token (a 40 s token
 * keeps 4 s). The caller's own validity floor (the client's `marginSeconds`, a call's
 * `minValidity`) applies on top: this one is the broker's, so that a token used stale still
 * has the time a request with it needs to reach the upstream and be answered.
 */
export const staleMarginMs = (record: TokenTimes): number =>
  Math.min(TTL_MARGIN_SECONDS * 1000, (record.expiresAt - record.issuedAt) / 10);

/**
 * A trade against I2, bounded by the grant (docs/adr/0017). How long (ms) after `reusableUntil`
 * a caller that cannot reach the broker at all may still use `entry`'s token (the answer's
 * `stale-if-error`): up to its expiry less `staleMarginMs`. None for a token this container
 * knows is about to be replaced (a lease announced on it, or held in memory only: its write
 * failed) or was reported, nor for an answer not
 * to be reused at all (`reusableUntil` not after `now`: its proof is spent, so nothing more is
 * known of it). Past `reusableUntil`, a replacement elsewhere may revoke the token; a caller
 * that cannot reach the broker cannot learn of it either way, and without this it would have no
 * token at all.
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
 * I1 and I3. The least time (ms) a lease with `countdown` needs before its POST can leave and
 * the token be written: the steps, the shortest POST, and the write after it. A lease is not
 * taken with less time left (it would be let go by the fence, and taken again, in a loop).
 */
export const leaseNeedsMs = (countdown: number, timing: ProtocolTiming): number =>
  countdown * timing.countdownStepMs + timing.minPostMs + storeReserveMs(timing);

/**
 * How long a lease version lasts while its holder counts down, ms: one step, two store round
 * trips (the answer of this write, then the landing of the next, sent a step after that answer),
 * and half a heartbeat of scheduling slack (a holder whose event loop runs up to that late keeps
 * its lease): 850 ms for a table in the function's region, 1,050 ms for a global one.
 * A holder that stops mid-countdown (frozen, cut off from the store with its region) is found
 * stale this soon after a reader first saw the version, not a whole `leaseMs` later: readers
 * near the countdown's end, whose proof is shorter than a lease, are held no longer than this
 * (the isolated region of docs/multi-region.md). Liveness only: a takeover names exactly the
 * version seen, and goes on from the countdown seen (I1, I2 hold whatever the duration).
 */
export const countingLeaseMs = (timing: ProtocolTiming): number =>
  timing.countdownStepMs + 2 * timing.storeRoundTripMs + leaseHeartbeatMs(timing) / 2;

/**
 * I1. The expiry (holder's wall clock) and duration of a lease version written at `sentAt`,
 * cut to the caller's deadline (given as time left, ms). A version never lasts longer than the
 * holder counts on it. One followed by a countdown step (`counting`) lasts `countingLeaseMs`;
 * any other (a renewal between heartbeats, a confirmation's grace aside) `leaseMs`.
 */
export const leaseTerm = (
  sentAt: number,
  leftMs: number,
  timing: ProtocolTiming,
  counting = false,
): { expiresAt: number; durationMs: number } => {
  const lasts = counting ? countingLeaseMs(timing) : timing.leaseMs;
  const durationMs = Math.max(0, Math.min(leftMs, lasts));
  return { expiresAt: sentAt + durationMs, durationMs };
};

/**
 * I2. The countdown a lease that replaces `token` is written with: a fresh one lasts past every
 * container's re-check; one that takes over a stale lease goes on from the value seen in exactly
 * the version it takes over (the takeover lands on no other: every reader of that version was
 * told that value, and every reader of an earlier one a value whose time has run since); nothing
 * to announce without a token that some container may still serve, or where the upstream does
 * not revoke on re-issue.
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
