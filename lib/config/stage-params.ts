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
