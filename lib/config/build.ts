/**
 * Reads the broker's configuration in order: `loadConfig` (`../config.ts`) and the cold start's
 * loader (`at-init.ts`) both read it here. No import of `../config.ts` (its `BrokerConfig` is
 * this function's value): that module imports this one.
 */
import {
  MAX_TIMING_SCALE,
  MIN_TIMING_SCALE,
  maxMemoryRecheckMs,
  type ProtocolTiming,
  protocolTiming,
  scaledTiming,
} from '../broker/timing/index.js';
import { ConfigError } from '../errors.js';
import type { ConnectionConfig } from './connections.js';
import { timingScaleProblem, unknownVariables, windowProblem } from './settings-check.js';
import { decimal, type Env, integer, kmsKeyId, oneOf } from './variables.js';

const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;

/**
 * `loadConfig`'s body (`../config.ts`), with the connections read by `connections`: every
 * check in the same order, so the same configuration fails with the same first message.
 */
export const buildConfig = (
  env: Env,
  connections: (raw: string | undefined) => Map<string, ConnectionConfig>,
) => {
  const unknown = unknownVariables(env);
  if (unknown.length > 0) throw new ConfigError(unknown.join('; '));
  const tableName = env.BROKER_TABLE_NAME?.trim();
  if (!tableName) throw new ConfigError('BROKER_TABLE_NAME is required');
  if (!TABLE_NAME.test(tableName)) {
    throw new ConfigError('BROKER_TABLE_NAME is not a valid DynamoDB table name');
  }
  const connectionMap = connections(env.BROKER_CONNECTIONS);
  const day = 86_400;
  const maxTokenLifetimeSeconds = integer(
    env,
    'BROKER_MAX_TOKEN_LIFETIME_SECONDS',
    30 * day,
    60,
    365 * day,
  );
  const refreshWindowSeconds = integer(env, 'BROKER_REFRESH_WINDOW_SECONDS', 600, 0, day);
  const defaultMinValiditySeconds = integer(env, 'BROKER_DEFAULT_MIN_VALIDITY_SECONDS', 60, 0, day);
  if (refreshWindowSeconds >= maxTokenLifetimeSeconds) {
    // A window as long as the lifetime would re-issue on every warm-up, forever.
    throw new ConfigError(
      'BROKER_REFRESH_WINDOW_SECONDS must be shorter than BROKER_MAX_TOKEN_LIFETIME_SECONDS',
    );
  }
  const window = windowProblem({ refreshWindowSeconds, defaultMinValiditySeconds });
  if (window) throw new ConfigError(window);
  const scale = decimal(env, 'BROKER_TIMING_SCALE', 1, MIN_TIMING_SCALE, MAX_TIMING_SCALE);
  const scaleProblem = timingScaleProblem(scale, env);
  if (scaleProblem) throw new ConfigError(scaleProblem);
  // The store's round-trip bound (`ProtocolTiming.storeRoundTripMs`): the default suits a
  // table in the function's region; a global table's stages set 150 (serverless.yml).
  const storeRoundTripMs = env.BROKER_STORE_ROUND_TRIP_MS?.trim()
    ? integer(env, 'BROKER_STORE_ROUND_TRIP_MS', 0, 5, 500)
    : undefined;
  const timing =
    storeRoundTripMs === undefined
      ? scaledTiming(scale)
      : withStoreRoundTrip(scaledTiming(scale), storeRoundTripMs);
  // At most 100 s at the default timing: the 100 ms margin between a reader's proof and a POST
  // then covers a 0.1 % rate difference between two containers' clocks (docs/protocol.md,
  // assumptions); a scaled timing scales the cap with the margin.
  const maxRecheckSeconds = Math.floor(maxMemoryRecheckMs(timing) / 1000);
  return Object.freeze({
    tableName,
    connections: connectionMap,
    defaultMinValiditySeconds,
    refreshWindowSeconds,
    memoryRecheckSeconds: integer(
      env,
      'BROKER_MEMORY_RECHECK_SECONDS',
      Math.min(5, maxRecheckSeconds),
      0,
      maxRecheckSeconds,
    ),
    maxTokenLifetimeSeconds,
    upstreamTimeoutMs: integer(env, 'BROKER_UPSTREAM_TIMEOUT_MS', 5000, 100, 60_000),
    awsTimeoutMs: integer(env, 'BROKER_AWS_TIMEOUT_MS', 1000, 50, 30_000),
    invalidateMinAgeSeconds: integer(env, 'BROKER_INVALIDATE_MIN_AGE_SECONDS', 2, 0, 3600),
    forcedMinAgeSeconds: env.BROKER_FORCED_MIN_AGE_SECONDS?.trim()
      ? integer(env, 'BROKER_FORCED_MIN_AGE_SECONDS', 0, 0, day)
      : undefined,
    storeOutageGraceSeconds: integer(env, 'BROKER_STORE_OUTAGE_GRACE_SECONDS', 0, 0, day),
    secretMaxAgeSeconds: integer(env, 'BROKER_SECRET_MAX_AGE_SECONDS', 300, 0, day),
    secretStaleMaxSeconds: integer(env, 'BROKER_SECRET_STALE_MAX_SECONDS', 3600, 0, 7 * day),
    kmsKeyId: kmsKeyId(env.BROKER_KMS_KEY_ID),
    refreshAhead: oneOf(env, 'BROKER_REFRESH_AHEAD', ['background', 'off'], 'background'),
    operatorCallers: operatorCallers(env),
    urlQualifier: urlQualifier(env),
    timing,
  });
};

