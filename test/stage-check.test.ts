/**
 * What `npm run validate -- --stage <stage>` refuses before packaging, on the resolved
 * configuration `serverless print` gives: an unknown stage, connections the broker's cold start
 * would refuse, and secrets the function may not read. The real serverless.yml is checked by
 * CI's `npm run validate` for each example stage.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  checkStage,
  type PrintedConfig,
  secretCovered,
  stagePlaceholders,
} from '../infra/stage-check.js';
import {
  STAGE_PARAMETERS,
  VARIABLE_PARAMETERS,
  withParameterNames,
} from '../lib/config/stage-params.js';

const root = join(import.meta.dirname, '..');

// A production account and Open API host of their own: outside dev, serverless.yml's
// placeholders (accounts, example.com, sample IDs) are refused.
const ARN = 'arn:aws:secretsmanager:eu-west-1:210987654321:secret:token-broker/production-GhIjKl';

const printed = (connections: string, secretArns: unknown[] = [ARN]): PrintedConfig => ({
  params: { default: {}, dev: {}, prod: {} },
  functions: {
    broker: { events: [{ schedule: { rate: ['rate(5 minutes)'] } }] },
  },
  provider: {
    timeout: 10,
    environment: {
      // As `serverless print` shows it: CloudFormation resolves these at deploy time.
      BROKER_TABLE_NAME: { Ref: 'TokenTable' },
      BROKER_KMS_KEY_ID: { 'Fn::GetAtt': ['TokenKey', 'Arn'] },
      BROKER_CONNECTIONS: connections,
      BROKER_REFRESH_WINDOW_SECONDS: '600',
    } as Record<string, unknown>,
    iam: {
      role: { statements: [{ Sid: 'ConnectionSecrets', Resource: secretArns }] },
    },
  },
});

const production = (secretId: string) =>
  JSON.stringify({
    production: { variant: 'v3', baseUrl: 'https://open-api.partner.test', secretId },
  });

describe('Function: checkStage', () => {
  it('passes a declared stage whose connections are valid and whose secrets are readable', () => {
    expect(checkStage('prod', printed(production(ARN)))).toEqual([]);
  });

  it('refuses a stage serverless.yml does not declare, naming the ones it does', () => {
    expect(checkStage('qa', printed(production(ARN)))).toEqual([
      "Unknown stage 'qa': serverless.yml declares 'dev', 'prod'. Add params.qa with this stage's connections and secret ARNs; the defaults are examples (account 123456789012).",
    ]);
  });

  it('refuses connections the broker would refuse at cold start, with its own message', () => {
    expect(checkStage('prod', printed('{"production": {'))).toEqual([
      "Stage 'prod': BROKER_CONNECTIONS is not valid JSON at line 1, column 17 (offset 16): expected a property name in double quotes, but the text ends (serverless.yml sets BROKER_CONNECTIONS from params.prod.connections)",
    ]);
    expect(
      checkStage(
        'prod',
        printed(
          JSON.stringify({
            production: { variant: 'v3', baseUrl: 'https://a.partner.test', secretID: ARN },
          }),
        ),
      )[0],
    ).toContain('field "secretID": unknown field (did you mean "secretId"?)');
  });

  it('refuses a connection whose secret the function may not read', () => {
    expect(checkStage('prod', printed(production('token-broker/partner')))).toEqual([
      `Stage 'prod': connection "production" reads secret 'token-broker/partner', which params.prod.secretArns does not list: the function could not read it. Add its full ARN (with the 6-character suffix).`,
    ]);
  });
});

describe('Function: checkStage, settings checked together (issue 24)', () => {
  const withEnv = (extra: Record<string, string>, base = printed(production(ARN))) => ({
    ...base,
    provider: { ...base.provider, environment: { ...base.provider?.environment, ...extra } },
  });
  const withRate = (rate: string | string[], base = printed(production(ARN))): PrintedConfig => ({
    ...base,
    functions: { broker: { events: [{ schedule: { rate } }] } },
  });

  it('refuses a warm-up rate not shorter than the refresh window', () => {
    expect(checkStage('prod', withRate(['rate(15 minutes)']))).toEqual([
      "Stage 'prod': warmupRate 'rate(15 minutes)' (every 900 s) must be shorter than BROKER_REFRESH_WINDOW_SECONDS (600): a token could pass its whole window between two warm-ups",
    ]);
    expect(checkStage('prod', withRate('rate(10 minutes)'))[0]).toContain('(every 600 s)');
    expect(checkStage('prod', withRate('rate(1 hour)'))[0]).toContain('(every 3600 s)');
    expect(checkStage('prod', withRate('rate(9 minutes)'))).toEqual([]);
    expect(checkStage('prod', withRate('cron(0/5 * * * ? *)'))[0]).toContain(
      'is a cron expression, whose period cannot be checked',
    );
  });

  it('checks the shorthand schedule too: `schedule: rate(...)` (review of issue 24)', () => {
    const base = printed(production(ARN));
    const shorthand = {
      ...base,
      functions: { broker: { events: [{ schedule: 'rate(15 minutes)' }] } },
    } as PrintedConfig;
    expect(checkStage('prod', shorthand)[0]).toContain('(every 900 s)');
  });

  it('refuses the example account only as an account, not as digits inside another number (review of issue 24)', () => {
    const withDigits = {
      ...printed(production(ARN)),
      resources: { Outputs: { Note: { Value: 'build 91234567890123' } } },
    } as PrintedConfig;
    expect(checkStage('prod', withDigits)).toEqual([]);
  });

  it('refuses a re-check whose countdown and POST cannot fit the function timeout', () => {
    expect(checkStage('prod', withEnv({ BROKER_MEMORY_RECHECK_SECONDS: '10' }))).toEqual([
      "Stage 'prod': BROKER_MEMORY_RECHECK_SECONDS (10) needs a function timeout of at least 14 s for a refresh's countdown and POST, but the function's timeout (serverless.yml `timeout`) gives 10.0 s: lower the re-check or raise the timeout",
    ]);
    expect(checkStage('prod', withEnv({ BROKER_MEMORY_RECHECK_SECONDS: '7' }))).toEqual([]);
  });

  it('refuses the example account outside dev, and lets dev keep it', () => {
    const example = ARN.replace('210987654321', '123456789012');
    const withExample = {
      ...printed(production(example), [example]),
      params: { default: {}, dev: {}, prod: {}, qa: {} },
    };
    expect(checkStage('prod', withExample)).toEqual([
      "Stage 'prod': the configuration names the example account 123456789012 (serverless.yml's defaults): replace the account in params.prod (secretArns, connections, secretsKmsKeyArn) with your own; only dev may keep it",
    ]);
    expect(checkStage('qa', withExample)).toHaveLength(1);
    expect(checkStage('dev', withExample)).toEqual([]);
  });

  it('refuses a misspelt variable and a window at or below the default minValidity, as the cold start does', () => {
    expect(checkStage('prod', withEnv({ BROKER_REFRESH_WINDOW: '300' }))[0]).toContain(
      'did you mean BROKER_REFRESH_WINDOW_SECONDS?',
    );
    expect(checkStage('prod', withEnv({ BROKER_REFRESH_WINDOW_SECONDS: '60' }))[0]).toContain(
      'must be longer than BROKER_DEFAULT_MIN_VALIDITY_SECONDS (60)',
    );
  });
});

describe('Function: checkStage, with connections in an SSM parameter', () => {
  const withParameter = (connections: string): PrintedConfig => {
    const base = printed(connections);
    return {
      ...base,
      provider: {
        ...base.provider,
        environment: {
          ...base.provider?.environment,
          BROKER_CONNECTIONS_PARAMETER: '/token-broker/prod/connections',
        },
      },
    };
  };

  it('leaves them to the cold start, and refuses both ways at once', () => {
    expect(checkStage('prod', withParameter(''))).toEqual([]);
    expect(checkStage('prod', withParameter(production(ARN)))).toEqual([
      "Stage 'prod': both connections and connectionsParameter are set; set connections: '' when the connections come from the SSM parameter.",
    ]);
  });
});

describe('Function: checkStage, the issuance-rate alarm against the connections', () => {
  // n connections, each with its own secret, all readable.
  const connections = (n: number) =>
    Object.fromEntries(
      Array.from({ length: n }, (_, i) => [
        `c${i}`,
        { variant: 'v3', baseUrl: 'https://open-api.partner.test', secretId: `${ARN}-${i}` },
      ]),
    );
  const stage = (n: number, threshold: unknown): PrintedConfig => {
    const base = printed(
      JSON.stringify(connections(n)),
      Array.from({ length: n }, (_, i) => `${ARN}-${i}`),
    );
    return {
      ...base,
      params: {
        ...base.params,
        default: { issuancesPerHourThreshold: 12 },
        prod: { issuancesPerHourThreshold: threshold },
      },
    };
  };

  it('passes a threshold of two issuances an hour per connection or more', () => {
    expect(checkStage('prod', stage(6, 12))).toEqual([]);
    expect(checkStage('prod', stage(13, '26'))).toEqual([]);
  });

  it('refuses a threshold the connections reach in ordinary operation: the alarm would stay in ALARM and every release roll back', () => {
    const [problem, ...more] = checkStage('prod', stage(7, 12));
    expect(more).toEqual([]);
    expect(problem).toContain(
      "Stage 'prod': params.prod.issuancesPerHourThreshold 12 is below 14, 2 per connection for its 7 connections",
    );
    expect(problem).toContain('Raise it to at least 14');
    expect(checkStage('prod', stage(1, 'twelve'))).toEqual([
      "Stage 'prod': params.prod.issuancesPerHourThreshold 'twelve' must be a whole number of issuances per hour",
    ]);
  });
});

describe('Function: secretCovered', () => {
  it('matches a full ARN, a name and a partial ARN against the listed ARNs', () => {
    expect(secretCovered(ARN, [ARN])).toBe(true);
    expect(secretCovered('token-broker/production', [ARN])).toBe(true);
    expect(
      secretCovered(
        'arn:aws:secretsmanager:eu-west-1:210987654321:secret:token-broker/production',
        [ARN],
      ),
    ).toBe(true);
  });

  it('honours IAM wildcards, and refuses another account, region or name', () => {
    const all = 'arn:aws:secretsmanager:eu-west-1:210987654321:secret:token-broker/*';
    expect(secretCovered('token-broker/anything', [all])).toBe(true);
    expect(secretCovered(ARN, [all])).toBe(true);
    expect(secretCovered(ARN.replace('210987654321', '999999999999'), [all])).toBe(false);
    expect(secretCovered(ARN.replace('eu-west-1', 'us-east-1'), [ARN])).toBe(false);
    expect(secretCovered('token-broker/productio', [ARN])).toBe(false);
    expect(secretCovered('other/production', [all])).toBe(false);
    expect(secretCovered('anything', ['*'])).toBe(true);
  });
});

describe('Function: checkStage, a stage on a global table (issue 26)', () => {
  const NAMED = JSON.stringify({
    production: {
      variant: 'v3',
      baseUrl: 'https://open-api.partner.test',
      secretId: 'token-broker/production',
    },
  });
  const globalStage = (
    settings: Record<string, unknown> = {},
    region = 'eu-west-2',
    connections = NAMED,
  ): PrintedConfig => {
    const base = printed(connections, [ARN.replace('eu-west-1', region)]);
    return {
      ...base,
      params: {
        default: { table: 'regional', globalTableName: '', globalKeyId: '', regions: [] },
        dev: {},
        prod: {
          table: 'global',
          globalTableName: 'token-broker-prod-tokens',
          globalKeyId: 'mrk-1234abcd12ab34cd56ef1234567890ab',
          regions: ['eu-west-1', 'eu-west-2', 'eu-west-3'],
          ...settings,
        },
      },
      provider: { ...base.provider, region },
    };
  };

  it('passes a region of the stage, on a named table and a multi-Region key, with named secrets', () => {
    for (const region of ['eu-west-1', 'eu-west-2', 'eu-west-3']) {
      expect(checkStage('prod', globalStage({}, region))).toEqual([]);
    }
    // Two regions: the third is the table's witness, where no broker runs.
    expect(checkStage('prod', globalStage({ regions: ['eu-west-1', 'eu-west-2'] }))).toEqual([]);
  });

  it('refuses a region the stage does not list: no replica of the table is there', () => {
    expect(checkStage('prod', globalStage({}, 'eu-central-1'))).toEqual([
      "Stage 'prod': region 'eu-central-1' is not among params.prod.regions (eu-west-1, eu-west-2, eu-west-3): the global table has no replica there. Deploy with --region <one of them>, or add the region (a global table's replicas are fixed when it is created).",
    ]);
  });

  it('refuses regions outside one MRSC region set, and a number other than two or three', () => {
    expect(
      checkStage('prod', globalStage({ regions: ['eu-west-1', 'eu-west-2', 'us-east-1'] })),
    ).toEqual([
      "Stage 'prod': params.prod.regions (eu-west-1, eu-west-2, us-east-1) must lie in one multi-Region strong consistency region set: US (us-east-1, us-east-2, us-west-2), EU (eu-west-1, eu-west-2, eu-west-3, eu-central-1) or AP (ap-northeast-1, ap-northeast-2, ap-northeast-3)",
    ]);
    expect(checkStage('prod', globalStage({ regions: ['eu-west-2'] }))[0]).toContain(
      'must list two regions (a third is the witness) or three',
    );
    expect(
      checkStage(
        'prod',
        globalStage({ regions: ['eu-west-1', 'eu-west-2', 'eu-west-3', 'eu-central-1'] }),
      )[0],
    ).toContain('must list two regions (a third is the witness) or three');
  });

  it('refuses a missing table name and a key that is not multi-Region', () => {
    expect(checkStage('prod', globalStage({ globalTableName: '' }))).toEqual([
      "Stage 'prod': params.prod.globalTableName is empty: name the global table (infra/global-table.yml, its TableName)",
    ]);
    expect(
      checkStage('prod', globalStage({ globalKeyId: '1234abcd-12ab-34cd-56ef-1234567890ab' })),
    ).toEqual([
      "Stage 'prod': params.prod.globalKeyId '1234abcd-12ab-34cd-56ef-1234567890ab' is not a multi-Region key ID (mrk- and 32 hex digits, output KeyId of infra/global-key.yml): a single-region key has no copy in the other regions",
    ]);
  });

  // Issue 38: serverless print resolves an empty globalTableName into BROKER_TABLE_NAME: '',
  // and the cold start's "BROKER_TABLE_NAME is required" did not say which parameter sets it.
  it('names the stage parameter behind a variable the cold start refuses', () => {
    const printedEmpty = globalStage({ globalTableName: '' });
    const empty = {
      ...printedEmpty,
      provider: {
        ...printedEmpty.provider,
        environment: { ...printedEmpty.provider?.environment, BROKER_TABLE_NAME: '' },
      },
    };
    expect(checkStage('prod', empty)).toEqual([
      "Stage 'prod': BROKER_TABLE_NAME is required (serverless.yml sets BROKER_TABLE_NAME from params.prod.globalTableName)",
    ]);
    // A regional stage's table is its own stack's: no parameter to name.
    expect(withParameterNames('BROKER_TABLE_NAME is required', 'prod', 'regional')).toBe(
      'BROKER_TABLE_NAME is required',
    );
    expect(
      checkStage('prod', {
        ...printed(production(ARN)),
        provider: {
          ...printed(production(ARN)).provider,
          environment: {
            ...printed(production(ARN)).provider?.environment,
            BROKER_REFRESH_WINDOW_SECONDS: '60',
          },
        },
      }),
    ).toEqual([
      "Stage 'prod': BROKER_REFRESH_WINDOW_SECONDS (60) must be longer than BROKER_DEFAULT_MIN_VALIDITY_SECONDS (60): otherwise every routine refresh is a caller's forced replacement (serverless.yml sets BROKER_REFRESH_WINDOW_SECONDS from params.prod.refreshWindowSeconds)",
    ]);
  });

  it('knows which parameter sets each variable serverless.yml sets from one', () => {
    const yml = readFileSync(join(root, 'serverless.yml'), 'utf8');
    const environment = /\n {2}environment:\n((?: {4}.*\n)*)/.exec(yml)?.[1] ?? '';
    const fromParameters = Object.fromEntries(
      [...environment.matchAll(/^ {4}([A-Z_]+): \$\{param:([A-Za-z]+)\}$/gm)].map((m) => [
        m[1],
        m[2],
      ]),
    );
    expect(fromParameters).toEqual(VARIABLE_PARAMETERS);
    expect(yml).toMatch(/tableName: \$\{param:globalTableName\}/);
    expect(yml).toMatch(/key\/\$\{param:globalKeyId\}/);
  });

  it('refuses a table mode it does not know', () => {
    expect(checkStage('prod', globalStage({ table: 'Global' }))).toEqual([
      "Stage 'prod': params.prod.table 'Global' must be 'regional' or 'global'",
    ]);
  });

  it('refuses a secret given by the ARN of another region: this region would depend on that one', () => {
    const elsewhere = JSON.stringify({
      production: { variant: 'v3', baseUrl: 'https://open-api.partner.test', secretId: ARN },
    });
    expect(checkStage('prod', globalStage({}, 'eu-west-2', elsewhere))).toContain(
      `Stage 'prod': connection "production" reads secret '${ARN}' in eu-west-1 from eu-west-2: an outage there would stop this region too. Give the secret's name (token-broker/production), so that each region reads its own replica (docs/multi-region.md)`,
    );
    // A name, or this region's own ARN, is its local replica.
    const local = elsewhere.replace('eu-west-1', 'eu-west-2');
    expect(checkStage('prod', globalStage({}, 'eu-west-2', local))).toEqual([]);
  });

  it('leaves a regional stage as it was: no region rules', () => {
    const regional = {
      ...globalStage({ table: 'regional', regions: [] }, 'us-east-1'),
    };
    expect(checkStage('prod', regional)).toEqual([]);
  });
});

describe('Function: checkStage, rollout and concurrency (issue 25)', () => {
  const withParams = (own: Record<string, unknown>, stage = 'prod'): PrintedConfig => {
    const base = printed(production(ARN));
    return {
      ...base,
      params: {
        ...base.params,
        default: { deploymentConfig: 'CodeDeployDefault.LambdaCanary10Percent10Minutes' },
        [stage]: own,
      },
    };
  };

  it('passes a canary or a linear rollout in any stage, and all at once in dev', () => {
    expect(checkStage('prod', withParams({}))).toEqual([]);
    expect(
      checkStage(
        'prod',
        withParams({ deploymentConfig: 'CodeDeployDefault.LambdaLinear10PercentEvery1Minute' }),
      ),
    ).toEqual([]);
    expect(
      checkStage(
        'dev',
        withParams({ deploymentConfig: 'CodeDeployDefault.LambdaAllAtOnce' }, 'dev'),
      ),
    ).toEqual([]);
  });

  it('refuses all at once outside dev: the alarms could not roll back a release every caller already has', () => {
    expect(
      checkStage('prod', withParams({ deploymentConfig: 'CodeDeployDefault.LambdaAllAtOnce' })),
    ).toEqual([
      "Stage 'prod': params.prod.deploymentConfig 'CodeDeployDefault.LambdaAllAtOnce' moves every caller to a release at once: outside dev, use a canary or linear configuration (CodeDeployDefault.LambdaCanary10Percent10Minutes, for example), so that the alarms can roll a bad release back while it serves a share of the calls (docs/operations.md, Rollout)",
    ]);
  });

  it('refuses a deployment configuration CodeDeploy does not define for Lambda', () => {
    expect(
      checkStage(
        'prod',
        withParams({ deploymentConfig: 'CodeDeployDefault.LambdaCanary10Percent5Minute' }),
      )[0],
    ).toContain(
      "params.prod.deploymentConfig 'CodeDeployDefault.LambdaCanary10Percent5Minute' is not one of CodeDeploy's Lambda configurations: CodeDeployDefault.LambdaAllAtOnce, ",
    );
  });

  it('passes concurrency as whole numbers, with the provisioned within the reserved', () => {
    expect(
      checkStage('prod', withParams({ reservedConcurrency: 20, provisionedConcurrency: 2 })),
    ).toEqual([]);
    // Either alone; and as `--param` gives them, as text.
    expect(checkStage('prod', withParams({ provisionedConcurrency: '1' }))).toEqual([]);
    expect(checkStage('prod', withParams({ reservedConcurrency: '2' }))).toEqual([]);
  });

  it('refuses concurrency that is not a whole number, a reserve below two, more provisioned than reserved', () => {
    expect(
      checkStage('prod', withParams({ reservedConcurrency: 2.5, provisionedConcurrency: 0 })),
    ).toEqual([
      "Stage 'prod': params.prod.reservedConcurrency '2.5' must be a whole number of environments (leave it out for none)",
      "Stage 'prod': params.prod.provisionedConcurrency '0' must be a whole number of environments, at least 1 (leave it out for none)",
    ]);
    expect(checkStage('prod', withParams({ reservedConcurrency: 1 }))).toEqual([
      "Stage 'prod': params.prod.reservedConcurrency 1 leaves no environment for the next caller while one finishes a refresh after its answer: reserve at least 2 (leave it out for none)",
    ]);
    expect(
      checkStage('prod', withParams({ reservedConcurrency: 4, provisionedConcurrency: 5 })),
    ).toEqual([
      "Stage 'prod': params.prod.provisionedConcurrency 5 exceeds reservedConcurrency 4: Lambda provisions no more environments than the function may run",
    ]);
  });
});

describe('Function: checkStage, compute: Lambda Managed Instances (issue 37)', () => {
  const VPC = {
    subnetIds: ['subnet-0aa', 'subnet-0bb', 'subnet-0cc'],
    securityGroupIds: ['sg-0aa'],
  };
  const withParams = (own: Record<string, unknown>): PrintedConfig => {
    const base = printed(production(ARN));
    return {
      ...base,
      params: { default: { compute: 'lambda', managedInstancesMaxVCpu: 16 }, dev: {}, prod: own },
    };
  };

  it('passes managed instances in the stage VPC, with a vCPU ceiling (as --param gives it, text too)', () => {
    expect(checkStage('prod', withParams({ compute: 'managed-instances', vpc: VPC }))).toEqual([]);
    expect(
      checkStage(
        'prod',
        withParams({ compute: 'managed-instances', vpc: VPC, managedInstancesMaxVCpu: '64' }),
      ),
    ).toEqual([]);
    // Lambda's own environments need no VPC, and ignore the ceiling.
    expect(checkStage('prod', withParams({ managedInstancesMaxVCpu: 0 }))).toEqual([]);
  });

  it('refuses a compute it does not know', () => {
    expect(checkStage('prod', withParams({ compute: 'managed_instances', vpc: VPC }))).toEqual([
      "Stage 'prod': params.prod.compute 'managed_instances' must be 'lambda' or 'managed-instances': Lambda's own execution environments, or Lambda Managed Instances",
    ]);
  });

  it('refuses managed instances without a VPC: the capacity provider has nowhere to launch them', () => {
    const [problem] = checkStage('prod', withParams({ compute: 'managed-instances' }));
    expect(problem).toContain(
      "params.prod.compute 'managed-instances' needs params.prod.vpc with subnetIds and securityGroupIds",
    );
    expect(
      checkStage(
        'prod',
        withParams({ compute: 'managed-instances', vpc: { subnetIds: [], securityGroupIds: [] } }),
      ),
    ).toHaveLength(1);
  });

  it('refuses reserved and provisioned concurrency there, and a vCPU ceiling outside the capacity provider bounds', () => {
    const problems = checkStage(
      'prod',
      withParams({
        compute: 'managed-instances',
        vpc: VPC,
        reservedConcurrency: 20,
        provisionedConcurrency: 2,
        managedInstancesMaxVCpu: 1,
      }),
    );
    expect(problems).toEqual([
      "Stage 'prod': params.prod.reservedConcurrency does not apply on Lambda Managed Instances (compute 'managed-instances'): their execution environments keep running, take many invocations each and scale with the capacity provider, up to params.prod.managedInstancesMaxVCpu vCPUs. Leave it out",
      "Stage 'prod': params.prod.provisionedConcurrency does not apply on Lambda Managed Instances (compute 'managed-instances'): their execution environments keep running, take many invocations each and scale with the capacity provider, up to params.prod.managedInstancesMaxVCpu vCPUs. Leave it out",
      "Stage 'prod': params.prod.managedInstancesMaxVCpu '1' must be a whole number of vCPUs from 2 to 15000 (the capacity provider's MaxVCpuCount)",
    ]);
  });
});

// Issue 38: `refreshWindowSecond: '300'` in params.prod passed validate, and the window stayed
// at its default.
describe('Function: checkStage, the stage parameters themselves', () => {
  const withParams = (own: Record<string, unknown>, defaults: Record<string, unknown> = {}) => ({
    ...printed(production(ARN)),
    params: { default: defaults, dev: {}, prod: own },
  });

  it('refuses a parameter nothing reads, with the one it most likely misspells', () => {
    expect(checkStage('prod', withParams({ refreshWindowSecond: '300' }))).toEqual([
      `Stage 'prod': params.prod.refreshWindowSecond is not a stage parameter (did you mean refreshWindowSeconds?): nothing reads it, so the setting it was meant for keeps its default (docs/operations.md, "Describe the stage")`,
    ]);
    expect(checkStage('prod', withParams({ WarmupRate: 'rate(1 minute)' }))[0]).toContain(
      '(did you mean warmupRate?)',
    );
    // In the defaults too, which every stage takes.
    expect(checkStage('prod', withParams({}, { logLevl: 'INFO' }))[0]).toContain(
      'params.default.logLevl is not a stage parameter (did you mean logLevel?)',
    );
    // Nothing near: the parameters are listed.
    const [far] = checkStage('prod', withParams({ colour: 'blue' }));
    expect(far).toContain(
      'params.prod.colour is not a stage parameter; the parameters are connections, connectionsParameter,',
    );
    // Another stage's block is that stage's business.
    expect(
      checkStage('prod', {
        ...withParams({}),
        params: { default: {}, dev: { nonsense: 1 }, prod: {} },
      }),
    ).toEqual([]);
  });

  it('knows every parameter serverless.yml and infra/ read, and each of the defaults', () => {
    const files = [
      'serverless.yml',
      ...readdirSync(join(root, 'infra'))
        .filter((f) => f.endsWith('.yml'))
        .map((f) => join('infra', f)),
    ];
    const read = new Set(
      files.flatMap((file) =>
        [...readFileSync(join(root, file), 'utf8').matchAll(/\$\{param:([A-Za-z0-9_]+)/g)].map(
          (match) => match[1] as string,
        ),
      ),
    );
    // `regions` is validate's own (the regions a global stage runs in).
    expect([...read, 'regions'].sort()).toEqual([...STAGE_PARAMETERS].sort());
    const yml = readFileSync(join(root, 'serverless.yml'), 'utf8');
    const defaults = /\n {2}default:\n((?: {4}.*\n| *#.*\n)*)/.exec(yml)?.[1] ?? '';
    const keys = [...defaults.matchAll(/^ {4}([A-Za-z]+):/gm)].map((match) => match[1]);
    expect(keys.length).toBeGreaterThan(20);
    expect(
      keys.filter((key) => !(STAGE_PARAMETERS as readonly string[]).includes(key as string)),
    ).toEqual([]);
  });
});

// Issue 38: the example prod stage (account 111122223333, example.com, sample subnets) validated
// and packaged cleanly, so a stage copied from it that kept a placeholder was never told.
describe('Function: checkStage, placeholders outside dev', () => {
  const SAMPLE =
    'arn:aws:secretsmanager:eu-west-1:111122223333:secret:token-broker/production-GhIjKl';
  const copied = (): PrintedConfig => {
    const base = printed(
      JSON.stringify({
        production: { variant: 'v3', baseUrl: 'https://open-api.example.com', secretId: SAMPLE },
        sandbox: {
          variant: 'v3',
          baseUrl: 'https://sandbox.open-api.example.com/',
          secretId: SAMPLE,
        },
      }),
      [SAMPLE],
    );
    return {
      ...base,
      provider: {
        ...base.provider,
        vpc: {
          subnetIds: ['subnet-0123456789abcdef0', 'subnet-0fedcba9876543210'],
          securityGroupIds: ['sg-0123456789abcdef0'],
        },
      } as PrintedConfig['provider'],
      resources: {
        Resources: {
          Grant: {
            Properties: {
              KeyId: 'arn:aws:kms:eu-west-1:210987654321:key/1234abcd-12ab-34cd-56ef-1234567890ab',
            },
          },
        },
      },
    };
  };

  it('refuses each kind of placeholder, naming the values found and where they are set', () => {
    const said = (what: string) =>
      `Stage 'prod': the configuration still names the example stages' ${what}; only dev may keep placeholders`;
    expect(checkStage('prod', copied())).toEqual([
      said(
        'account: 111122223333. Give your own in params.prod (secretArns, connections, callers, secretsKmsKeyArn)',
      ),
      said(
        "documentation domains (reserved: no Open API answers there): https://open-api.example.com, https://sandbox.open-api.example.com. Give your own in params.prod (connections, each one's baseUrl)",
      ),
      said(
        'subnet and security group IDs: sg-0123456789abcdef0, subnet-0123456789abcdef0, subnet-0fedcba9876543210. Give your own in params.prod (vpc: subnetIds, securityGroupIds)',
      ),
      said(
        'KMS key IDs: 1234abcd-12ab-34cd-56ef-1234567890ab. Give your own in params.prod (secretsKmsKeyArn, globalKeyId)',
      ),
    ]);
    // serverless.yml's own examples (CI): allowed on request, and then listed apart.
    expect(checkStage('prod', copied(), { allowPlaceholders: true })).toEqual([]);
    expect(stagePlaceholders('prod', copied())).toHaveLength(4);
  });

  it('lets dev keep them, and tells a placeholder from a value that only contains it', () => {
    expect(checkStage('dev', copied())).toEqual([]);
    // A host under a company's own domain, and the account's digits inside a longer number.
    const secretId = 'arn:aws:secretsmanager:eu-west-1:210987654321:secret:run-91111222233330';
    const own = printed(
      JSON.stringify({
        production: { variant: 'v3', baseUrl: 'https://open-api.example.company.com', secretId },
      }),
      [`${secretId}-AbCdEf`],
    );
    expect(checkStage('prod', own)).toEqual([]);
  });
});
