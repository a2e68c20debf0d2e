/**
 * The rules that relate settings to one another and to the function around them, in one place:
 * the cold start (`loadConfig`, and the first invocation for the function's timeout) and
 * `npm run validate` (infra/stage-check.ts) both apply these, so a stage is refused before it
 * is packaged for the same reason its cold start would refuse it. Pure: each check returns the
 * problem as one line, or undefined. docs/configuration.md ("Settings checked together") lists
 * every rule and message.
 */
import { type ProtocolTiming, stepsToCover, storeReserveMs } from '../broker/timing/index.js';
import { printable } from '../errors.js';
import { distance } from './field-typos.js';
import type { Env } from './variables.js';

/**
 * Every `BROKER_*` variable something in this repository reads. The function reads the first
 * group; the local runtime (`npm start`, local/) the `BROKER_LOCAL_*` ones, which never reach
 * the function there but may be set in a shell that also runs the emulated container
 * (local/container.ts reads `BROKER_LOCAL_TIMEOUT_MS`), so the function accepts them too.
 */
export const FUNCTION_VARIABLES = [
  'BROKER_TABLE_NAME',
  'BROKER_CONNECTIONS',
  'BROKER_CONNECTIONS_PARAMETER',
  'BROKER_REFRESH_WINDOW_SECONDS',
  'BROKER_DEFAULT_MIN_VALIDITY_SECONDS',
  'BROKER_MAX_TOKEN_LIFETIME_SECONDS',
  'BROKER_MEMORY_RECHECK_SECONDS',
  'BROKER_UPSTREAM_TIMEOUT_MS',
  'BROKER_AWS_TIMEOUT_MS',
  'BROKER_INVALIDATE_MIN_AGE_SECONDS',
  'BROKER_FORCED_MIN_AGE_SECONDS',
  'BROKER_STORE_OUTAGE_GRACE_SECONDS',
  'BROKER_SECRET_MAX_AGE_SECONDS',
  'BROKER_SECRET_STALE_MAX_SECONDS',
  'BROKER_KMS_KEY_ID',
  'BROKER_REFRESH_AHEAD',
  'BROKER_LAMBDA_EXTENSION',
  'BROKER_TIMING_SCALE',
  'BROKER_STORE_ROUND_TRIP_MS',
  'BROKER_OPERATOR_CALLERS',
  'BROKER_URL_QUALIFIER',
] as const;

export const LOCAL_VARIABLES = [
  'BROKER_LOCAL_SCHEDULE_SECONDS',
  'BROKER_LOCAL_TIMEOUT_MS',
  'BROKER_LOCAL_EXPIRES_IN',
  'BROKER_LOCAL_SECRETS_FILE',
  'BROKER_LOCAL_MAX_ENVIRONMENTS',
  'BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS',
  'BROKER_LOCAL_FREEZE',
  'BROKER_LOCAL_COMPUTE',
] as const;

/** Read by the fleet tests' token user (test/support/token-user.mjs), a process of its own. */
const TEST_VARIABLES = ['BROKER_URL'] as const;

export const KNOWN_VARIABLES: readonly string[] = [
  ...FUNCTION_VARIABLES,
  ...LOCAL_VARIABLES,
  ...TEST_VARIABLES,
];

/** A name without its unit: `BROKER_REFRESH_WINDOW_SECONDS` → `BROKER_REFRESH_WINDOW`. */
const stem = (name: string) => name.replace(/_(SECONDS|SECS|SEC|MS|MILLIS)$/, '');

/**
 * The known variable `name` is most likely a typo of: the fewest edits, counted on the whole
 * name or on the name without its unit (a dropped `_SECONDS` is one slip, not eight), within a
 * third of its length (at least 3); undefined when none is that close.
 */
export const nearestVariable = (name: string): string | undefined => {
  let best: string | undefined;
  let bestDistance = Math.max(3, Math.floor(name.length / 3)) + 1;
  for (const known of KNOWN_VARIABLES) {
    const d = Math.min(
      distance(known, name.toUpperCase()),
      distance(stem(known), stem(name.toUpperCase())),
    );
    if (d < bestDistance) [best, bestDistance] = [known, d];
  }
  return best;
};

