/**
 * What a stage's resolved Serverless configuration must be before it is packaged: a stage that
 * serverless.yml declares (an unknown one would silently take the example parameters), an
 * environment the broker's own cold start accepts (the same `loadConfig`: connections, known
 * variable names, the window against the default minValidity), every connection's secret among
 * the ARNs the function may read, and the checks only the stage can answer, from the same
 * module as the cold start's (lib/config/settings-check.ts): the function's timeout against the
 * re-check, the warm-up rate against the window, and the example account outside dev; and every
 * key of the stage's parameters one that something reads and, outside dev, no placeholder of the
 * example stages left (`stage-params.ts`). A stage on
 * a global table (`table: global`, docs/multi-region.md) is also checked against the region it
 * is resolved for. Its rollout (issue 25): a CodeDeploy configuration that exists, a canary or
 * linear one outside dev, and concurrency settings Lambda would accept. Where it runs (issue 37):
 * Lambda, or Lambda Managed Instances in the stage's VPC, without concurrency settings. Pure:
 * `validate-stage.ts` feeds it the output of `serverless print`.
 */
import {
  exampleAccountProblem,
  timeoutProblem,
  warmupRateProblem,
} from '../lib/config/settings-check.js';
import {
  placeholderProblems,
  unknownParameters,
  withParameterNames,
} from '../lib/config/stage-params.js';
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
    /** The region the stage is resolved for (`--region`, or serverless.yml's default). */
    readonly region?: string;
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

/**
 * The regions a table with multi-Region strong consistency may span: all of its replicas and
 * its witness lie in one set (AWS::DynamoDB::GlobalTable GlobalTableWitness). The same lists are
 * infra/global-table.yml's AllowedValues.
 */
export const MRSC_REGION_SETS: Readonly<Record<string, readonly string[]>> = {
  US: ['us-east-1', 'us-east-2', 'us-west-2'],
  EU: ['eu-west-1', 'eu-west-2', 'eu-west-3', 'eu-central-1'],
  AP: ['ap-northeast-1', 'ap-northeast-2', 'ap-northeast-3'],
};

/** A multi-Region KMS key's ID: the same in every region it is replicated to. */
const MULTI_REGION_KEY_ID = /^mrk-[0-9a-f]{32}$/;

/** A stage's setting: its own value, else the default's. */
const setting = (printed: PrintedConfig, stage: string, name: string): unknown => {
  const own = (printed.params?.[stage] as Record<string, unknown> | undefined)?.[name];
  return own !== undefined
    ? own
    : (printed.params?.default as Record<string, unknown> | undefined)?.[name];
};

/**
 * What a stage on a global table must be in the region it is resolved for: a table and a
 * multi-Region key named, two or three regions in one MRSC region set with this one among them
 * (a table's replicas are fixed when it is created: a broker elsewhere would find no table),
 * and each connection's secret read in this region (a name reads the local replica; another
 * region's ARN would tie this region to that one's availability).
 */
const globalTableProblems = (
  stage: string,
  printed: PrintedConfig,
  secretIds: readonly { readonly name: string; readonly secretId: string }[],
): string[] => {
  const at = `params.${stage}`;
  const name = setting(printed, stage, 'globalTableName');
  const keyId = String(setting(printed, stage, 'globalKeyId') ?? '');
  const regions = [setting(printed, stage, 'regions') ?? []].flat().map(String);
  const region = printed.provider?.region ?? '';
  const problems: string[] = [];
  if (typeof name !== 'string' || name.trim() === '') {
    problems.push(
      `${at}.globalTableName is empty: name the global table (infra/global-table.yml, its TableName)`,
    );
  }
  if (!MULTI_REGION_KEY_ID.test(keyId)) {
    problems.push(
      `${at}.globalKeyId '${keyId}' is not a multi-Region key ID (mrk- and 32 hex digits, output KeyId of infra/global-key.yml): a single-region key has no copy in the other regions`,
    );
  }
  if (regions.length < 2 || regions.length > 3) {
    problems.push(
      `${at}.regions (${regions.join(', ') || 'none'}) must list two regions (a third is the witness) or three: the regions the stage's brokers run in`,
    );
  } else if (
    !Object.values(MRSC_REGION_SETS).some((set) => regions.every((r) => set.includes(r)))
  ) {
    const sets = Object.entries(MRSC_REGION_SETS)
      .map(([label, set]) => `${label} (${set.join(', ')})`)
      .join(', ')
      .replace(/, (?=AP )/, ' or ');
    problems.push(
      `${at}.regions (${regions.join(', ')}) must lie in one multi-Region strong consistency region set: ${sets}`,
    );
  }
  if (regions.length > 0 && !regions.includes(region)) {
    problems.push(
      `region '${region}' is not among ${at}.regions (${regions.join(', ')}): the global table has no replica there. Deploy with --region <one of them>, or add the region (a global table's replicas are fixed when it is created).`,
    );
  }
  for (const { name: connection, secretId } of secretIds) {
    const secretRegion = secretId.startsWith('arn:') ? secretId.split(':')[3] : undefined;
    if (secretRegion !== undefined && secretRegion !== region) {
      const secretName = (secretPart(secretId) ?? secretId).replace(/-[A-Za-z0-9]{6}$/, '');
      problems.push(
        `connection "${connection}" reads secret '${secretId}' in ${secretRegion} from ${region}: an outage there would stop this region too. Give the secret's name (${secretName}), so that each region reads its own replica (docs/multi-region.md)`,
      );
    }
  }
  return problems;
};

