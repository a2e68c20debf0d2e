/**
 * How the upstream's refusals read: patterns over its code and message, because the spec lists
 * no failure codes. Kept apart from the client so that the core can use them without loading
 * the upstream client at cold start.
 */

/**
 * A refused signature. Word boundaries treat `_` as a separator (codes such as `INVALID_SIGN`
 * or `SIGN_ERROR`); the provider's Chinese messages say 签名 (signature).
 */
export const SIGNATURE_REFUSAL = /signature|(?<![a-z])sign(?:ed|ing|error|err)?(?![a-z])|签名/i;

/** A refused timestamp (a clock problem, not a secret): 时间戳 is "timestamp". */
export const TIMESTAMP_REFUSAL = /time ?stamp|时间戳/i;

/** Anything that points at Strict Access Token Mode. */
export const isStrictModeRefusal = (said: string): boolean =>
  SIGNATURE_REFUSAL.test(said) || TIMESTAMP_REFUSAL.test(said) || /strict/i.test(said);
