/**
 * When a token is refreshed and how often memory is re-checked: pure functions of a token, the
 * time and the settings, with no I/O, so that every rule can be property-tested.
 *
 * A token's life, seen from one container:
 *
 *   issuedAt ─────────── window start ───── window middle ───── expiresAt
 *   re-check every memoryRecheck │ re-check every WINDOW_RECHECK_MS       │
 *                                │ XFetch tries ··· ▸ due from the middle │
 */
import type { TokenRecord } from '../ports.js';

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
 * Inside the refresh window, memory is re-checked at least this often: a refresh elsewhere
 * (which may revoke the token in memory, if the upstream revokes on re-issue) is picked up
 * within this interval instead of `memoryRecheckSeconds`.
 */
export const WINDOW_RECHECK_MS = 250;
/** Clock skew between containers that the protocol tolerates (leases, drains). */
export const SKEW_TOLERANCE_MS = 10_000;

/** What a drain adds to the longest re-check interval: scheduling and clock-rate slack. */
export const DRAIN_MARGIN_MS = 100;

/**
 * How long a refresher that replaces a still-valid token waits, after its lease is written and
 * before it calls the upstream. Every container serving that token from memory re-reads the
 * store within the re-check interval it applies to the token (counted from when its read was
 * *sent*), sees the lease, and stops serving the token before the upstream can revoke it (as
 * many APIs do on re-issue; this one's behaviour is unknown, so assume it). The interval is
 * the token's own: 250 ms inside its window, `memoryRecheckSeconds` outside it (a caller's
 * `minValidity` can force a replacement there).
 */
export const drainMs = (record: TokenRecord, now: number, settings: RefreshSettings): number =>
  // Readers re-check fast from SKEW_TOLERANCE_MS before the window (recheckIntervalMs), so a
  // token inside the window on this clock is re-checked fast by every container whose clock
  // is off by less than that; a replacement outside the window drains the slow pace.
  (inWindow(record, now, settings)
    ? Math.min(WINDOW_RECHECK_MS, settings.memoryRecheckMs)
    : settings.memoryRecheckMs) + DRAIN_MARGIN_MS;

/** XFetch β: 1 is the value the paper shows optimal for a single recompute. */
export const XFETCH_BETA = 1;
/** Issuance duration assumed before one was measured (two loopback-to-internet round trips). */
export const DEFAULT_ISSUANCE_MS = 300;

/** The refresh window of a token: configured, but never more than half its lifetime. */
export const windowMs = (record: TokenRecord, settings: RefreshSettings): number =>
  // A window as long as the lifetime would refresh on every request, forever.
  Math.min(settings.refreshWindowMs, (record.expiresAt - record.issuedAt) / 2);

/** Whether the token has entered its refresh window at `now`. */
export const inWindow = (record: TokenRecord, now: number, settings: RefreshSettings): boolean =>
  record.expiresAt - now <= windowMs(record, settings);

/**
 * How long a memory entry may be served before the store is asked again: fast from
 * SKEW_TOLERANCE_MS before the refresh window on, so that a refresher whose clock runs ahead of
 * ours, and sees the window already, finds us re-checking fast when it drains.
 */
export const recheckIntervalMs = (
  record: TokenRecord,
  now: number,
  settings: RefreshSettings,
): number =>
  record.expiresAt - now <= windowMs(record, settings) + SKEW_TOLERANCE_MS
    ? Math.min(WINDOW_RECHECK_MS, settings.memoryRecheckMs)
    : settings.memoryRecheckMs;

/**
 * Whether a token held in memory may be served for a caller who needs `needMs` more validity:
 * valid long enough, and confirmed by the store recently enough. Why re-check at all: another
 * container may have invalidated or replaced the shared token; a cache that never looks would
 * keep serving it.
 */
export const servableFromMemory = (
  entry: { readonly record: TokenRecord; readonly checkedAt: number },
  now: number,
  needMs: number,
  settings: RefreshSettings,
): boolean =>
  entry.record.expiresAt - now > needMs &&
  now - entry.checkedAt < recheckIntervalMs(entry.record, now, settings);

/**
 * XFetch (Vattani et al., VLDB 2015), aimed at the middle of the refresh window with its
 * earliness capped at half a window: the closer the middle, the likelier a request tries for
 * the lease, so the fleet does not try in step, and every try falls inside the window, where
 * all containers re-check their memory fast (a refresh may revoke what they hold). XFetch's
 * exponential tail is capped because a busy fleet draws it hundreds of times a second. It
 * decides when to *try*; the lease decides who mints.
 *
 * @param draw uniform in [0, 1)
 * @param issuanceMs the last measured issuance duration (XFetch's δ)
 */
export const dueForRefresh = (
  record: TokenRecord,
  now: number,
  settings: RefreshSettings,
  draw: number,
  issuanceMs = DEFAULT_ISSUANCE_MS,
): boolean => {
  const half = windowMs(record, settings) / 2;
  const earliness = Math.min(half, -issuanceMs * XFETCH_BETA * Math.log(1 - draw));
  return now + earliness >= record.expiresAt - half;
};

/**
 * Whether a token held in memory may still be served although the store cannot confirm it now
 * (DynamoDB unreachable from this container, or a newer token could not be had). Another
 * container may have started replacing it since our last read: that replacement calls the
 * upstream no earlier than a drain after its lease was written, and the lease was written after
 * our read was sent. So until `checkedAt` + the drain, no replacement can have revoked it; past
 * that, only an operator's explicit outage grace lets it be served (a trade against the fleet
 * guarantee, for availability while DynamoDB is down everywhere).
 */
export const servableUnconfirmed = (
  entry: { readonly record: TokenRecord; readonly checkedAt: number },
  now: number,
  settings: RefreshSettings,
): boolean =>
  entry.record.expiresAt > now &&
  now - entry.checkedAt < drainMs(entry.record, now, settings) + (settings.storeOutageGraceMs ?? 0);