/**
 * CodeDeploy's predefined configurations for Lambda (AWS::CodeDeploy::DeploymentGroup,
 * DeploymentConfigName): all at once, a canary (10 % for a while, then the rest), or linear
 * (10 % more every few minutes).
 */
export const LAMBDA_DEPLOYMENT_CONFIGS: readonly string[] = [
  'CodeDeployDefault.LambdaAllAtOnce',
  ...[5, 10, 15, 30].map((m) => `CodeDeployDefault.LambdaCanary10Percent${m}Minutes`),
  'CodeDeployDefault.LambdaLinear10PercentEvery1Minute',
  ...[2, 3, 10].map((m) => `CodeDeployDefault.LambdaLinear10PercentEvery${m}Minutes`),
];

/** A whole number given as a number or as text (`--param` gives text), else undefined. */
const wholeNumber = (value: unknown): number | undefined => {
  const n = typeof value === 'string' && /^\d+$/.test(value.trim()) ? Number(value) : value;
  return typeof n === 'number' && Number.isInteger(n) ? n : undefined;
};

/**
 * How a stage rolls a release out (issue 25, docs/operations.md "Rollout"): a configuration
 * CodeDeploy has, and outside dev one that shifts part of the traffic first, so that the
 * broker's alarms can stop a bad release while it serves a share of the calls. Its concurrency,
 * when set: whole numbers; a reserve of at least two (an environment that refreshes after its
 * answer is busy, and the next caller needs another); no more provisioned than reserved.
 */
const rolloutProblems = (stage: string, printed: PrintedConfig): string[] => {
  const at = `params.${stage}`;
  const problems: string[] = [];
  const config = setting(printed, stage, 'deploymentConfig');
  if (config !== undefined && !LAMBDA_DEPLOYMENT_CONFIGS.includes(String(config))) {
    problems.push(
      `${at}.deploymentConfig '${config}' is not one of CodeDeploy's Lambda configurations: ${LAMBDA_DEPLOYMENT_CONFIGS.join(', ')}`,
    );
  } else if (config === 'CodeDeployDefault.LambdaAllAtOnce' && stage !== 'dev') {
    problems.push(
      `${at}.deploymentConfig '${config}' moves every caller to a release at once: outside dev, use a canary or linear configuration (CodeDeployDefault.LambdaCanary10Percent10Minutes, for example), so that the alarms can roll a bad release back while it serves a share of the calls (docs/operations.md, Rollout)`,
    );
  }
  const reservedSetting = setting(printed, stage, 'reservedConcurrency');
  const provisionedSetting = setting(printed, stage, 'provisionedConcurrency');
  const reserved = wholeNumber(reservedSetting);
  const provisioned = wholeNumber(provisionedSetting);
  if (reservedSetting !== undefined && reservedSetting !== null) {
    if (reserved === undefined) {
      problems.push(
        `${at}.reservedConcurrency '${reservedSetting}' must be a whole number of environments (leave it out for none)`,
      );
    } else if (reserved < 2) {
      problems.push(
        `${at}.reservedConcurrency ${reserved} leaves no environment for the next caller while one finishes a refresh after its answer: reserve at least 2 (leave it out for none)`,
      );
    }
  }
  if (provisionedSetting !== undefined && provisionedSetting !== null) {
    if (provisioned === undefined || provisioned < 1) {
      problems.push(
        `${at}.provisionedConcurrency '${provisionedSetting}' must be a whole number of environments, at least 1 (leave it out for none)`,
      );
    } else if (reserved !== undefined && reserved >= 2 && provisioned > reserved) {
      problems.push(
        `${at}.provisionedConcurrency ${provisioned} exceeds reservedConcurrency ${reserved}: Lambda provisions no more environments than the function may run`,
      );
    }
  }
  return problems;
};

