/** The environment, and the readers of its single-valued variables. */
import { ConfigError } from '../errors.js';

export type Env = Readonly<Record<string, string | undefined>>;

/**
 * A whole number from `min` to `max`, or `fallback` when the variable is unset or blank.
 *
 * @throws {ConfigError} naming the variable and its bounds.
 */
export const integer = (env: Env, variable: string, fallback: number, min: number, max: number) => {
  const raw = env[variable];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`${variable} must be a whole number from ${min} to ${max}`);
  }
  return value;
};

/**
 * A number from `min` to `max` (decimals allowed), or `fallback` when unset or blank.
 *
 * @throws {ConfigError} naming the variable and its bounds.
 */
export const decimal = (env: Env, variable: string, fallback: number, min: number, max: number) => {
  const raw = env[variable];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isFinite(value) || value < min || value > max) {
    throw new ConfigError(`${variable} must be a number from ${min} to ${max}`);
  }
  return value;
};

/**
 * `BROKER_KMS_KEY_ID`: a KMS key id, key ARN, alias name or alias ARN; undefined when unset.
 *
 * @throws {ConfigError} when it is none of those.
 */
export const kmsKeyId = (raw: string | undefined): string | undefined => {
  const value = raw?.trim();
  if (!value) return undefined;
  if (
    !/^(arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)\/[A-Za-z0-9/_+=,.@-]+|alias\/[A-Za-z0-9/_-]+|[0-9a-f-]{36}|mrk-[0-9a-f]{32})$/.test(
      value,
    )
  ) {
    throw new ConfigError(
      'BROKER_KMS_KEY_ID must be a KMS key id, key ARN, alias name or alias ARN',
    );
  }
  return value;
};

/** One of `values`, or `fallback` when unset; anything else fails naming the variable. */
export const oneOf = <T extends string>(
  env: Env,
  variable: string,
  values: readonly T[],
  fallback: T,
): T => {
  const raw = env[variable]?.trim();
  if (!raw) return fallback;
  if ((values as readonly string[]).includes(raw)) return raw as T;
  throw new ConfigError(`${variable} must be one of ${values.join(', ')}`);
};
