/** How far a caller's word (`minValidity`, invalidate) may go (I4); a `getToken` call's request. */
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

/** How long (ms) a caller's word must still wait to replace `record`; <= 0: it may now. */
export const waitBeforeReplacing = (
  record: TokenRecord,
  knownForMs: number,
  settings: CallerBoundSettings,
): number =>
  (record.forced
    ? (settings.forcedMinAgeMs ?? windowMs(record, settings))
    : (settings.invalidateFloorMs ?? 0)) - knownForMs;

/** The largest whole `minValidity` `record` satisfies at `now`, with a second to spare. */
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

interface ForcingRequest extends Pick<TokenRequest, 'mayForce'> {
  readonly record: TokenRecord;
  readonly needMs: number;
  readonly now: number; // the wall clock: the token's expiry
  readonly knownForMs: number; // the token's age here (monotonic)
}

/** Why a request forcing a replacement of `record` is refused (saying what it can ask instead). */
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

/** The one `TokenRequest` of a `getToken` call; throws `BadRequestError` on a bad `minValidity`. */
export const tokenRequest = (
  options: GetTokenOptions,
  config: { readonly defaultMinValiditySeconds: number; readonly maxTokenLifetimeSeconds: number },
): TokenRequest => {
  const minValiditySeconds = options.minValiditySeconds ?? config.defaultMinValiditySeconds;
  if (!Number.isInteger(minValiditySeconds) || minValiditySeconds < 0)
    throw new BadRequestError('minValidity must be a whole number of seconds, 0 or more');
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
