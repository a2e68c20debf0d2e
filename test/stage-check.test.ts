/**
 * What `npm run validate -- --stage <stage>` refuses before packaging, on the resolved
 * configuration `serverless print` gives: an unknown stage, connections the broker's cold start
 * would refuse, and secrets the function may not read. The real serverless.yml is checked by
 * CI's `npm run validate` for each example stage.
 */
import { describe, expect, it } from 'vitest';
import { checkStage, type PrintedConfig, secretCovered } from '../infra/stage-check.js';

// A production account of its own: outside dev, serverless.yml's example account is refused.
const ARN = 'arn:aws:secretsmanager:eu-west-1:111122223333:secret:token-broker/production-GhIjKl';

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
    production: { variant: 'v3', baseUrl: 'https://open-api.example.com', secretId },
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
      "Stage 'prod': BROKER_CONNECTIONS is not valid JSON",
    ]);
    expect(
      checkStage(
        'prod',
        printed(
          JSON.stringify({
            production: { variant: 'v3', baseUrl: 'https://a.example.com', secretID: ARN },
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
    const example = ARN.replace('111122223333', '123456789012');
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

describe('Function: secretCovered', () => {
  it('matches a full ARN, a name and a partial ARN against the listed ARNs', () => {
    expect(secretCovered(ARN, [ARN])).toBe(true);
    expect(secretCovered('token-broker/production', [ARN])).toBe(true);
    expect(
      secretCovered(
        'arn:aws:secretsmanager:eu-west-1:111122223333:secret:token-broker/production',
        [ARN],
      ),
    ).toBe(true);
  });

  it('honours IAM wildcards, and refuses another account, region or name', () => {
    const all = 'arn:aws:secretsmanager:eu-west-1:111122223333:secret:token-broker/*';
    expect(secretCovered('token-broker/anything', [all])).toBe(true);
    expect(secretCovered(ARN, [all])).toBe(true);
    expect(secretCovered(ARN.replace('111122223333', '999999999999'), [all])).toBe(false);
    expect(secretCovered(ARN.replace('eu-west-1', 'us-east-1'), [ARN])).toBe(false);
    expect(secretCovered('token-broker/productio', [ARN])).toBe(false);
    expect(secretCovered('other/production', [all])).toBe(false);
    expect(secretCovered('anything', ['*'])).toBe(true);
  });
});