/**
 * Every `BROKER_*` variable of `env` that nothing reads, one line each, with the known one it
 * most likely misspells. Refused, not warned about: a misspelt variable is a setting silently
 * left at its default, and several are safety settings (a grace, a minimum age, a window).
 */
export const unknownVariables = (env: Env): string[] =>
  Object.keys(env)
    .filter((name) => /^broker_/i.test(name) && !KNOWN_VARIABLES.includes(name))
    .sort()
    .map((name) => {
      const near = nearestVariable(name);
      return `${printable(name, 60)} is not a variable the broker reads${near ? ` (did you mean ${near}?)` : ''}; see docs/configuration.md`;
    });

/**
 * The refresh window must be longer than the default `minValidity`: otherwise a token reaches
 * the validity callers ask for by default before it enters its window, and every routine
 * replacement is a caller's (`min-validity`), counted as forced and bounded as one.
 */
export const windowProblem = (settings: {
  readonly refreshWindowSeconds: number;
  readonly defaultMinValiditySeconds: number;
}): string | undefined =>
  settings.refreshWindowSeconds > settings.defaultMinValiditySeconds
    ? undefined
    : `BROKER_REFRESH_WINDOW_SECONDS (${settings.refreshWindowSeconds}) must be longer than BROKER_DEFAULT_MIN_VALIDITY_SECONDS (${settings.defaultMinValiditySeconds}): otherwise every routine refresh is a caller's forced replacement`;

/**
 * `BROKER_TIMING_SCALE` below 1 runs the protocol faster (`scaledTiming`): for the local
 * runtime and tests, whose containers share one machine's clock and a loopback store. A
 * deployed stage is refused it: its clocks differ by up to 10 s and its store is a network
 * away, and a scaled skew tolerance, lease or step would break the safety argument's
 * assumptions there. Known by the store: only a loopback DynamoDB endpoint
 * (`AWS_ENDPOINT_URL_DYNAMODB`, which `npm start` sets) accepts a scale.
 */
export const timingScaleProblem = (scale: number, env: Env): string | undefined => {
  if (scale === 1) return undefined;
  const endpoint = env.AWS_ENDPOINT_URL_DYNAMODB?.trim();
  let loopback = false;
  try {
    loopback = endpoint !== undefined && LOOPBACK.has(new URL(endpoint).hostname);
  } catch {
    loopback = false;
  }
  return loopback
    ? undefined
    : `BROKER_TIMING_SCALE (${scale}) is for the local runtime and tests only (a loopback AWS_ENDPOINT_URL_DYNAMODB): a deployed stage runs the protocol’s real timing`;
};

const LOOPBACK: ReadonlySet<string> = new Set(['127.0.0.1', 'localhost', '[::1]']);

/** The settings the function's timeout must leave room for. */
export interface TimeoutSettings {
  readonly memoryRecheckSeconds: number;
  readonly refreshWindowSeconds: number;
  /**
   * The connections: only one whose reissue revokes the token in service announces a countdown
   * (`revokesOnReissue`, the default); without any, a replacement needs its POST alone.
   */
  readonly connections?: ReadonlyMap<string, { readonly revokesOnReissue: boolean }>;
  /** The protocol's timing (`BrokerConfig.timing`). */
  readonly timing: ProtocolTiming;
}

/**
 * The least function timeout (ms) in which a warm-up can replace a token under these settings:
 * the countdown a replacement announces (longer than a re-check, `countdownFor`), each step
 * with its lease write (`storeRoundTripMs`), the shortest POST and the write after it,
 * and the margin kept to return the answer. The re-check counted is the longest a token can
 * get: the setting, at most a quarter of the configured window (`ownRecheckMs`). No countdown
 * when no connection's reissue revokes the token in service.
 */
