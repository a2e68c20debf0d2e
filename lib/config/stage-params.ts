/**
 * A stage's parameters (serverless.yml's `params.<stage>`), as `npm run validate`
 * (infra/stage-check.ts) checks them before packaging: every key one that serverless.yml or
 * validate reads, no placeholder of the example stages outside dev, and messages about a
 * variable that name the parameter it is set from. Pure.
 */
import { printable } from '../errors.js';
import { nearest } from './field-typos.js';

/**
 * Every stage parameter something reads: serverless.yml and infra/*.yml (`${param:…}`), and
 * validate itself (`regions`, of a global stage). test/stage-check.test.ts holds the list to
 * the files. docs/operations.md ("Describe the stage") says what each one does.
 */
export const STAGE_PARAMETERS = [
  'connections',
  'connectionsParameter',
  'operatorCallers',
  'secretArns',
  'warmupRate',
  'refreshWindowSeconds',
  'logLevel',
  'logRetentionInDays',
  'deletionProtection',
  'alarmTopicArn',
  'refreshFailuresThreshold',
  'requestErrorsThreshold',
  'concurrencyAlarmThreshold',
  'issuancesPerHourThreshold',
  'secretsKmsKeyArn',
  'nodeOptions',
  'vpc',
  'table',
  'globalTableName',
  'globalKeyId',
  'regions',
  'deploymentConfig',
  'reservedConcurrency',
  'provisionedConcurrency',
  'compute',
  'managedInstancesMaxVCpu',
] as const;

/**
 * Each key of `params.<stage>` and `params.default` that nothing reads, one line each, with the
 * parameter it most likely misspells. Refused, not warned about: a misspelt parameter
 * (`refreshWindowSecond`) leaves the setting at its default, and says nothing.
 */
export const unknownParameters = (
  stage: string,
  params: Readonly<Record<string, unknown>> | undefined,
): string[] =>
  [...new Set([stage, 'default'])].flatMap((block) => {
    const values = params?.[block];
    if (typeof values !== 'object' || values === null || Array.isArray(values)) return [];
    return Object.keys(values)
      .filter((key) => !(STAGE_PARAMETERS as readonly string[]).includes(key))
      .map((key) => {
        const near = nearest(key, STAGE_PARAMETERS, 3);
        const which = near
          ? ` (did you mean ${near}?)`
          : `; the parameters are ${STAGE_PARAMETERS.join(', ')}`;
        return `params.${block}.${printable(key, 60)} is not a stage parameter${which}: nothing reads it, so the setting it was meant for keeps its default (docs/operations.md, "Describe the stage")`;
      });
  });

/**
 * The placeholders of serverless.yml's example stages (`prod`, `global`) and of AWS's
 * documentation, which a stage copied from them may keep by mistake: each kind with the
 * parameters it is given in. (The defaults' account, 123456789012, is `settings-check.ts`'s
 * `exampleAccountProblem`.)
 */
const PLACEHOLDERS: readonly {
  readonly what: string;
  readonly pattern: RegExp;
  readonly where: string;
}[] = [
  {
    what: 'account',
    pattern: /(?<!\d)111122223333(?!\d)/g,
    where: 'secretArns, connections, callers, secretsKmsKeyArn',
  },
  {
    what: 'documentation domains (reserved: no Open API answers there)',
    pattern: /https?:\/\/(?:[A-Za-z0-9-]+\.)*example(?:\.(?:com|net|org))?(?=[/:?#"'\s\\]|$)/g,
    where: "connections, each one's baseUrl",
  },
  {
    what: 'subnet and security group IDs',
    pattern: /\b(?:subnet-0123456789abcdef0|subnet-0fedcba9876543210|sg-0123456789abcdef0)\b/g,
    where: 'vpc: subnetIds, securityGroupIds',
  },
  {
    what: 'KMS key IDs',
    pattern: /\b(?:1234abcd-12ab-34cd-56ef-1234567890ab|mrk-1234abcd12ab34cd56ef1234567890ab)\b/g,
    where: 'secretsKmsKeyArn, globalKeyId',
  },
];

/**
 * Outside `dev`, each kind of placeholder the resolved configuration still names, with the
 * values found: a stage copied from the examples, or an example edited in place, that keeps
 * one would deploy against an account, a host or a network that is not its own. `resolved` is
 * the configuration as packaged, without its `params` block (which holds every stage's).
 */
export const placeholderProblems = (stage: string, resolved: unknown): string[] => {
  if (stage === 'dev') return [];
  const text = JSON.stringify(resolved ?? {});
  return PLACEHOLDERS.flatMap(({ what, pattern, where }) => {
    const found = [...new Set(text.match(pattern) ?? [])].sort();
    if (found.length === 0) return [];
    return [
      `the configuration still names the example stages' ${what}: ${found.join(', ')}. Give your own in params.${stage} (${where}); only dev may keep placeholders`,
    ];
  });
};

/**
 * The function's variables serverless.yml sets from a stage parameter (provider.environment;
 * a global stage's table and key come from its own parameters, a regional stage's from its
 * stack). test/stage-check.test.ts holds the map to serverless.yml.
 */
export const VARIABLE_PARAMETERS: Readonly<Record<string, string>> = {
  BROKER_CONNECTIONS: 'connections',
  BROKER_CONNECTIONS_PARAMETER: 'connectionsParameter',
  BROKER_REFRESH_WINDOW_SECONDS: 'refreshWindowSeconds',
  BROKER_OPERATOR_CALLERS: 'operatorCallers',
  POWERTOOLS_LOG_LEVEL: 'logLevel',
  NODE_OPTIONS: 'nodeOptions',
};
const GLOBAL_TABLE_PARAMETERS: Readonly<Record<string, string>> = {
  BROKER_TABLE_NAME: 'globalTableName',
  BROKER_KMS_KEY_ID: 'globalKeyId',
};

/**
 * `message` (the cold start's, about the function's variables) with the stage parameter each
 * variable it names is set from, after it: `BROKER_TABLE_NAME is required (serverless.yml sets
 * BROKER_TABLE_NAME from params.prod.globalTableName)`. Unchanged when it names none.
 */
export const withParameterNames = (
  message: string,
  stage: string,
  table: 'regional' | 'global',
): string => {
  const parameters: Readonly<Record<string, string>> = {
    ...VARIABLE_PARAMETERS,
    ...(table === 'global' ? GLOBAL_TABLE_PARAMETERS : {}),
  };
  const named = [...new Set(message.match(/\b[A-Z][A-Z0-9_]*[A-Z0-9]\b/g) ?? [])].filter((v) =>
    Object.hasOwn(parameters, v),
  );
  if (named.length === 0) return message;
  const sets = named.map((v) => `${v} from params.${stage}.${parameters[v]}`).join(', ');
  return `${message} (serverless.yml sets ${sets})`;
};
