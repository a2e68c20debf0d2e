/**
 * When a token is refreshed, how long memory serves it between reads of the store, and what a
 * lease's countdown tells a reader: pure functions of a token, a lease, the time and the
 * settings, with no I/O, so that every rule can be property-tested.
 *
 * A token's life, seen from one container (one read of the store per re-check, in every phase):
 *
 *   issuedAt ───────────── window start ─────── window middle ─────── expiresAt
 *   read every recheckMs   │ XFetch tries ··· ▸ due from the middle │
 *                          │ a try takes the lease with a countdown ─▸ cut-over: the
 *                          │ old token is served until the countdown ends, then the new one
 */
import type { Lease, TokenRecord } from '../ports.js';

/** The settings the policy reads, in milliseconds. */
export interface RefreshSettings {
  /** BROKER_REFRESH_WINDOW_SECONDS, in ms (before clamping to the token's lifetime). */
  readonly refreshWindowMs: number;
  /** BROKER_MEMORY_RECHECK_SECONDS, in ms. */
  readonly memoryRecheckMs: number;
  /** BROKER_STORE_OUTAGE_GRACE_SECONDS, in ms (0 unless an operator trades the guarantee). */
  readonly storeOutageGraceMs?: number;
}

/**
 * One step of a lease's countdown (see `Lease.countdown`): each lease write of the countdown
 * is sent at least this long after the previous one was answered. A caller arriving at the
 * cut-over waits at most about one step plus one access-token round trip.
 */
export const COUNTDOWN_STEP_MS = 250;
/**
 * Clock skew between containers that the protocol allows for: a lease whose own expiry is
 * further past than this is stale at first sight, and a token expired less than this ago may
 * still be served on a slower clock (its replacement is counted down too).
 */
export const SKEW_TOLERANCE_MS = 10_000;

/**
 * Kept between the last instant a reader serves a token and the earliest instant a request
 * that revokes it can leave: scheduling and clock-rate slack.
 */
export const DRAIN_MARGIN_MS = 100;

/**
 * Kept between the end of what a read proves and the end of the reuse granted to a caller with
 * the answer: the rate difference between this clock and the caller's over a reuse of seconds,
 * and scheduling slack. The way back needs none: the caller counts from when it sent its
 * request, which was before this container looked at its clock.
 */
export const REUSE_MARGIN_MS = 100;

/**
 * A countdown read more than twice this before its end is read once more this close to its end:
 * the cut-over is then aimed from a countdown a few steps long, not from one a re-check long
 * (each step lasts a write longer than 250 ms, which a reader cannot count on). Twice, so that
 * the second read, whose countdown may run a little longer than it proves, is the last.
 */
export const CUT_OVER_REREAD_MS = 1_000;

/** XFetch β: 1 is the value the paper shows optimal for a single recompute. */
export const XFETCH_BETA = 1;
/** Issuance duration assumed before one was measured (two loopback-to-internet round trips). */
export const DEFAULT_ISSUANCE_MS = 300;

/** The refresh window of a token: configured, but never more than half its lifetime. */
export const windowMs = (record: TokenRecord, settings: RefreshSettings): number =>
  // A window as long as the lifetime would refresh on every request, forever.
  Math.min(settings.refreshWindowMs, (record.expiresAt - record.issuedAt) / 2);

/**
 * How long memory serves a token after a read of the store (sent) that found no lease on it:
 * BROKER_MEMORY_RECHECK_SECONDS, and never more than a quarter of the token's window, so that
 * a cut-over announced a re-check ahead still lands inside the window of a short-lived token.
 * The same in every phase of the token's life: the countdown, not a faster pace, is what tells
 * a reader that a replacement is coming.
 */
export const ownRecheckMs = (record: TokenRecord, settings: RefreshSettings): number =>
  Math.min(settings.memoryRecheckMs, Math.max(COUNTDOWN_STEP_MS, windowMs(record, settings) / 4));

/**
 * The re-check a *reader* applies to `record` (I2 with mixed settings): its own, or the one the token's writer recorded
 * (`TokenRecord.recheckMs`) when that is shorter. With the holder's rule ({@link countdownFor}:
 * the longer of the two), a deployment whose containers run different re-checks (a rolling
 * configuration change) is as safe as a uniform one: every countdown outlasts every reader's
 * re-check, since both are bounded by the value that travels with the token.
 */
export const recheckMs = (record: TokenRecord, settings: RefreshSettings): number =>
  Math.min(ownRecheckMs(record, settings), record.recheckMs ?? Number.POSITIVE_INFINITY);

/**
 * The countdown a lease that replaces `record` starts with: its last step (the confirmation
 * before the token request) is sent more than a re-check (plus the margin) after the lease was
 * written, so every container that read the token without a lease just before reads it again,
 * sees the countdown, and stops serving the token at its end. The re-check is the longer of
 * this container's and the one the token's writer recorded (readers apply the shorter).
 */
export const countdownFor = (record: TokenRecord, settings: RefreshSettings): number =>
  stepsToCover(Math.max(ownRecheckMs(record, settings), record.recheckMs ?? 0));

