/**
 * The observer: what a container that needs a token does after each read of the store, as one
 * pure decision (no I/O, no clock; `obtain.ts` drives it). Its diagram: docs/protocol.md.
 */
import {
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  UpstreamUnavailableError,
} from '../../errors.js';
import type { Lease, ReplacedToken, TokenRecord, TokenState } from '../../ports.js';
import { causeOf, type IssuanceCause, isCallersWord } from '../issuance/index.js';
import {
  leaseCountdown,
  leaseNeedsMs,
  pollBaseMs,
  pollCapMs,
  pollWaitMs,
  windowMs,
} from '../timing/index.js';
import { type Seen, suspectToken, type TokenRequest, validityNeeded } from '../view/index.js';
import { type CallerBoundSettings, forcingRefusal } from './caller-bounds.js';

/**
 * Everything the decision reads: one read of the store, and this container's view of it. Times
 * are ms, monotonic but for `now`, the wall clock when the read was answered (token expiry only).
 */
export interface Observation extends Seen {
  readonly state: TokenState;
  readonly request: Pick<TokenRequest, 'minValidityMs' | 'mayForce'>;
  readonly now: number;
  readonly sinceReadMs: number;
  readonly leftMs: number; // before the caller's deadline
  /** Kept before the deadline for one more read (see `readReserveMs`). */
  readonly readReserveMs: number;
  /** This container's last measured read round trip, ms, if any (the holder's token write). */
  readonly lastReadMs?: number | undefined;
  readonly revokesOnReissue: boolean;
  /** How long this container has known the valid token (I4), ms. */
  readonly knownForMs: number;
  /** Waits for a holder since the countdown last moved (the backoff starts again when it does). */
  readonly waits: number;
  /** The last measured issuance duration (XFetch's δ, the cut-over's round trip), ms. */
  readonly issuanceMs: number;
  /** Uniform in [0, 1): the wait's jitter. */
  readonly draw: number;
  readonly settings: CallerBoundSettings;
}

export type Decision =
  | { readonly do: 'serve'; readonly record: TokenRecord }
  | { readonly do: 'reread' }
  | { readonly do: 'let-go'; readonly stale: Lease; readonly record: TokenRecord }
  | {
      readonly do: 'acquire';
      readonly countdown: number;
      readonly takeOver: Lease | undefined;
      readonly replacesDigest: string | undefined;
      /** The valid token replaced (dropped if the POST's outcome is unknown), or a suspect one. */
      readonly replaced: ReplacedToken | undefined;
      /** That token may already be revoked (the lease taken over had counted down). */
      readonly suspect: boolean;
      readonly needMs: number;
      readonly cause: IssuanceCause;
      readonly forced: boolean;
    }
  | { readonly do: 'wait'; readonly ms: number; readonly lease: Lease; readonly suspect: boolean }
  | { readonly do: 'refuse'; readonly error: Error };

