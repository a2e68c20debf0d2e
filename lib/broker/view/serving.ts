/**
 * One request for a token (`TokenRequest`, made once at the facade), and the one rule by which
 * this container serves a token without a fresh read (`servable`, I2). Pure.
 */
import type { Deadline } from '../../clock.js';
import {
  isOutcomeUnknown,
  StoreUnavailableError,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../errors.js';
import type { Lease, ReplacedToken, TokenRecord, TokenState } from '../../ports.js';
import {
  cutOverRereadMs,
  type ProtocolTiming,
  type RefreshSettings,
  recheckMs,
  replacementMayBeOut,
  reusableUntil,
  staleIfErrorMs,
  type TokenTimes,
  windowMs,
} from '../timing/index.js';

/** A token memory holds, with what the store last said of it. */
export interface MemoryEntry {
  readonly record: TokenRecord;
  /** When the read that last confirmed this token was sent (local epoch ms). */
  readonly checkedAt: number;
  /** The monotonic clock at that instant, from which the entry is rebased. */
  readonly checkedAtMonotonic?: number | undefined;
  /** Until when that read proves the token safe to serve (`proofMs` from its send). */
  readonly until: number;
  /** The lease that read found on the token: its replacement is under way, cut-over announced. */
  readonly lease?: Lease | undefined;
  /** A caller reported the token as rejected too early to replace it: replaced once it may be. */
  readonly reported?: boolean | undefined;
  /** Held in memory only (its write failed): replaced once the lease runs out; no stale use. */
  readonly unstored?: boolean | undefined;
}

/** What one caller asks of a connection, validated once where it comes in. */
export interface TokenRequest {
  /** Validity the token must still have, ms; the warm-up's: outside its window (not memory's). */
  readonly minValidityMs: number | 'outside-window';
  /** The caller named its validity: no last good token stands in for it after a failure. */
  readonly explicit: boolean;
  /** By when it is answered (I3). */
  readonly deadline: Deadline;
  /** By when work it starts after its answer (a refresh ahead) must be over, if it must. */
  readonly workUntil?: Deadline | undefined;
  /** Who asks: logged with a refusal or an issuance it causes. */
  readonly caller: string;
  /** Whether it may force a replacement (the connection's `forceCallers`, I4). */
  readonly mayForce: boolean;
}

/** A request the broker makes itself (the warm-up, a refresh's fallback): it may force. */
export const ownRequest = (
  minValidityMs: TokenRequest['minValidityMs'],
  deadline: Deadline,
  caller: string,
): TokenRequest => {
  // Stryker disable next-line BooleanLiteral: equivalent: only a failed getToken asks for a last good token
  return { minValidityMs, explicit: false, deadline, caller, mayForce: true };
};

/** What the serving rule reads of a request. */
export type ServingRequest = Pick<TokenRequest, 'minValidityMs' | 'explicit'>;

/** The validity (ms) `request` needs of `token`: the warm-up's is its window (0 without one). */
export const validityNeeded = (
  request: Pick<TokenRequest, 'minValidityMs'>,
  token: TokenTimes | undefined,
  settings: RefreshSettings,
): number => {
  if (request.minValidityMs !== 'outside-window') return request.minValidityMs;
  return token ? windowMs(token, settings) : 0;
};

/**
 * I2. The token a read found (valid, expired by less than the skew, or unreadable here) if its
 * replacement's request may be out. Never served nor kept. The one place "suspect" is judged.
 */
export const suspectToken = (
  state: TokenState,
  revokesOnReissue: boolean,
  now: number,
  timing: ProtocolTiming,
): ReplacedToken | undefined => {
  const stored = state.token ?? state.unreadable;
  const recent = stored !== undefined && stored.expiresAt + timing.skewToleranceMs > now;
  return recent && revokesOnReissue && replacementMayBeOut(state.lease, timing)
    ? stored
    : undefined;
};

/** Why memory is asked: first (none), the store could not be read, or the request failed. */
export type Asked = undefined | 'store-down' | { readonly failed: unknown };

export interface Servable {
  /** Memory's token, if a rule (`why`) lets it be served now, until `until` (else now). */
  readonly record?: TokenRecord | undefined;
  readonly why?: 'proved' | 'store-down' | 'outage-grace' | 'last-good' | undefined;
  readonly until: number;
  /** I2 in callers' caches: until when a caller may reuse memory's token (`maxAgeMs`)... */
  readonly reusableUntil: number;
  /** ...and then use it stale if it cannot reach the broker (`stale-if-error`, ADR 0017). */
  readonly staleIfErrorMs: number;
}

/**
 * I2. Whether memory may serve `entry` (rebased) for `request` at `now`, after `asked`; until
 * when, and why: `proved` (inside a recent read's proof), `store-down`, `last-good` (after a
 * failure that says nothing against it, for a caller that named no validity), `outage-grace`
 * (past the proof, inside the operator's grace). The warm-up never gets memory's token.
 */
export const servable = (
  entry: MemoryEntry | undefined,
  request: ServingRequest,
  now: number,
  settings: RefreshSettings,
  asked: Asked = undefined,
): Servable => {
  const need = request.minValidityMs;
  if (!entry || need === 'outside-window')
    return { until: now, reusableUntil: now, staleIfErrorMs: 0 };
  const { record } = entry;
  const failed = typeof asked === 'object';
  const reuse = reusableUntil(entry, need, settings);
  const answer = {
    reusableUntil: reuse,
    staleIfErrorMs: failed ? 0 : staleIfErrorMs(entry, reuse, now),
  };
  // After a failure that may have revoked it, or for a caller that named its validity: none.
  if (failed && (request.explicit || !saysNothingAgainst(asked.failed))) {
    return { until: now, ...answer };
  }
  let until: number;
  let why: Servable['why'];
  if (asked === undefined) {
    // A countdown read long before its end is read once more near it (liveness only).
    const early = cutOverRereadMs(settings.timing);
    const reread =
      entry.lease && entry.until - entry.checkedAt > 2 * early ? entry.until - early : Infinity;
    const recheck = entry.checkedAt + recheckMs(record, settings);
    until = Math.min(entry.until, recheck, reread, record.expiresAt - need);
    why = 'proved';
  } else {
    // Unconfirmed; the last good token stands in with whatever validity it has left.
    const grace = entry.until + (settings.storeOutageGraceMs ?? 0);
    until = Math.min(record.expiresAt - (failed ? 0 : need), grace);
    why = now >= entry.until ? 'outage-grace' : failed ? 'last-good' : 'store-down';
  }
  return until > now ? { record, why, until, ...answer } : { until: now, ...answer };
};

/** A failure after which the last good token may stand in for a newer one (see `servable`). */
const saysNothingAgainst = (error: unknown): boolean =>
  !(error instanceof UpstreamUnavailableError && error.refreshInProgress === true) &&
  !isOutcomeUnknown(error) &&
  (error instanceof UpstreamUnavailableError ||
    error instanceof UpstreamRejectedError ||
    error instanceof UpstreamBadResponseError ||
    error instanceof StoreUnavailableError);