/**
 * `BROKER_OPERATOR_CALLERS`: the IAM ARN globs (comma-separated) of the HTTP callers that may
 * use the operator routes (`/status`, `/ready`, `/warm`); undefined when unset or blank (every
 * caller IAM lets in, as before the setting; a stack passes '' for none).
 */
const operatorCallers = (env: Env): readonly string[] | undefined => {
  const raw = env.BROKER_OPERATOR_CALLERS;
  if (!raw?.trim()) return undefined;
  const patterns = raw
    .split(',')
    .map((pattern) => pattern.trim())
    .filter(Boolean);
  if (patterns.length === 0) {
    throw new ConfigError(
      'BROKER_OPERATOR_CALLERS must name at least one IAM ARN pattern (comma-separated); unset it to let every caller IAM lets in use the operator routes',
    );
  }
  return Object.freeze(patterns);
};

/** Lambda's alias names: letters, digits, `-` and `_`, not only digits (that is a version). */
const ALIAS_NAME = /^(?!\d+$)[A-Za-z0-9_-]{1,128}$/;

/**
 * `BROKER_URL_QUALIFIER`: the alias the Function URL serves (issue 37); undefined when unset or
 * blank. An alias, never `$LATEST` or a version: those are reached by direct invoke too.
 */
const urlQualifier = (env: Env): string | undefined => {
  const raw = env.BROKER_URL_QUALIFIER?.trim();
  if (!raw) return undefined;
  if (!ALIAS_NAME.test(raw)) {
    throw new ConfigError(
      'BROKER_URL_QUALIFIER must be the name of the alias the Function URL serves (1 to 128 letters, digits, - or _, not only digits; not $LATEST)',
    );
  }
  return raw;
};

/** `timing` with the store's round-trip bound `ms`, or a `ConfigError` naming the relation it breaks. */
const withStoreRoundTrip = (timing: ProtocolTiming, ms: number): ProtocolTiming => {
  try {
    return protocolTiming({ storeRoundTripMs: ms }, timing);
  } catch (error) {
    throw new ConfigError(
      `BROKER_STORE_ROUND_TRIP_MS (${ms}) does not fit the protocol's timing: ${(error as Error).message}`,
    );
  }
};