/** Countdown steps whose end lies more than `recheck` (plus the margin) after their start. */
const stepsToCover = (recheck: number): number =>
  Math.ceil((recheck + DRAIN_MARGIN_MS) / COUNTDOWN_STEP_MS);

/**
 * How long after a read of the store was sent no token request under `lease` (or a lease taking
 * it over) can leave, less the margin: 0 when one may be out already (countdown 0 or 1).
 */
export const announcedMs = (lease: Lease): number =>
  Math.max(0, (lease.countdown - 1) * COUNTDOWN_STEP_MS - DRAIN_MARGIN_MS);

/**
 * Until when (local epoch ms) a read sent at `sentAt` proves a valid token safe to serve: no
 * request that revokes it can leave before then. With no lease on it, a replacement still has
 * to take the lease and count all the way down (more than a re-check); with one, what its
 * countdown announced.
 */
export const servableUntil = (
  record: TokenRecord,
  lease: Lease | undefined,
  sentAt: number,
  settings: RefreshSettings,
): number =>
  sentAt +
  (lease
    ? announcedMs(lease)
    : // Any replacement counts down at least this reader's re-check (see `recheckMs`).
      stepsToCover(recheckMs(record, settings)) * COUNTDOWN_STEP_MS - DRAIN_MARGIN_MS);

/** A token under a lease whose countdown has ended: its replacement's request may be out. */
export const replacementMayBeOut = (lease: Lease | undefined): boolean =>
  lease !== undefined && announcedMs(lease) <= 0;

/**
 * Whether a token held in memory may be served for a caller who needs `needMs` more validity:
 * valid long enough, read from the store less than a re-check ago, and still inside the time
 * that read proved it safe (`servableUntil`: shorter once a countdown is under way; a countdown
 * read long before its end is read again `CUT_OVER_REREAD_MS` before it). Why
 * re-check at all: another container may have invalidated or replaced the shared token; a
 * cache that never looks would keep serving it.
 */
export const servableFromMemory = (
  entry: {
    readonly record: TokenRecord;
    readonly checkedAt: number;
    readonly until: number;
    readonly lease?: Lease | undefined;
  },
  now: number,
  needMs: number,
  settings: RefreshSettings,
): boolean =>
  entry.record.expiresAt - now > needMs &&
  now < entry.until &&
  now - entry.checkedAt < recheckMs(entry.record, settings) &&
  !(
    entry.lease !== undefined &&
    entry.until - entry.checkedAt > 2 * CUT_OVER_REREAD_MS &&
    now >= entry.until - CUT_OVER_REREAD_MS
  );

/**
 * XFetch (Vattani et al., VLDB 2015), aimed so that the cut-over lands at the middle of the
 * refresh window: a try starts a countdown, so it is aimed a countdown earlier (never before
 * the window starts). The closer that aim, the likelier a request tries for the lease, so the
 * fleet does not try in step, and every try falls inside the window. XFetch's exponential tail
 * is capped because a busy fleet draws it hundreds of times a second. It decides when to *try*;
 * the lease decides who mints.
 *
 * @param draw uniform in [0, 1)
 * @param issuanceMs the last measured issuance duration, countdown excluded (XFetch's δ)
 */
export const dueForRefresh = (
  record: TokenRecord,
  now: number,
  settings: RefreshSettings,
  draw: number,
  issuanceMs = DEFAULT_ISSUANCE_MS,
): boolean => {
  const half = windowMs(record, settings) / 2;
  const lead = Math.min(half, countdownFor(record, settings) * COUNTDOWN_STEP_MS);
  const earliness = Math.min(half - lead, -issuanceMs * XFETCH_BETA * Math.log(1 - draw));
  return now + earliness >= record.expiresAt - half - lead;
};

/**
 * Whether a token held in memory may still be served although the store cannot confirm it now
 * (DynamoDB unreachable from this container, or a newer token could not be had). Up to its
 * `until`, no replacement elsewhere can have revoked it (every replacement announces a
 * countdown that outlasts it); past that, only an operator's explicit outage grace lets it be
 * served (a trade against the fleet guarantee, for availability while DynamoDB is down).
 */
export const servableUnconfirmed = (
  entry: { readonly record: TokenRecord; readonly until: number },
  now: number,
  settings: RefreshSettings,
): boolean =>
  entry.record.expiresAt > now && now < entry.until + (settings.storeOutageGraceMs ?? 0);

/**
 * Until when (local epoch ms) the caller just served `entry`'s token may reuse it without asking
 * again (the `maxAgeMs` of the answer): no longer than this container would serve it from memory
 * (its last read's proof, at most a re-check after that read), less the margin, and never past
 * the instant the token keeps only the `needMs` of validity the caller asked for. Another cache
 * in front of the same token proves nothing of its own: it may only borrow this proof.
 */
export const reusableUntil = (
  entry: { readonly record: TokenRecord; readonly checkedAt: number; readonly until: number },
  needMs: number,
  settings: RefreshSettings,
): number => {
  const proof = Math.min(entry.until, entry.checkedAt + recheckMs(entry.record, settings));
  return Math.min(proof - REUSE_MARGIN_MS, entry.record.expiresAt - needMs);
};
