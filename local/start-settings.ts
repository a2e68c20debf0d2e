/**
 * `npm start`'s own settings, and the environment its function gets. Pure: read from the `env`
 * given, checked once; start.ts reports a bad value as one line and exits.
 */
import { unknownVariables } from '../lib/config/settings-check.js';
import { CPU_SHARE_VARIABLE } from './cpu-share.js';

type Env = Readonly<Record<string, string | undefined>>;

export interface StartSettings {
  readonly host: string;
  readonly port: number;
  readonly scheduleSeconds: number;
  readonly timeoutMs: number;
  readonly expiresIn: number;
  readonly secretsFile: string | undefined;
  readonly maxEnvironments: number;
  readonly idleShutdownSeconds: number;
  readonly freeze: boolean;
  /**
   * BROKER_LOCAL_COMPUTE: `lambda` (Lambda's own model, the default) or `managed-instances`
   * (Lambda Managed Instances: worker threads, many invocations at once, never frozen; issue 37).
   */
  readonly compute: 'lambda' | 'managed-instances';
  /** BROKER_LOCAL_CPU_SHARE: `off` runs the environments on whole cores (local/cpu-share.ts). */
  readonly cpuShare: boolean;
}

/**
 * The local runtime's settings (docs/guide.md, "The local runtime").
 *
 * @throws {Error} naming the variable and what it must be; or a `BROKER_*` variable nothing
 *   reads, with the one it most likely misspells (a `BROKER_LOCAL_*` one never reaches the
 *   function, so only this check can name it).
 */
export const readSettings = (env: Env): StartSettings => {
  // The local runtime's own variable, which the broker's list does not hold (it never reaches
  // the function): checked below instead.
  const { [CPU_SHARE_VARIABLE]: cpuShare, ...others } = env;
  const [unknown] = unknownVariables(others);
  if (unknown) throw new Error(unknown);
  const whole = (name: string, fallback: number, min: number, max = Number.MAX_SAFE_INTEGER) => {
    const raw = env[name]?.trim();
    const value = raw === undefined || raw === '' ? fallback : Number(raw);
    if (!Number.isInteger(value) || value < min || value > max) {
      throw new Error(
        max === Number.MAX_SAFE_INTEGER
          ? `${name} must be a whole number${min > 0 ? ` of at least ${min}` : ''}`
          : `${name} must be a whole number from ${min} to ${max}`,
      );
    }
    return value;
  };
  const oneOf = <T extends string>(name: string, values: readonly T[], fallback: T): T => {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') return fallback;
    if ((values as readonly string[]).includes(raw)) return raw as T;
    throw new Error(`${name} must be ${values.join(' or ')}`);
  };
  const flag = (name: string, fallback: boolean) => {
    const raw = env[name]?.trim();
    if (raw === undefined || raw === '') return fallback;
    if (raw === 'true' || raw === 'false') return raw === 'true';
    throw new Error(`${name} must be true or false`);
  };
  return Object.freeze({
    host: env.HOST?.trim() || '127.0.0.1',
    port: whole('PORT', 3000, 0, 65_535),
    scheduleSeconds: whole('BROKER_LOCAL_SCHEDULE_SECONDS', 60, 0),
    // The environments' timeout: an invocation needs at least 1 ms.
    timeoutMs: whole('BROKER_LOCAL_TIMEOUT_MS', 10_000, 1),
    expiresIn: whole('BROKER_LOCAL_EXPIRES_IN', 86_400, 0),
    secretsFile: env.BROKER_LOCAL_SECRETS_FILE || undefined,
    maxEnvironments: whole('BROKER_LOCAL_MAX_ENVIRONMENTS', 4, 1),
    idleShutdownSeconds: whole('BROKER_LOCAL_IDLE_SHUTDOWN_SECONDS', 300, 1),
    freeze: flag('BROKER_LOCAL_FREEZE', true),
    compute: oneOf('BROKER_LOCAL_COMPUTE', ['lambda', 'managed-instances'] as const, 'lambda'),
    cpuShare: onOff(CPU_SHARE_VARIABLE, cpuShare),
  });
};

const onOff = (name: string, raw: string | undefined): boolean => {
  const value = raw?.trim().toLowerCase() ?? '';
  if (value === '' || value === 'on') return true;
  if (value === 'off') return false;
  throw new Error(`${name} must be on or off`);
};

/** Single variables the function gets besides the prefixed ones below. */
const PASSED = new Set([
  // The AWS SDK's shared files (~/.aws/config, ~/.aws/credentials): "your usual credentials".
  'HOME',
  // Node's own settings a function may set in Lambda too.
  'NODE_OPTIONS',
  'NODE_EXTRA_CA_CERTS',
  'NODE_USE_ENV_PROXY',
  'HTTP_PROXY',
  'HTTPS_PROXY',
  'NO_PROXY',
  'http_proxy',
  'https_proxy',
  'no_proxy',
]);

/**
 * The function's environment, as Lambda would hold it: the broker's variables (`BROKER_*` but
 * the local runtime's own `BROKER_LOCAL_*`), Powertools' (`POWERTOOLS_*`), the AWS SDK's
 * (`AWS_*`: region, credentials, profile, `AWS_ENDPOINT_URL_<SERVICE>`), and the few single
 * variables in {@link PASSED}. Nothing else of this process's environment reaches it; what
 * Lambda itself sets (`AWS_LAMBDA_*`, `AWS_EXECUTION_ENV`, …) the execution environment adds.
 */
export const functionEnvironment = (env: Env): Record<string, string> => {
  const passed: Record<string, string> = {};
  for (const [name, value] of Object.entries(env)) {
    if (value === undefined) continue;
    const broker = name.startsWith('BROKER_') && !name.startsWith('BROKER_LOCAL_');
    if (broker || /^(POWERTOOLS_|AWS_)/.test(name) || PASSED.has(name)) passed[name] = value;
  }
  return passed;
};
