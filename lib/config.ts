/**
 * The broker's configuration: one loader, {@link loadConfig}, run once at cold start. Each part
 * of it is read in a module of its own under `config/`: the connections (`BROKER_CONNECTIONS`)
 * and the single-valued variables.
 */

import {
  MAX_TIMING_SCALE,
  MIN_TIMING_SCALE,
  type ProtocolTiming,
  protocolTiming,
  scaledTiming,
} from './broker/timing/index.js';
import { type ConnectionConfig, parseConnections } from './config/connections.js';
import { timingScaleProblem, unknownVariables, windowProblem } from './config/settings-check.js';
import { decimal, type Env, integer, kmsKeyId, oneOf } from './config/variables.js';
import { ConfigError } from './errors.js';

export type { ConnectionConfig, Variant } from './config/connections.js';
export type { Env } from './config/variables.js';

/** The whole, validated, frozen configuration. Built once per container by {@link loadConfig}. */
export interface BrokerConfig {
  readonly tableName: string;
  readonly connections: ReadonlyMap<string, ConnectionConfig>;
  /** Validity a token must still have when a caller gives no `minValidity`. */
  readonly defaultMinValiditySeconds: number;
  /** The warm-up re-issues tokens that expire within this window. */
  readonly refreshWindowSeconds: number;
  /** How long a token held in memory is served before DynamoDB is read again. */
  readonly memoryRecheckSeconds: number;
  /** Upper bound accepted for the upstream `expiresIn`; larger values are rejected. */
  readonly maxTokenLifetimeSeconds: number;
  /** Time limit of one upstream HTTP request (further bounded by the Lambda deadline). */
  readonly upstreamTimeoutMs: number;
  /**
   * Connection and request time limit of each AWS call (DynamoDB, Secrets Manager, KMS), per
   * attempt: a stalled connection fails in this time instead of the SDK's defaults (none).
   */
  readonly awsTimeoutMs: number;
  /**
   * A reported token younger than this is not dropped: however many callers report tokens,
   * a connection is re-issued at most once per this many seconds on their word.
   */
  readonly invalidateMinAgeSeconds: number;
  /**
   * A token issued on a caller's word (a forcing `minValidity`, an invalidate report) is not
   * replaced on a caller's word before it is this old; undefined: its refresh window (the
   * configured window, at most half its lifetime). So no caller replaces tokens more than once
   * per window.
   */
  readonly forcedMinAgeSeconds: number | undefined;
  /**
   * How long past its last confirmation a token in memory may still be served while DynamoDB
   * cannot be read. 0 keeps the fleet guarantee (a container cut off from DynamoDB cannot know
   * that another replaced, and so revoked, its token); more trades it for availability.
   */
  readonly storeOutageGraceSeconds: number;
  /** How long a secret read from Secrets Manager is reused. */
  readonly secretMaxAgeSeconds: number;
  /** While Secrets Manager fails, the last secret read is used for at most this long. */
  readonly secretStaleMaxSeconds: number;
  /** KMS key (id, ARN or alias) for application-level token encryption; undefined: none. */
  readonly kmsKeyId: string | undefined;
  /**
   * `background`: a request inside a token's window starts its refresh after the answer (kept
   * running by the after-response extension in Lambda); `off`: only the warm-up, and a caller
   * whose token no longer satisfies it, refresh (in the foreground). See the README.
   */
  readonly refreshAhead: 'background' | 'off';
  /**
   * The protocol's timing: the default, or every constant scaled by `BROKER_TIMING_SCALE` (the
   * local runtime and tests only: refused unless the store is a loopback endpoint).
   */
  readonly timing: ProtocolTiming;
}

const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;

/**
 * Reads and validates the broker's configuration from the environment, once, at cold start.
 *
 * @throws {ConfigError} naming the variable (and, for `BROKER_CONNECTIONS`, the connection and
 *   the field) whose value is missing or malformed, a `BROKER_*` variable nothing reads (with
 *   the one it most likely misspells), or two settings that contradict each other
 *   (`config/settings-check.ts`, shared with `npm run validate`).
 */
export const loadConfig = (env: Env): BrokerConfig => {
  const unknown = unknownVariables(env);
  if (unknown.length > 0) throw new ConfigError(unknown.join('; '));
  const tableName = env.BROKER_TABLE_NAME?.trim();
  if (!tableName) throw new ConfigError('BROKER_TABLE_NAME is required');
  if (!TABLE_NAME.test(tableName)) {
    throw new ConfigError('BROKER_TABLE_NAME is not a valid DynamoDB table name');
  }
  const connections = parseConnections(env.BROKER_CONNECTIONS);
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
  // The store's round-trip bound (`ProtocolTiming.stepWriteAllowanceMs`): the default suits a
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
  const maxRecheckSeconds = Math.floor(timing.maxMemoryRecheckMs / 1000);
  return Object.freeze({
    tableName,
    connections,
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
    timing,
  });
};

/** `timing` with the store's round-trip bound `ms`, or a `ConfigError` naming the relation it breaks. */
const withStoreRoundTrip = (timing: ProtocolTiming, ms: number): ProtocolTiming => {
  try {
    return protocolTiming({ ...timing, stepWriteAllowanceMs: ms, maxStepWriteMs: ms });
  } catch (error) {
    throw new ConfigError(
      `BROKER_STORE_ROUND_TRIP_MS (${ms}) does not fit the protocol's timing: ${(error as Error).message}`,
    );
  }
};
