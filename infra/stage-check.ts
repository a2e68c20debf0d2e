/**
 * What a stage's resolved Serverless configuration must be before it is packaged: a stage that
 * serverless.yml declares (an unknown one would silently take the example parameters), an
 * environment the broker's own cold start accepts (the same `loadConfig`: connections, known
 * variable names, the window against the default minValidity), every connection's secret among
 * the ARNs the function may read, and the checks only the stage can answer, from the same
 * module as the cold start's (lib/config/settings-check.ts): the function's timeout against the
 * re-check, the warm-up rate against the window, and the example account outside dev. Pure:
 * `validate-stage.ts` feeds it the output of `serverless print`.
 */
import {
  exampleAccountProblem,
  timeoutProblem,
  warmupRateProblem,
} from '../lib/config/settings-check.js';
import { loadConfig } from '../lib/config.js';
import { ConfigError } from '../lib/errors.js';

/** The parts of `serverless print --format json` this reads. */
export interface PrintedConfig {
  readonly params?: Readonly<Record<string, unknown>>;
  readonly functions?: Readonly<
    Record<
      string,
      {
        readonly timeout?: number;
        // `schedule: rate(...)` in short, or `schedule: { rate: ... }`.
        readonly events?: readonly { readonly schedule?: string | { readonly rate?: unknown } }[];
      }
    >
  >;
  readonly resources?: unknown;
  readonly provider?: {
    /** Seconds; Serverless's default is 6. */
    readonly timeout?: number;
    readonly environment?: Readonly<Record<string, unknown>>;
    readonly iam?: {
      readonly role?: {
        readonly statements?: readonly { readonly Sid?: string; readonly Resource?: unknown }[];
      };
    };
  };
}

/**
 * Stand-ins for the values CloudFormation resolves at deploy time (`!Ref`, `!GetAtt`): the
 * cold start checks them then; here only their presence matters.
 */
const DEPLOY_TIME: Readonly<Record<string, string>> = {
  BROKER_TABLE_NAME: 'token-table',
  BROKER_KMS_KEY_ID: 'alias/resolved-at-deploy',
};

/** The environment the function gets, with deploy-time values stood in for. */
const environmentOf = (printed: PrintedConfig): Record<string, string> => {
  const env: Record<string, string> = {};
  for (const [name, value] of Object.entries(printed.provider?.environment ?? {})) {
    if (typeof value === 'string') env[name] = value;
    else if (DEPLOY_TIME[name] !== undefined) env[name] = DEPLOY_TIME[name];
  }
  return env;
};

/** An IAM resource pattern (`*`, `?`) as a whole-string test. */
const glob = (pattern: string) =>
  new RegExp(
    `^${pattern
      .replace(/[.+^${}()|[\]\\]/g, '\\$&')
      .replace(/\*/g, '.*')
      .replace(/\?/g, '.')}$`,
  );

/** The secret part of a Secrets Manager ARN (after `:secret:`), or undefined. */
const secretPart = (arn: string): string | undefined => arn.split(':secret:')[1];

/**
 * Whether `secretId` (a name, a partial ARN without the 6-character suffix, or a full ARN) is
 * among `resources`, the ARNs (or ARN patterns) the role may read. A name is matched against
 * each ARN's secret part with its suffix; a partial ARN likewise.
 */
export const secretCovered = (secretId: string, resources: readonly string[]): boolean =>
  resources.some((resource) => {
    if (resource === '*') return true;
    const pattern = secretPart(resource);
    if (pattern === undefined) return false;
    const wanted = secretId.startsWith('arn:') ? secretPart(secretId) : secretId;
    if (wanted === undefined) return false;
    if (
      secretId.startsWith('arn:') &&
      !glob(resource.split(':secret:')[0] ?? '').test(secretId.split(':secret:')[0] ?? '')
    ) {
      return false;
    }
    // A full ARN's name ends in -XXXXXX (six characters Secrets Manager adds); a name or a
    // partial ARN is given without them.
    return (
      glob(pattern).test(wanted) ||
      glob(pattern).test(`${wanted}-AbCdEf`) ||
      glob(pattern.replace(/-[A-Za-z0-9]{6}$/, '')).test(wanted)
    );
  });

/** The connections that stand in for those of an SSM parameter (checked at cold start). */
const STAND_IN = JSON.stringify({
  ssm: { variant: 'v3', baseUrl: 'https://open-api.example.com', secretId: 'from-ssm' },
});

/** The problems that stop `stage` from being packaged; none: it may be. */
export const checkStage = (stage: string, printed: PrintedConfig): string[] => {
  const declared = Object.keys(printed.params ?? {}).filter((name) => name !== 'default');
  if (!declared.includes(stage)) {
    return [
      `Unknown stage '${stage}': serverless.yml declares ${declared.map((s) => `'${s}'`).join(', ') || 'none'}. Add params.${stage} with this stage's connections and secret ARNs; the defaults are examples (account 123456789012).`,
    ];
  }
  const env = environmentOf(printed);
  const fromParameter = Boolean(env.BROKER_CONNECTIONS_PARAMETER?.trim());
  if (fromParameter && env.BROKER_CONNECTIONS?.trim()) {
    return [
      `Stage '${stage}': both connections and connectionsParameter are set; set connections: '' when the connections come from the SSM parameter.`,
    ];
  }
  let config: ReturnType<typeof loadConfig>;
  try {
    // Connections in SSM are checked by the cold start (and readiness after the deploy); the
    // other settings here, with a stand-in connection.
    config = loadConfig(fromParameter ? { ...env, BROKER_CONNECTIONS: STAND_IN } : env);
  } catch (error) {
    if (error instanceof ConfigError) return [`Stage '${stage}': ${error.message}`];
    throw error;
  }
  const problems = [
    exampleAccountProblem(stage, {
      provider: printed.provider,
      functions: printed.functions,
      resources: printed.resources,
    }),
    ...Object.values(printed.functions ?? {}).flatMap((fn) => [
      timeoutProblem(config, (fn.timeout ?? printed.provider?.timeout ?? 6) * 1000),
      ...(fn.events ?? [])
        .flatMap((event) =>
          typeof event.schedule === 'string'
            ? [event.schedule]
            : [event.schedule?.rate ?? []].flat(),
        )
        .map((rate) =>
          typeof rate === 'string'
            ? warmupRateProblem(rate, config.refreshWindowSeconds)
            : undefined,
        ),
    ]),
  ]
    .filter((problem) => problem !== undefined)
    .map((problem) => `Stage '${stage}': ${problem}`);
  if (fromParameter) return problems;
  const statement = printed.provider?.iam?.role?.statements?.find(
    (s) => s.Sid === 'ConnectionSecrets',
  );
  const resources = [statement?.Resource ?? []].flat().filter((r) => typeof r === 'string');
  for (const connection of config.connections.values()) {
    if (!secretCovered(connection.secretId, resources)) {
      problems.push(
        `Stage '${stage}': connection "${connection.name}" reads secret '${connection.secretId}', which params.${stage}.secretArns does not list: the function could not read it. Add its full ARN (with the 6-character suffix).`,
      );
    }
  }
  return problems;
};
