/**
 * The broker's configuration: one loader, {@link loadConfig}, run once at cold start. Each part
 * of it is read in a module of its own under `config/`: the connections (`BROKER_CONNECTIONS`)
 * and the single-valued variables; `config/build.ts` reads them in order. The cold start calls
 * `loadConfigAtInit` (`config/at-init.ts`), which gives the same answers without loading the
 * schema library for a valid configuration (issue 25).
 */

import type { ProtocolTiming } from './broker/timing/index.js';
import { buildConfig } from './config/build.js';
import { parseConnections } from './config/connection-schema.js';
import type { ConnectionConfig } from './config/connections.js';
import type { Env } from './config/variables.js';

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
   * IAM ARN globs of the HTTP callers that may use the operator routes (`/status`, `/ready`,
   * `/warm`): `BROKER_OPERATOR_CALLERS`; undefined: every caller IAM lets in.
   */
  readonly operatorCallers: readonly string[] | undefined;
  /**
   * The alias the Function URL serves (`BROKER_URL_QUALIFIER`; the stack's `url`): an HTTP
   * request is served only when invoked through it, for only the URL's own request context says
   * who called, and it serves nothing else (issue 37). Undefined: every qualifier serves every
   * kind of event (tests that run the handler in process).
   */
  readonly urlQualifier: string | undefined;
  /**
   * The protocol's timing: the default, or every constant scaled by `BROKER_TIMING_SCALE` (the
   * local runtime and tests only: refused unless the store is a loopback endpoint).
   */
  readonly timing: ProtocolTiming;
}

/**
 * Reads and validates the broker's configuration from the environment, once, at cold start.
 *
 * @throws {ConfigError} naming the variable (and, for `BROKER_CONNECTIONS`, the connection and
 *   the field) whose value is missing or malformed, a `BROKER_*` variable nothing reads (with
 *   the one it most likely misspells), or two settings that contradict each other
 *   (`config/settings-check.ts`, shared with `npm run validate`).
 */
export const loadConfig = (env: Env): BrokerConfig => buildConfig(env, parseConnections);