/** `compute`'s values (serverless.yml, infra/managed-instances.cjs). */
export const COMPUTE = ['lambda', 'managed-instances'] as const;

/** `AWS::Lambda::CapacityProvider`'s bounds on `MaxVCpuCount`. */
const MAX_VCPU = { min: 2, max: 15_000 } as const;

/**
 * Where the function runs (issue 37): `lambda`, or Lambda Managed Instances, whose capacity
 * provider (infra/managed-instances.cjs) launches its instances in the stage's VPC, which it must
 * therefore name. There the environments keep running (three at least, by default) and take
 * many invocations each: provisioned concurrency has no cold start to spare them, and a reserve
 * counted in environments means something else; both are refused rather than left to AWS.
 */
const computeProblems = (stage: string, printed: PrintedConfig): string[] => {
  const at = `params.${stage}`;
  const compute = String(setting(printed, stage, 'compute') ?? 'lambda');
  if (compute === 'lambda') return [];
  if (compute !== 'managed-instances') {
    return [
      `${at}.compute '${compute}' must be ${COMPUTE.map((c) => `'${c}'`).join(' or ')}: Lambda's own execution environments, or Lambda Managed Instances`,
    ];
  }
  const problems: string[] = [];
  const vpc = setting(printed, stage, 'vpc') as
    | { readonly subnetIds?: unknown; readonly securityGroupIds?: unknown }
    | null
    | undefined;
  const listed = (value: unknown) => [value ?? []].flat().filter((v) => typeof v === 'string');
  if (listed(vpc?.subnetIds).length === 0 || listed(vpc?.securityGroupIds).length === 0) {
    problems.push(
      `${at}.compute 'managed-instances' needs ${at}.vpc with subnetIds and securityGroupIds: the capacity provider launches its instances in those subnets (three by default, one per Availability Zone: give subnets in three zones), and they reach DynamoDB, KMS, Secrets Manager and the Open API from there`,
    );
  }
  for (const name of ['reservedConcurrency', 'provisionedConcurrency']) {
    const value = setting(printed, stage, name);
    if (value === undefined || value === null) continue;
    problems.push(
      `${at}.${name} does not apply on Lambda Managed Instances (compute 'managed-instances'): their execution environments keep running, take many invocations each and scale with the capacity provider, up to ${at}.managedInstancesMaxVCpu vCPUs. Leave it out`,
    );
  }
  const maxSetting = setting(printed, stage, 'managedInstancesMaxVCpu');
  const max = wholeNumber(maxSetting);
  if (max === undefined || max < MAX_VCPU.min || max > MAX_VCPU.max) {
    problems.push(
      `${at}.managedInstancesMaxVCpu '${maxSetting}' must be a whole number of vCPUs from ${MAX_VCPU.min} to ${MAX_VCPU.max} (the capacity provider's MaxVCpuCount)`,
    );
  }
  return problems;
};

/** Issuances per hour per connection the issuance-rate alarm's threshold must leave room for. */
export const ISSUANCES_PER_CONNECTION_HOUR = 2;

/**
 * The issuance-rate alarm sums every connection's issuances over an hour, and CodeDeploy rolls
 * a release back on it: a threshold a stage's connections reach in ordinary operation keeps the
 * alarm in ALARM, and no release of that stage can shift. A connection issues about once per
 * token lifetime; with tokens of an hour, a threshold under two per connection leaves no room
 * for one takeover or caller's replacement.
 */