export const decide = (o: Observation): Decision => {
  const { token, lease } = o.state;
  // 1. What the read shows: a valid token, and whether it may be served at all (I2).
  const valid = o.valid;
  const servable = valid && !o.suspect ? valid : undefined;
  const warmUp = o.request.minValidityMs === 'outside-window';
  const needMs = validityNeeded(o.request, valid, o.settings);
  // A token inside its window is due: its replacement is routine whatever the need was.
  const inWindow = valid !== undefined && valid.expiresAt - o.now <= windowMs(valid, o.settings);

  // 2. A countdown nobody advances: a caller the token does not satisfy, inside its window,
  //    takes the version over in step 6 and goes on from its countdown (cheaper than a let-go
  //    and a fresh countdown). Otherwise, or without time for it (I3), it is let go.
  if (servable && lease && o.leaseStale) {
    const takeOver =
      o.revokesOnReissue &&
      inWindow &&
      servable.expiresAt - o.now <= needMs &&
      leaseNeedsMs(lease.countdown, o.settings.timing) < o.leftMs;
    if (!takeOver) return { do: 'let-go', stale: lease, record: servable };
  }

  // 3. Fast path: a token that meets the need, served inside what the read proves (I2). An
  //    answer older than its proof may predate a replacement that has since revoked it.
  if (servable && servable.expiresAt - o.now > needMs) {
    if (o.sinceReadMs < o.proofMs) return { do: 'serve', record: servable };
    if (o.leftMs > 0) return { do: 'reread' };
    return refuse(new StoreUnavailableError('The token store answered too slowly; retry shortly'));
  }

  // 4. A need no token of this connection can meet: refused before any upstream call.
  if (token && token.expiresAt - token.issuedAt <= needMs)
    return refuse(unsatisfiable(token, needMs));

  // 5. A caller's word that only a replacement satisfies, with none under way: bounded (I4).
  const leaseLive = lease !== undefined && !o.leaseStale;
  // Stryker disable next-line ConditionalExpression,StringLiteral: equivalent: the warm-up's need is the window, which forcesReplacement never counts as forcing
  if (servable && !leaseLive && !warmUp) {
    const refusal = forcingRefusal({ ...o, ...o.request, record: servable, needMs }, o.settings);
    if (refusal) return refuse(refusal);
  }

  // 6. No live lease: take it (or take over exactly the stale version seen), with time for the
  //    whole countdown and the POST (I3).
  if (!leaseLive) {
    if (o.leftMs <= 0) return refuse(noTimeLeft(o.suspect, 'No time left to issue a token'));
    // A token expired a moment ago here, or unreadable here, may be served elsewhere: announced.
    const stored = token ?? o.state.unreadable;
    const { timing } = o.settings;
    const recent = stored && stored.expiresAt + timing.skewToleranceMs > o.now ? stored : undefined;
    const countdown = leaseCountdown(o.revokesOnReissue, recent, lease, o.settings);
    // Suspect too (`suspectToken`): a flow that ends without a token drops it (I2).
    const mayBeRevoked =
      valid === undefined ? suspectToken(o.state, o.revokesOnReissue, o.now, timing) : undefined;
    if (leaseNeedsMs(countdown, timing) >= o.leftMs) return refuse(notEnoughTime(countdown));
    const cause = causeOf({ ...o, takeOver: lease, warmUp, inWindow });
    return {
      do: 'acquire',
      countdown,
      takeOver: lease,
      // Exactly the token read, or none: nothing announced the replacement of a later one (I2).
      replacesDigest: stored?.tokenDigest,
      replaced: valid ?? mayBeRevoked,
      suspect: o.suspect || mayBeRevoked !== undefined,
      needMs,
      cause,
      // A lease taken over from a caller's replacement finishes it: its token is one too (I4).
      forced: isCallersWord(cause) || lease?.forced === true,
    };
  }

  // 7. Another container holds a live lease: wait for its token, within our own deadline, and
  //    wake with time left for the read (I3).
  const readBy = o.leftMs - o.readReserveMs;
  if (readBy <= 0) return refuse(waitTimedOut(o.suspect));
  // No valid token: read again when the holder's token is expected; else poll.
  const wait =
    valid === undefined
      ? issuanceWaitMs(o, lease)
      : pollWaitMs({ ...o, countdown: lease.countdown }, o.settings.timing);
  // A stopped holder is found at the read after its version has stood its duration (liveness).
  const untilStale = o.staleInMs === undefined ? wait : Math.max(1, o.staleInMs + 1);
  return { do: 'wait', ms: Math.min(wait, untilStale, readBy), lease, suspect: o.suspect };
};

const refuse = (error: Error): Decision => ({ do: 'refuse', error });

/**
 * When a holder's first token is due, for a container that has none (a fleet's cold start): its
 * lease write's send, countdown, one issuance and the round trips, with a jitter. Liveness only.
 */
const issuanceWaitMs = (o: Observation, lease: Lease): number => {
  const { issuanceMs, draw, waits } = o;
  const { timing } = o.settings;
  const spread = Math.max(pollBaseMs(timing), issuanceMs / 4);
  // Later than expected: read again in a growing step, half of it jitter.
  if (waits > 0)
    return Math.max(1, Math.min(pollCapMs(timing), spread * 2 ** waits) * (0.5 + draw / 2));
  const age = Math.min(Math.max(0, o.now - (lease.expiresAt - lease.durationMs)), issuanceMs);
  // The answer to the holder's lease write before its flow (guessed from this read's round
  // trip), and to its token write after it (from the last measured read).
  const trip = (ms: number) => Math.min(Math.max(0, ms), issuanceMs / 2);
  const trips = trip(o.sinceReadMs) + trip(o.lastReadMs ?? o.sinceReadMs);
  const expected = lease.countdown * timing.countdownStepMs + issuanceMs + trips - age;
  return Math.max(1, expected + draw * spread);
};

/** No time for a lease or a wait: while a replacement is under way, the token may be revoked. */
const noTimeLeft = (suspect: boolean, message: string) =>
  new UpstreamUnavailableError(message, { retryAfterSeconds: 1, refreshInProgress: suspect });

/** Too little time left for a lease's countdown and POST: none is taken (I3). */
export const notEnoughTime = (countdown: number) => {
  const what = countdown > 1 ? 'replace the token safely' : 'issue a token';
  return noTimeLeft(false, `Not enough time left to ${what}; retry shortly`);
};

export const waitTimedOut = (suspect: boolean) =>
  noTimeLeft(suspect, 'Timed out waiting for another container to issue the token');

export const unsatisfiable = (record: TokenRecord, needMs: number) => {
  const lifetime = Math.floor((record.expiresAt - record.issuedAt) / 1000);
  return new MinValidityUnsatisfiableError(
    `The Open API issues tokens valid for ${lifetime}s, which cannot satisfy a validity of ${Math.ceil(needMs / 1000)}s`,
  );
};
