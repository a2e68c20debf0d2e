/**
 * How far a caller's word may go (invariant I4, docs/protocol.md): a caller may ask for
 * validity (`minValidity`) and report a rejected token (invalidate), and either can replace a
 * valid token, which the upstream then revokes. Bounded so that no caller, nor any mix of callers and paths, replaces tokens more
 * than once per refresh window:
 *
 * - a token issued on a caller's word (`TokenRecord.forced`) is replaced on a caller's word only
 *   once it is a refresh window old (`BROKER_FORCED_MIN_AGE_SECONDS` sets another age);
 * - any other token (first, warm-up, refresh ahead, takeover…), once it is
 *   `BROKER_INVALIDATE_MIN_AGE_SECONDS` old: its first forced replacement;
 * - ages are measured on this container's monotonic clock from when it first saw the token,
 *   which is never before its issuance: no clock is compared with another's (a reporter whose
 *   clock runs ahead finds no token older than it is), and a clock that steps changes nothing;
 * - a report that comes too early is kept (in the store) and acted on once the age is reached;
 *   a `minValidity` that comes too early is refused with what can be had now.
 *
 * The natural replacements (the warm-up, refresh ahead, an expired token) are not bounded
 * here: each happens once per token lifetime, in its refresh window, which a forced token
 * reaches only once it is a window old (a window is at most half a lifetime).
 */
import { BadRequestError, ForceNotAllowedError, ReplacementTooSoonError } from '../../errors.js';
import type { TokenRecord } from '../../ports.js';
import { UNNAMED_CALLER } from '../issuance/index.js';
import { type RefreshSettings, windowMs } from '../timing/index.js';
import type { GetTokenOptions } from '../types.js';
import type { TokenRequest } from '../view/index.js';

export interface CallerBoundSettings extends RefreshSettings {
  /** BROKER_INVALIDATE_MIN_AGE_SECONDS, in ms (0 when not given). */
  readonly invalidateFloorMs?: number;
  /** BROKER_FORCED_MIN_AGE_SECONDS, in ms; when not given, the token's refresh window. */
  readonly forcedMinAgeMs?: number;
}

/**
 * How long (ms) a caller's word must still wait before it may replace `record`, which this
 * container has known for `knownForMs`; 0 or less: it may now.
 */
export const waitBeforeReplacing = (
  record: TokenRecord,
  knownForMs: number,
  settings: CallerBoundSettings,
): number =>
  (record.forced
    ? (settings.forcedMinAgeMs ?? windowMs(record, settings))
    : (settings.invalidateFloorMs ?? 0)) - knownForMs;

/**
 * The largest whole `minValidity` that `record` satisfies at `now` (served: left > need), with
 * a second or more to spare: the caller asks again a round trip later, maybe of a container
 * whose clock runs a little ahead.
 */
export const availableMinValidity = (record: TokenRecord, now: number): number =>
  Math.max(0, Math.floor((record.expiresAt - now) / 1000) - 1);

/** What a request that needs `needMs` would do to `record`: is it a forced replacement? */
export const forcesReplacement = (
  record: TokenRecord,
  needMs: number,
  now: number,
  settings: RefreshSettings,
): boolean => {
  const left = record.expiresAt - now;
  // Inside its window the token is due for replacement anyway: asking for more forces nothing.
  return left <= needMs && left > windowMs(record, settings);
};

interface ForcingRequest {
  readonly record: TokenRecord;
  readonly needMs: number;
  /** Wall clock: the token's expiry. */
  readonly now: number;
  /** How long this container has known the token (its monotonic clock). */
  readonly knownForMs: number;
  /** Whether this caller may force a replacement at all (the connection's `forceCallers`). */
  readonly mayForce: boolean;
}

/**
 * Why a request that forces a replacement of `record` is refused, or undefined when it may go
 * on. The refusal says what the caller can ask for instead.
 */
export const forcingRefusal = (
  request: ForcingRequest,
  settings: CallerBoundSettings,
): ForceNotAllowedError | ReplacementTooSoonError | undefined => {
  const { record, needMs, now } = request;
  if (!forcesReplacement(record, needMs, now, settings)) return undefined;
  const available = availableMinValidity(record, now);
  const asked = Math.ceil(needMs / 1000);
  if (!request.mayForce) {
    return new ForceNotAllowedError(
      `A minValidity of ${asked}s would replace the current token, which this caller may not ` +
        `force; ask for ${available}s or less`,
      { availableMinValidity: available },
    );
  }
  const waitMs = waitBeforeReplacing(record, request.knownForMs, settings);
  if (waitMs <= 0) return undefined;
  const retryAfterSeconds = Math.ceil(waitMs / 1000);
  return new ReplacementTooSoonError(
    `A minValidity of ${asked}s would replace the current token sooner than a caller's request ` +
      `may (${record.forced ? 'once per refresh window' : 'not in its first moments'}); ` +
      `ask for ${available}s or less now, or retry in ${retryAfterSeconds}s`,
    { availableMinValidity: available, retryAfterSeconds },
  );
};

/**
 * The one `TokenRequest` of a `getToken` call, its `minValidity` checked here, once: a whole
 * number of seconds (the default when none is asked), below the longest lifetime a token may have.
 * @throws {BadRequestError}
 */
export const tokenRequest = (
  options: GetTokenOptions,
  config: { readonly defaultMinValiditySeconds: number; readonly maxTokenLifetimeSeconds: number },
): TokenRequest => {
  const minValiditySeconds = options.minValiditySeconds ?? config.defaultMinValiditySeconds;
  if (!Number.isInteger(minValiditySeconds) || minValiditySeconds < 0) {
    throw new BadRequestError('minValidity must be a whole number of seconds, 0 or more');
  }
  if (minValiditySeconds >= config.maxTokenLifetimeSeconds) {
    throw new BadRequestError(
      `minValidity must be below the maximum token lifetime (${config.maxTokenLifetimeSeconds}s)`,
    );
  }
  return {
    minValidityMs: minValiditySeconds * 1000,
    explicit: options.minValiditySeconds !== undefined,
    deadline: options.deadline,
    workUntil: options.workUntil,
    caller: options.caller ?? UNNAMED_CALLER,
    mayForce: options.mayForce ?? true,
  };
};
