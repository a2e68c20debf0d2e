/**
 * A stage's parameters (serverless.yml's `params.<stage>`), as `npm run validate`
 * (infra/stage-check.ts) checks them before packaging: every key one that serverless.yml or
 * validate reads. Pure.
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