const issuanceRateProblem = (
  stage: string,
  printed: PrintedConfig,
  connections: number,
): string | undefined => {
  const value = setting(printed, stage, 'issuancesPerHourThreshold');
  if (value === undefined) return undefined;
  const threshold = wholeNumber(value);
  if (threshold === undefined) {
    return `params.${stage}.issuancesPerHourThreshold '${value}' must be a whole number of issuances per hour`;
  }
  const least = ISSUANCES_PER_CONNECTION_HOUR * connections;
  if (threshold >= least) return undefined;
  return `params.${stage}.issuancesPerHourThreshold ${threshold} is below ${least}, ${ISSUANCES_PER_CONNECTION_HOUR} per connection for its ${connections} connections: each issues about once per token lifetime, so with tokens of an hour the issuance-rate alarm, which sums them all, would sit in or next to ALARM, and CodeDeploy, which watches it, would roll back every release. Raise it to at least ${least} (more for tokens shorter than an hour).`;
};

/** The connections that stand in for those of an SSM parameter (checked at cold start). */
const STAND_IN = JSON.stringify({
  ssm: { variant: 'v3', baseUrl: 'https://open-api.example.com', secretId: 'from-ssm' },
});

/** The configuration as packaged, without its `params` block (which holds every stage's). */
const resolvedOf = (printed: PrintedConfig) => ({
  provider: printed.provider,
  functions: printed.functions,
  resources: printed.resources,
});

/**
 * The placeholders of the example stages that `stage` still names, one line each (none in dev):
 * what `checkStage` refuses unless `allowPlaceholders`.
 */
export const stagePlaceholders = (stage: string, printed: PrintedConfig): string[] =>
  placeholderProblems(stage, resolvedOf(printed)).map((p) => `Stage '${stage}': ${p}`);

export interface CheckOptions {
  /**
   * Placeholders are not problems: for serverless.yml's own example stages (CI), which are
   * placeholders by nature. `npm run validate -- --allow-placeholders` lists them as notes.
   */
  readonly allowPlaceholders?: boolean;
}

/** The problems that stop `stage` from being packaged; none: it may be. */
export const checkStage = (
  stage: string,
  printed: PrintedConfig,
  { allowPlaceholders = false }: CheckOptions = {},
): string[] => {
  const declared = Object.keys(printed.params ?? {}).filter((name) => name !== 'default');
  if (!declared.includes(stage)) {
    return [
      `Unknown stage '${stage}': serverless.yml declares ${declared.map((s) => `'${s}'`).join(', ') || 'none'}. Add params.${stage} with this stage's connections and secret ARNs; the defaults are examples (account 123456789012).`,
    ];
  }
  // First, and with whatever else is wrong: a misspelt parameter leaves its setting at the
  // default, which the checks below then judge.
  // So are placeholders, whatever else is wrong: they are what a copied stage keeps.
  return [
    ...unknownParameters(stage, printed.params).map((p) => `Stage '${stage}': ${p}`),
    ...(allowPlaceholders ? [] : stagePlaceholders(stage, printed)),
    ...checkResolved(stage, printed),
  ];
};

/** The problems of a declared stage as serverless resolved it. */
const checkResolved = (stage: string, printed: PrintedConfig): string[] => {
  const table = setting(printed, stage, 'table') ?? 'regional';
  if (table !== 'regional' && table !== 'global') {
    return [`Stage '${stage}': params.${stage}.table '${table}' must be 'regional' or 'global'`];
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
    if (error instanceof ConfigError) {
      // The variable's stage parameter named: that is where the value is set.
      return [`Stage '${stage}': ${withParameterNames(error.message, stage, table)}`];
    }
    throw error;
  }
  const problems = [
    exampleAccountProblem(stage, resolvedOf(printed)),
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
  problems.push(...rolloutProblems(stage, printed).map((p) => `Stage '${stage}': ${p}`));
  problems.push(...computeProblems(stage, printed).map((p) => `Stage '${stage}': ${p}`));
  // Connections in SSM are not known here: their count is left to the operator (operations.md).
  const rate = issuanceRateProblem(stage, printed, fromParameter ? 0 : config.connections.size);
  if (rate) problems.push(`Stage '${stage}': ${rate}`);
  if (table === 'global') {
    const secretIds = fromParameter ? [] : [...config.connections.values()];
    problems.push(
      ...globalTableProblems(stage, printed, secretIds).map((p) => `Stage '${stage}': ${p}`),
    );
  }
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