export const timeoutNeededMs = (settings: TimeoutSettings): number => {
  const { timing } = settings;
  const recheckMs = Math.min(
    settings.memoryRecheckSeconds * 1000,
    Math.max(timing.countdownStepMs, (settings.refreshWindowSeconds * 1000) / 4),
  );
  const revoking =
    settings.connections === undefined ||
    [...settings.connections.values()].some((c) => c.revokesOnReissue);
  const countdown = revoking ? stepsToCover(recheckMs, timing) : 0;
  return (
    countdown * (timing.countdownStepMs + timing.storeRoundTripMs) +
    timing.minPostMs +
    storeReserveMs(timing) +
    timing.answerMarginMs
  );
};

/**
 * A function timeout (ms: serverless.yml's `timeout`, or the time left at a first invocation)
 * too short for a refresh's countdown and POST: every warm-up and refresh would fail with "Not
 * enough time left…", and tokens would only be replaced once expired.
 */
export const timeoutProblem = (
  settings: TimeoutSettings,
  timeoutMs: number,
): string | undefined => {
  const needed = timeoutNeededMs(settings);
  if (timeoutMs >= needed) return undefined;
  return `BROKER_MEMORY_RECHECK_SECONDS (${settings.memoryRecheckSeconds}) needs a function timeout of at least ${Math.ceil(needed / 1000)} s for a refresh's countdown and POST, but the function's timeout (serverless.yml \`timeout\`) gives ${(timeoutMs / 1000).toFixed(1)} s: lower the re-check or raise the timeout`;
};

/** An EventBridge schedule's period in seconds, `cron` when it is a cron expression. */
export type SchedulePeriod = number | 'cron' | undefined;

const UNIT_SECONDS: Readonly<Record<string, number>> = {
  minute: 60,
  minutes: 60,
  hour: 3600,
  hours: 3600,
  day: 86_400,
  days: 86_400,
};

/**
 * The period of `rate(N minute|minutes|hour|hours|day|days)`, in seconds; `cron` for a cron
 * expression (its period is not one number); undefined for anything else.
 */
export const schedulePeriod = (expression: string): SchedulePeriod => {
  const rate = /^rate\(\s*(\d+)\s+([a-z]+)\s*\)$/.exec(expression.trim());
  if (rate) {
    const unit = UNIT_SECONDS[rate[2] as string];
    const count = Number(rate[1]);
    return unit !== undefined && count > 0 ? count * unit : undefined;
  }
  return /^cron\(.+\)$/.test(expression.trim()) ? 'cron' : undefined;
};

/**
 * The warm-up must run more often than the refresh window is long: otherwise a token can pass
 * through its whole window between two warm-ups, and only a caller (in the foreground) or
 * nobody refreshes it.
 */
export const warmupRateProblem = (
  expression: string,
  refreshWindowSeconds: number,
): string | undefined => {
  const period = schedulePeriod(expression);
  if (period === 'cron') {
    return `warmupRate '${printable(expression)}' is a cron expression, whose period cannot be checked against BROKER_REFRESH_WINDOW_SECONDS (${refreshWindowSeconds}); use rate(N minutes)`;
  }
  if (period === undefined) {
    return `warmupRate '${printable(expression)}' is not rate(N minute|minutes|hour|hours|day|days)`;
  }
  return period < refreshWindowSeconds
    ? undefined
    : `warmupRate '${printable(expression)}' (every ${period} s) must be shorter than BROKER_REFRESH_WINDOW_SECONDS (${refreshWindowSeconds}): a token could pass its whole window between two warm-ups`;
};

/** The account of serverless.yml's example values (and of AWS's documentation). */
export const EXAMPLE_ACCOUNT = '123456789012';

/**
 * Outside `dev`, a stage whose resolved configuration still names the example account: the
 * defaults' secret ARNs, callers or key were not replaced. `resolved` is the configuration as
 * packaged, without its `params` block (which always holds the examples).
 */
export const exampleAccountProblem = (stage: string, resolved: unknown): string | undefined =>
  stage === 'dev' ||
  !new RegExp(`(^|\\D)${EXAMPLE_ACCOUNT}(\\D|$)`).test(JSON.stringify(resolved ?? {}))
    ? undefined
    : `the configuration names the example account ${EXAMPLE_ACCOUNT} (serverless.yml's defaults): replace the account in params.${stage} (secretArns, connections, secretsKmsKeyArn) with your own; only dev may keep it`;
