/**
 * The deployable template, as a reviewer would check it: `serverless package` (osls, offline, no
 * AWS credentials) for a dev and a prod stage, then the generated CloudFormation is read.
 */
import { execFile } from 'node:child_process';
import {
  cpSync,
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  rmSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { checkTemplate } from '../infra/iam-check.js';
import { checkStage, MRSC_REGION_SETS, type PrintedConfig } from '../infra/stage-check.js';
import { loadConfig } from '../lib/config.js';
import { root } from './support/build.js';

/**
 * The DynamoDB actions the broker's code sends: every `new <X>Command(` in lib/ and functions/
 * whose command comes from `@aws-sdk/client-dynamodb`. The role grants exactly these (least
 * privilege): a command added without its grant, or a grant left after its last use, fails.
 */
const dynamoDBActionsSent = (): string[] => {
  const actions = new Set<string>();
  for (const dir of ['lib', 'functions']) {
    for (const file of readdirSync(join(root, dir), { recursive: true, encoding: 'utf8' })) {
      if (!file.endsWith('.ts')) continue;
      const text = readFileSync(join(root, dir, file), 'utf8');
      const imported = /import\s*\{([^}]*)\}\s*from\s*'@aws-sdk\/client-dynamodb'/.exec(text)?.[1];
      if (!imported) continue;
      for (const [, command] of text.matchAll(/new (\w+)Command\(/g)) {
        if (imported.includes(`${command}Command`)) actions.add(`dynamodb:${command}`);
      }
    }
  }
  return [...actions].sort();
};

const run = promisify(execFile);
type Json = Record<string, unknown>;
type Template = {
  Resources: Record<
    string,
    {
      Type: string;
      // biome-ignore lint/suspicious/noExplicitAny: CloudFormation templates are untyped JSON.
      Properties: any;
      Condition?: string;
      DeletionPolicy?: string;
      DependsOn?: string | string[];
      // biome-ignore lint/suspicious/noExplicitAny: CloudFormation templates are untyped JSON.
      UpdatePolicy?: any;
    }
  >;
};

const dir = mkdtempSync(join(tmpdir(), 'token-broker-package-'));
const templates: Record<string, Template> = {};

const packageStage = async (
  stage: string,
  region?: string,
  { as = stage, params = [] }: { as?: string; params?: readonly string[] } = {},
) => {
  const out = join(dir, as);
  const env: Record<string, string> = {
    PATH: process.env.PATH ?? '',
    HOME: process.env.HOME ?? dir,
  };
  await run(
    join(root, 'node_modules/.bin/serverless'),
    [
      'package',
      '--stage',
      stage,
      ...(region ? ['--region', region] : []),
      ...params.map((param) => `--param=${param}`),
      '--package',
      out,
    ],
    {
      cwd: root,
      env, // no AWS credentials: packaging must work offline
    },
  );
  templates[as] = JSON.parse(
    readFileSync(join(out, 'cloudformation-template-update-stack.json'), 'utf8'),
  );
  return out;
};

/** The function's environment with CloudFormation references replaced by sample values. */
const resolvedEnv = (variables: Record<string, unknown>) => ({
  ...(variables as Record<string, string>),
  BROKER_TABLE_NAME: 'tokens',
  BROKER_KMS_KEY_ID: 'arn:aws:kms:eu-west-1:123456789012:key/0f0e0d0c-0b0a-0908-0706-050403020100',
});

const resourcesOfType = (template: Template, type: string) =>
  Object.entries(template.Resources).filter(([, r]) => r.Type === type);

/**
 * The template as text, with what changes at every package replaced: the artifact's
 * time-stamped S3 key and the code's hash (in the version's name and its CodeSha256).
 */
const normalized = (template: Template) =>
  JSON.stringify(template, null, 2)
    .replace(/BrokerLambdaVersion[A-Za-z0-9]+/g, 'BrokerLambdaVersion<code hash>')
    .replace(/"S3Key": "[^"]*"/g, '"S3Key": "<artifact key>"')
    .replace(/"CodeSha256": "[^"]*"/g, '"CodeSha256": "<code hash>"');

beforeAll(async () => {
  // The package ships the prebuilt bundle.
  if (!existsSync(join(root, 'dist/broker/index.mjs'))) {
    await run(process.execPath, ['scripts/build.mjs'], { cwd: root });
  }
  // One after the other: osls keeps working state in the service directory.
  await packageStage('dev');
  await packageStage('prod');
  // The example stage on a global table, as its second region's stack.
  await packageStage('global', 'eu-west-2');
  // The prod stage with both concurrency settings, as a stage that sets them would be.
  await packageStage('prod', undefined, {
    as: 'prod-concurrency',
    params: ['provisionedConcurrency=2', 'reservedConcurrency=20'],
  });
  // The prod stage on Lambda Managed Instances (issue 37), in its VPC.
  await packageStage('prod', undefined, {
    as: 'prod-managed-instances',
    params: ['compute=managed-instances'],
  });
}, 200_000);
afterAll(() => rmSync(dir, { recursive: true, force: true }));

describe.each(['dev', 'prod'])('Template: stage %s', (stage) => {
  const template = () => templates[stage] as Template;
  const fn = () => template().Resources.BrokerLambdaFunction?.Properties;

  // A single-region stage's template, whole: the switch to a global table (issue 26,
  // docs/multi-region.md) must leave it as it was. A deliberate change updates the file
  // (`npx vitest run test/infra.test.ts -u`) and shows in the diff.
  it('is the single-region template, unchanged (test/__snapshots__)', async () => {
    await expect(normalized(template())).toMatchFileSnapshot(
      `./__snapshots__/single-region-${stage}.template.json.snap`,
    );
  });

  it('has one function on nodejs24.x, arm64, explicit memory and timeout, running the bundle', () => {
    expect(resourcesOfType(template(), 'AWS::Lambda::Function')).toHaveLength(1);
    expect(fn()).toMatchObject({
      Runtime: 'nodejs24.x',
      Architectures: ['arm64'],
      Handler: 'dist/broker/index.handler',
      MemorySize: expect.any(Number),
      Timeout: expect.any(Number),
    });
    expect(fn().Timeout).toBeLessThanOrEqual(30);
  });

  it('ships only the bundle: its entry, the SSM reader it loads on demand, their source maps', () => {
    const zip = readFileSync(join(dir, stage, 'token-broker.zip'));
    expect(zip.includes(Buffer.from('dist/broker/index.mjs'))).toBe(true);
    expect(zip.includes(Buffer.from('dist/broker/index.mjs.map'))).toBe(true);
    expect(zip.includes(Buffer.from('dist/broker/ssm-connections.mjs'))).toBe(true);
    expect(zip.includes(Buffer.from('node_modules/'))).toBe(false);
    expect(zip.includes(Buffer.from('dist/local/'))).toBe(false);
    expect(zip.includes(Buffer.from('dist/client/'))).toBe(false);
    // Loading them costs cold-start time (npm run bench): on in dev, off in prod by default.
    expect(fn().Environment.Variables.NODE_OPTIONS).toBe(
      stage === 'dev' ? '--enable-source-maps' : '',
    );
  });

  it('lets the function read an SSM parameter of connections only when one is configured', () => {
    const env = fn().Environment.Variables as Record<string, unknown>;
    expect(env.BROKER_CONNECTIONS_PARAMETER).toBe('');
    const role = template().Resources.IamRoleLambdaExecution?.Properties;
    const statements = role.Policies.flatMap(
      (p: { PolicyDocument: { Statement: unknown[] } }) => p.PolicyDocument.Statement,
    ) as { Action: string[]; Resource: unknown }[];
    const ssm = statements.find((s) => s.Action.includes('ssm:GetParameter'));
    // No parameter configured: the ARN ends at "parameter", which names none.
    expect(JSON.stringify(ssm?.Resource)).toContain('":parameter"');
  });

  it('configures connections that pass the broker’s own config loader', () => {
    const env = fn().Environment.Variables as Record<string, unknown>;
    expect(env.BROKER_TABLE_NAME).toEqual({ Ref: 'TokenTable' });
    // Tokens are encrypted by the application with the table's own key.
    expect(env.BROKER_KMS_KEY_ID).toEqual({ 'Fn::GetAtt': ['TokenKey', 'Arn'] });
    const config = loadConfig(resolvedEnv(env));
    expect(config.connections.size).toBeGreaterThan(0);
  });

  it('keeps its logs for a set time', () => {
    const [[, group] = []] = resourcesOfType(template(), 'AWS::Logs::LogGroup');
    expect(group?.Properties.RetentionInDays).toBe(stage === 'prod' ? 90 : 30);
  });

  it('has the token table: key pk, TTL on ttl, on-demand, encrypted with its own KMS key', () => {
    const table = template().Resources.TokenTable?.Properties;
    expect(table.KeySchema).toEqual([{ AttributeName: 'pk', KeyType: 'HASH' }]);
    expect(table.AttributeDefinitions).toEqual([{ AttributeName: 'pk', AttributeType: 'S' }]);
    expect(table.TimeToLiveSpecification).toEqual({ AttributeName: 'ttl', Enabled: true });
    expect(table.BillingMode).toBe('PAY_PER_REQUEST');
    expect(table.SSESpecification).toEqual({
      SSEEnabled: true,
      SSEType: 'KMS',
      KMSMasterKeyId: { Ref: 'TokenKey' },
    });
    expect(template().Resources.TokenKey?.Properties.EnableKeyRotation).toBe(true);
    expect(table.DeletionProtectionEnabled).toBe(stage === 'prod');
  });

  it('grants least privilege: no wildcard action, no wildcard resource, only this table, these secrets, this key', () => {
    const role = template().Resources.IamRoleLambdaExecution?.Properties;
    const statements = role.Policies.flatMap(
      (p: Json) => (p.PolicyDocument as { Statement: Json[] }).Statement,
    );
    const list = (value: unknown) => (Array.isArray(value) ? value : [value]);
    for (const statement of statements) {
      for (const action of list(statement.Action)) expect(String(action)).not.toContain('*');
      for (const resource of list(statement.Resource)) expect(resource).not.toBe('*');
    }
    const bySid = (sid: string) => statements.find((s: Json) => s.Sid === sid);
    expect(bySid('TokenTable')).toMatchObject({
      Resource: { 'Fn::GetAtt': ['TokenTable', 'Arn'] },
    });
    // Exactly what the code sends (DeleteItem was granted and never sent).
    expect(dynamoDBActionsSent()).toEqual([
      'dynamodb:GetItem',
      'dynamodb:PutItem',
      'dynamodb:UpdateItem',
    ]);
    expect([...list(bySid('TokenTable')?.Action)].sort()).toEqual(dynamoDBActionsSent());
    const secretIds = [
      ...loadConfig(resolvedEnv(fn().Environment.Variables)).connections.values(),
    ].map((c) => c.secretId);
    expect(list(bySid('ConnectionSecrets')?.Resource).sort()).toEqual(secretIds.sort());
    expect(bySid('ConnectionSecrets')?.Action).toEqual(['secretsmanager:GetSecretValue']);
    expect(bySid('TableKey')?.Resource).toEqual({ 'Fn::GetAtt': ['TokenKey', 'Arn'] });
    // Only the logs statements osls writes carry a wildcard, and only for this function's log streams.
    const wildcards = statements
      .flatMap((s: Json) => list(s.Resource))
      .filter((r: unknown) => JSON.stringify(r).includes('*'));
    for (const resource of wildcards)
      expect(JSON.stringify(resource)).toContain(':log-group:/aws/lambda/token-broker-');
  });

  it('serves HTTP through a Function URL with AWS_IAM auth', () => {
    const [[, url] = []] = resourcesOfType(template(), 'AWS::Lambda::Url');
    expect(url?.Properties.AuthType).toBe('AWS_IAM');
  });

  it('runs the warm-up more often than the refresh window', () => {
    const [[, rule] = []] = resourcesOfType(template(), 'AWS::Events::Rule');
    const match = /^rate\((\d+) (minute|minutes|hour|hours)\)$/.exec(
      rule?.Properties.ScheduleExpression,
    );
    expect(match).not.toBeNull();
    const seconds = Number(match?.[1]) * (match?.[2]?.startsWith('hour') ? 3600 : 60);
    const window = Number(fn().Environment.Variables.BROKER_REFRESH_WINDOW_SECONDS);
    expect(seconds).toBeLessThan(window);
    expect(rule?.Properties.Targets[0].Input).toBeUndefined();
  });

  it('alarms on failures, throttling, concurrency, a stopped schedule, the issuance rate and another issuer, to an SNS topic', () => {
    const alarms = Object.fromEntries(
      resourcesOfType(template(), 'AWS::CloudWatch::Alarm').map(([, a]) => [
        a.Properties.MetricName ?? 'DynamoDBThrottles',
        a.Properties,
      ]),
    );
    expect(Object.keys(alarms).sort()).toEqual([
      'AnotherIssuerSuspected',
      'ConcurrentExecutions',
      'DynamoDBThrottles',
      'Errors',
      'IssuanceRefused',
      'RefreshFailures',
      'RequestErrors',
      'Throttles',
      'UpstreamIssuances',
      'WarmUpRuns',
    ]);
    // A schedule that stopped sends nothing: missing data is the alarm.
    expect(alarms.WarmUpRuns).toMatchObject({
      Namespace: 'TokenBroker',
      ComparisonOperator: 'LessThanThreshold',
      Threshold: 1,
      TreatMissingData: 'breaching',
    });
    expect(alarms.UpstreamIssuances).toMatchObject({ Period: 3600, Threshold: 12 });
    expect(alarms.ConcurrentExecutions).toMatchObject({ Namespace: 'AWS/Lambda', Threshold: 100 });
    expect(alarms.Throttles).toMatchObject({ Namespace: 'AWS/Lambda' });
    // Errors does not count throttled invocations: its description must not claim it does.
    expect(alarms.Errors.AlarmDescription).not.toMatch(/throttl.* of direct invokes/);
    expect(JSON.stringify(alarms.DynamoDBThrottles.Metrics)).toContain('ReadThrottleEvents');
    expect(JSON.stringify(alarms.DynamoDBThrottles.Metrics)).toContain('WriteThrottleEvents');
    // A throttle metric has points only in periods with throttles: a period of read throttles
    // alone (the hot key) must still sum to them, not to no point at all.
    const [sum] = alarms.DynamoDBThrottles.Metrics.filter((m: Json) => m.ReturnData);
    expect(sum.Expression).toBe('FILL(reads, 0) + FILL(writes, 0)');
    expect(alarms.AnotherIssuerSuspected.AlarmDescription).toContain('One client ID, one broker');
    expect(alarms.RefreshFailures).toMatchObject({
      Namespace: 'TokenBroker',
      Dimensions: [{ Name: 'service', Value: 'token-broker' }],
    });
    expect(alarms.Errors).toMatchObject({ Namespace: 'AWS/Lambda' });
    for (const alarm of Object.values(alarms) as { AlarmActions: unknown[] }[]) {
      expect(alarm.AlarmActions).toHaveLength(1);
    }
    expect(template().Resources.AlarmTopic?.Type).toBe('AWS::SNS::Topic');
  });

  it('has a dashboard of the broker’s own metrics, the issuance causes among them', () => {
    const [[, dashboard] = []] = resourcesOfType(template(), 'AWS::CloudWatch::Dashboard');
    expect(dashboard?.Properties.DashboardName).toBe(`token-broker-${stage}`);
    const [body, values] = dashboard?.Properties.DashboardBody['Fn::Sub'] as [string, Json];
    const widgets = JSON.parse(body.replace(/\$\{[\w:]+\}/g, 'x')).widgets as {
      properties: { metrics: string[][] };
    }[];
    const names = new Set(widgets.flatMap((w) => w.properties.metrics.map((m) => m[1])));
    for (const metric of [
      'TokensServedFromMemory',
      'UpstreamIssuances',
      'IssuedForMinValidity',
      'IssuedForInvalidate',
      'WarmUpRuns',
      'AnotherIssuerSuspected',
      'Throttles',
      'ReadThrottleEvents',
    ]) {
      expect(names, metric).toContain(metric);
    }
    expect(values).toEqual({
      FunctionName: { Ref: 'BrokerLambdaFunction' },
      TableName: { Ref: 'TokenTable' },
    });
  });

  it('grants kms:Decrypt on the secrets’ key only where the stage names one, through Secrets Manager', () => {
    const policy = template().Resources.SecretsKeyPolicy;
    expect(policy?.Condition).toBe('HasSecretsKmsKey');
    const [statement] = policy?.Properties.PolicyDocument.Statement ?? [];
    expect(statement).toMatchObject({
      Action: 'kms:Decrypt',
      Resource: { Ref: 'SecretsKmsKeyArn' },
    });
    expect(JSON.stringify(statement.Condition)).toContain('secretsmanager.');
    const parameter = (template() as unknown as { Parameters: Json }).Parameters
      .SecretsKmsKeyArn as { Default: string };
    if (stage === 'prod') expect(parameter.Default).toMatch(/^arn:aws:kms:/);
    else expect(parameter.Default).toBe('');
  });

  // Issue 25, rollout: callers invoke an alias, never $LATEST, so that a release reaches them
  // only as CodeDeploy shifts the alias to it. Issue 37: the Function URL has an alias of its
  // own, `url`, which only the URL invokes; direct invoke and the warm-up keep `live`.
  it('serves direct invoke and the warm-up through the alias live: the schedule, its permission', () => {
    const alias = template().Resources.BrokerLiveAlias;
    expect(alias?.Type).toBe('AWS::Lambda::Alias');
    expect(alias?.Properties).toMatchObject({
      Name: 'live',
      FunctionName: { Ref: 'BrokerLambdaFunction' },
    });
    // The version this package publishes: the alias moves to it on deploy.
    const [[version] = [], ...more] = resourcesOfType(template(), 'AWS::Lambda::Version');
    expect(more).toEqual([]);
    expect(alias?.Properties.FunctionVersion).toEqual({ 'Fn::GetAtt': [version, 'Version'] });
    const rules = resourcesOfType(template(), 'AWS::Events::Rule');
    expect(rules.flatMap(([, r]) => r.Properties.Targets.map((t: Json) => t.Arn))).toEqual([
      { Ref: 'BrokerLiveAlias' },
    ]);
    const permissions = resourcesOfType(template(), 'AWS::Lambda::Permission');
    expect(permissions.length).toBeGreaterThan(0);
    for (const [, permission] of permissions) {
      expect(permission.Properties.FunctionName).toEqual({ Ref: 'BrokerLiveAlias' });
    }
  });

  it('serves the Function URL through an alias of its own, url, which the function is told and which moves with live', () => {
    const resources = template().Resources;
    const alias = resources.BrokerUrlAlias;
    expect(alias?.Type).toBe('AWS::Lambda::Alias');
    expect(alias?.Properties).toMatchObject({
      Name: 'url',
      FunctionName: { Ref: 'BrokerLambdaFunction' },
      // The same version as live: one release, two doors.
      FunctionVersion: resources.BrokerLiveAlias?.Properties.FunctionVersion,
    });
    const url = resources.BrokerLambdaFunctionUrl;
    expect(url?.Properties).toMatchObject({
      TargetFunctionArn: { 'Fn::GetAtt': ['BrokerLambdaFunction', 'Arn'] },
      AuthType: 'AWS_IAM',
      Qualifier: 'url',
    });
    expect([url?.DependsOn].flat()).toContain('BrokerUrlAlias');
    // The function serves HTTP requests only through that alias (functions/broker/qualifier.ts).
    expect(fn().Environment.Variables.BROKER_URL_QUALIFIER).toBe(url?.Properties.Qualifier);
    expect(loadConfig(resolvedEnv(fn().Environment.Variables)).urlQualifier).toBe('url');
    // CodeDeploy moves it too, in a deployment group of its own: one deployment at a time per
    // group, and both aliases move in the same stack update.
    expect(alias?.UpdatePolicy).toEqual({
      CodeDeployLambdaAliasUpdate: {
        ApplicationName: { Ref: 'BrokerDeployApplication' },
        DeploymentGroupName: { Ref: 'BrokerUrlDeploymentGroup' },
      },
    });
    const live = resources.BrokerDeploymentGroup?.Properties;
    const urlGroup = resources.BrokerUrlDeploymentGroup;
    expect(urlGroup?.Type).toBe('AWS::CodeDeploy::DeploymentGroup');
    // The same application, role, configuration and alarms as live's: only the name differs.
    const { DeploymentGroupName, ...rest } = urlGroup?.Properties ?? {};
    const { DeploymentGroupName: liveName, ...liveRest } = live ?? {};
    expect(rest).toEqual(liveRest);
    expect(DeploymentGroupName).toBe(`token-broker-${stage}-url`);
    expect(liveName).toBe(`token-broker-${stage}`);
    // What callers are given: each alias's ARN, and the deployment groups to watch.
    const outputs = (template() as unknown as { Outputs: Record<string, { Value: unknown }> })
      .Outputs;
    expect(outputs.BrokerUrlAliasArn?.Value).toEqual({ Ref: 'BrokerUrlAlias' });
    expect(outputs.BrokerLiveAliasArn?.Value).toEqual({ Ref: 'BrokerLiveAlias' });
    expect(outputs.BrokerUrlDeploymentGroupName?.Value).toEqual({
      Ref: 'BrokerUrlDeploymentGroup',
    });
    expect(outputs.BrokerDeployApplicationName?.Value).toEqual({
      Ref: 'BrokerDeployApplication',
    });
  });

  it('grants nobody plain lambda:InvokeFunction on the URL’s alias: only the URL invokes it', async () => {
    const resources = template().Resources;
    // No resource policy names it (same-account callers need none; the schedule invokes live).
    for (const [id, permission] of resourcesOfType(template(), 'AWS::Lambda::Permission')) {
      expect(permission.Properties.FunctionName, id).not.toEqual({ Ref: 'BrokerUrlAlias' });
    }
    // No policy of the stack reaches it by lambda:InvokeFunction without
    // lambda:InvokedViaFunctionUrl (infra/iam-check.ts, as npm run check:deploy applies it).
    const report = await checkTemplate(template() as never);
    expect(report.findings.filter((line) => line.includes('Function URL'))).toEqual([]);
    // And the check sees it: the same template with a plain grant on it fails.
    const granted = structuredClone(template()) as Template;
    granted.Resources.UrlCaller = {
      Type: 'AWS::Lambda::Permission',
      Properties: {
        FunctionName: { Ref: 'BrokerUrlAlias' },
        Action: 'lambda:InvokeFunction',
        Principal: '123456789012',
      },
    };
    expect((await checkTemplate(granted as never)).findings).toEqual([
      expect.stringMatching(
        /^UrlCaller: lambda:InvokeFunction on the Function URL's alias 'url' without InvokedViaFunctionUrl/,
      ),
    ]);
    expect(resources.BrokerUrlAlias).toBeDefined();
  });

  it('shifts each release onto live with CodeDeploy, rolling back on the broker’s alarms', () => {
    const resources = template().Resources;
    expect(resources.BrokerLiveAlias?.UpdatePolicy).toEqual({
      CodeDeployLambdaAliasUpdate: {
        ApplicationName: { Ref: 'BrokerDeployApplication' },
        DeploymentGroupName: { Ref: 'BrokerDeploymentGroup' },
      },
    });
    expect(resources.BrokerDeployApplication).toMatchObject({
      Type: 'AWS::CodeDeploy::Application',
      Properties: { ComputePlatform: 'Lambda' },
    });
    const group = resources.BrokerDeploymentGroup;
    expect(group?.Type).toBe('AWS::CodeDeploy::DeploymentGroup');
    expect(group?.Properties).toMatchObject({
      ApplicationName: { Ref: 'BrokerDeployApplication' },
      ServiceRoleArn: { 'Fn::GetAtt': ['CodeDeployServiceRole', 'Arn'] },
      // dev takes a release at once; prod as a canary that outlasts one alarm period.
      DeploymentConfigName:
        stage === 'prod'
          ? 'CodeDeployDefault.LambdaCanary10Percent10Minutes'
          : 'CodeDeployDefault.LambdaAllAtOnce',
      DeploymentStyle: { DeploymentType: 'BLUE_GREEN', DeploymentOption: 'WITH_TRAFFIC_CONTROL' },
      AutoRollbackConfiguration: {
        Enabled: true,
        Events: ['DEPLOYMENT_FAILURE', 'DEPLOYMENT_STOP_ON_ALARM'],
      },
    });
    const alarms = group?.Properties.AlarmConfiguration;
    expect(alarms.Enabled).toBe(true);
    const names = alarms.Alarms.map((a: { Name: { Ref: string } }) => a.Name.Ref);
    expect(names).toEqual([
      'FunctionErrorsAlarm',
      'RequestErrorsAlarm',
      'RefreshFailuresAlarm',
      'IssuanceRefusedAlarm',
      'IssuanceRateAlarm',
      'AnotherIssuerAlarm',
    ]);
    for (const name of names) expect(resources[name]?.Type, name).toBe('AWS::CloudWatch::Alarm');
    // CodeDeploy's role: assumed by CodeDeploy only, moving this function's aliases only.
    const role = resources.CodeDeployServiceRole?.Properties;
    expect(role.AssumeRolePolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Principal: { Service: 'codedeploy.amazonaws.com' },
        Action: 'sts:AssumeRole',
      },
    ]);
    const statements = role.Policies.flatMap(
      (p: { PolicyDocument: { Statement: Json[] } }) => p.PolicyDocument.Statement,
    );
    const lambda = statements.find((s: Json) => JSON.stringify(s.Action).includes('lambda:'));
    expect(lambda.Action).toEqual([
      'lambda:GetAlias',
      'lambda:UpdateAlias',
      'lambda:GetProvisionedConcurrencyConfig',
    ]);
    // The function's own ARN (what GetAlias and UpdateAlias are authorised against, which
    // `:*` does not match) and its qualified ARNs; no other function.
    const fnArn = `arn:\${AWS::Partition}:lambda:\${AWS::Region}:\${AWS::AccountId}:function:token-broker-${stage}-broker`;
    expect(lambda.Resource.map((r: { 'Fn::Sub': string }) => r['Fn::Sub'])).toEqual([
      fnArn,
      `${fnArn}:*`,
    ]);
    expect(role.ManagedPolicyArns).toBeUndefined();
  });

  it('sets no reserved or provisioned concurrency unless the stage does', () => {
    expect(fn().ReservedConcurrentExecutions).toBeUndefined();
    expect(template().Resources.BrokerLiveAlias?.Properties.ProvisionedConcurrencyConfig).toBe(
      undefined,
    );
    expect(template().Resources.BrokerUrlAlias?.Properties.ProvisionedConcurrencyConfig).toBe(
      undefined,
    );
  });

  it('attaches a VPC only where the stage asks for one', () => {
    const role = template().Resources.IamRoleLambdaExecution?.Properties;
    if (stage === 'prod') {
      expect(fn().VpcConfig.SubnetIds.length).toBeGreaterThan(0);
      expect(JSON.stringify(role.ManagedPolicyArns)).toContain('AWSLambdaVPCAccessExecutionRole');
    } else {
      expect(fn().VpcConfig).toBeUndefined();
      expect(role.ManagedPolicyArns).toBeUndefined();
    }
  });
});

describe('Template: a stage with reserved and provisioned concurrency (issue 25)', () => {
  const template = () => templates['prod-concurrency'] as Template;

  it('reserves the function’s concurrency, and provisions environments on live', () => {
    expect(template().Resources.BrokerLambdaFunction?.Properties.ReservedConcurrentExecutions).toBe(
      20,
    );
    const alias = template().Resources.BrokerLiveAlias?.Properties;
    expect(alias.ProvisionedConcurrencyConfig).toEqual({ ProvisionedConcurrentExecutions: 2 });
    // Provisioned on live, not on a third alias (osls's `provisioned`); the URL's has none.
    expect(
      resourcesOfType(template(), 'AWS::Lambda::Alias')
        .map(([id]) => id)
        .sort(),
    ).toEqual(['BrokerLiveAlias', 'BrokerUrlAlias']);
    expect(template().Resources.BrokerUrlAlias?.Properties.ProvisionedConcurrencyConfig).toBe(
      undefined,
    );
  });
});

describe('Template: a stage on Lambda Managed Instances (compute: managed-instances; issue 37)', () => {
  const template = () => templates['prod-managed-instances'] as Template;
  const fn = () => template().Resources.BrokerLambdaFunction?.Properties;

  it('passes cfn-lint (which knows AWS::Lambda::CapacityProvider)', async () => {
    const out = join(dir, 'prod-managed-instances', 'cloudformation-template-update-stack.json');
    expect(['clean', 'no cfn-lint']).toContain(await cfnLint(out));
  });

  it('runs its instances in the stage VPC, on the function’s architecture, up to the vCPU ceiling', () => {
    const prod = templates.prod as Template;
    const vpc = prod.Resources.BrokerLambdaFunction?.Properties.VpcConfig;
    expect(resourcesOfType(template(), 'AWS::Lambda::CapacityProvider')).toHaveLength(1);
    expect(template().Resources.BrokerCapacityProvider?.Properties).toEqual({
      CapacityProviderName: 'token-broker-prod',
      VpcConfig: vpc,
      PermissionsConfig: {
        CapacityProviderOperatorRoleArn: {
          'Fn::GetAtt': ['BrokerCapacityProviderOperatorRole', 'Arn'],
        },
      },
      InstanceRequirements: { Architectures: ['arm64'] },
      CapacityProviderScalingConfig: { ScalingMode: 'Auto', MaxVCpuCount: 16 },
    });
    const operator = template().Resources.BrokerCapacityProviderOperatorRole?.Properties;
    expect(operator.AssumeRolePolicyDocument.Statement).toEqual([
      {
        Effect: 'Allow',
        Principal: { Service: 'lambda.amazonaws.com' },
        Action: 'sts:AssumeRole',
        Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
      },
    ]);
    expect(JSON.stringify(operator.ManagedPolicyArns)).toContain(
      ':iam::aws:policy/service-role/AWSLambdaManagedEC2ResourceOperator',
    );
  });

  it('puts the function on it: 2 GB, one vCPU, one worker thread, no VPC of its own', () => {
    expect(fn().CapacityProviderConfig).toEqual({
      LambdaManagedInstancesCapacityProviderConfig: {
        CapacityProviderArn: { 'Fn::GetAtt': ['BrokerCapacityProvider', 'Arn'] },
        ExecutionEnvironmentMemoryGiBPerVCpu: 2,
      },
    });
    expect(fn().MemorySize).toBe(2048);
    expect(fn().Environment.Variables.AWS_LAMBDA_NODEJS_WORKER_COUNT).toBe('1');
    expect(fn().VpcConfig).toBeUndefined();
    expect(
      template().Resources.IamRoleLambdaExecution?.Properties.ManagedPolicyArns,
    ).toBeUndefined();
    // Every caller still invokes an alias, live or url, of a published version (Managed
    // Instances run published versions only).
    for (const id of ['BrokerLiveAlias', 'BrokerUrlAlias']) {
      const alias = template().Resources[id]?.Properties;
      expect(alias.FunctionVersion['Fn::GetAtt'][0], id).toMatch(/^BrokerLambdaVersion/);
    }
  });

  it('changes nothing else of the stage', () => {
    const prod = JSON.parse(normalized(templates.prod as Template)) as Template;
    const managed = JSON.parse(normalized(template())) as Template;
    const added = Object.keys(managed.Resources).filter((id) => !(id in prod.Resources));
    expect(added.sort()).toEqual(['BrokerCapacityProvider', 'BrokerCapacityProviderOperatorRole']);
    for (const [id, resource] of Object.entries(prod.Resources)) {
      if (id === 'BrokerLambdaFunction' || id === 'IamRoleLambdaExecution') continue;
      expect(managed.Resources[id], id).toEqual(resource);
    }
  });
});

describe('Template: the optional egress stack (infra/egress.yml)', () => {
  it('passes cfn-lint where the machine has it, as CI lints the packaged templates', async () => {
    const lint = await run('cfn-lint', [join(root, 'infra/egress.yml')]).then(
      () => 'clean',
      (error: { code?: unknown; stdout?: string }) =>
        error.code === 'ENOENT' ? 'no cfn-lint' : `findings: ${error.stdout}`,
    );
    expect(['clean', 'no cfn-lint']).toContain(lint);
  });

  it('gives the function private subnets behind one NAT gateway with a fixed IP, and endpoints for DynamoDB, Secrets Manager and KMS', () => {
    const text = readFileSync(join(root, 'infra/egress.yml'), 'utf8');
    for (const type of [
      'AWS::EC2::VPC',
      'AWS::EC2::NatGateway',
      'AWS::EC2::EIP',
      'AWS::EC2::VPCEndpoint',
    ]) {
      expect(text).toContain(`Type: ${type}`);
    }
    for (const service of ['dynamodb', 'secretsmanager', 'kms']) {
      expect(text).toContain(`com.amazonaws.\${AWS::Region}.${service}`);
    }
    for (const output of [
      'PrivateSubnetA',
      'PrivateSubnetB',
      'FunctionSecurityGroup',
      'EgressIp',
    ]) {
      expect(text).toMatch(new RegExp(`^  ${output}:\\n    (Description: .*\\n    )?Value:`, 'm'));
    }
  });
});

/** cfn-lint's verdict on a template: clean, its findings, or no cfn-lint on this machine. */
const cfnLint = (path: string) =>
  run('cfn-lint', [path]).then(
    () => 'clean',
    (error: { code?: unknown; stdout?: string }) =>
      error.code === 'ENOENT' ? 'no cfn-lint' : `findings: ${error.stdout}`,
  );

/** A standalone template of infra/, read with the CloudFormation YAML tags packaging reads. */
const standalone = (file: string): Template & Json => {
  const fromOsls = createRequire(join(root, 'node_modules/osls/package.json'));
  const yaml = fromOsls('js-yaml') as { load: (text: string, options: unknown) => unknown };
  const schema = fromOsls('./lib/utils/serverless-utils/cloudformation-schema.js');
  return yaml.load(readFileSync(join(root, 'infra', file), 'utf8'), { schema }) as Template & Json;
};

describe('Template: a global stage in one of its regions (stage global, eu-west-2; issue 26)', () => {
  const template = () => templates.global as Template;
  const fn = () => template().Resources.BrokerLambdaFunction?.Properties;
  const statements = () =>
    template().Resources.IamRoleLambdaExecution?.Properties.Policies.flatMap(
      (p: Json) => (p.PolicyDocument as { Statement: Json[] }).Statement,
    ) as Json[];
  const bySid = (sid: string) => statements().find((s) => s.Sid === sid);
  const localKey = {
    'Fn::Sub': `arn:\${AWS::Partition}:kms:\${AWS::Region}:\${AWS::AccountId}:key/mrk-1234abcd12ab34cd56ef1234567890ab`,
  };

  it('passes cfn-lint', async () => {
    const out = join(dir, 'global', 'cloudformation-template-update-stack.json');
    expect(['clean', 'no cfn-lint']).toContain(await cfnLint(out));
  });

  it('holds no table and no key: the global table and the multi-Region key are stacks of their own', () => {
    expect(resourcesOfType(template(), 'AWS::DynamoDB::Table')).toEqual([]);
    expect(resourcesOfType(template(), 'AWS::DynamoDB::GlobalTable')).toEqual([]);
    expect(resourcesOfType(template(), 'AWS::KMS::Key')).toEqual([]);
    expect(template().Resources.TokenTable).toBeUndefined();
  });

  it('points the function at this region’s replica of the table and copy of the key', () => {
    const env = fn().Environment.Variables as Record<string, unknown>;
    // The table's name is the same in every region; the key's ARN is this region's copy.
    expect(env.BROKER_TABLE_NAME).toBe('token-broker-global-tokens');
    expect(env.BROKER_KMS_KEY_ID).toEqual(localKey);
    // Its writes and strong reads cross regions: the protocol's store round-trip bound says so.
    expect(env.BROKER_STORE_ROUND_TRIP_MS).toBe('150');
    expect([...(bySid('TokenTable')?.Action as string[])].sort()).toEqual(dynamoDBActionsSent());
    expect(bySid('TokenTable')).toMatchObject({
      Resource: {
        'Fn::Sub': `arn:\${AWS::Partition}:dynamodb:\${AWS::Region}:\${AWS::AccountId}:table/token-broker-global-tokens`,
      },
    });
    expect(bySid('TableKey')).toMatchObject({
      Action: ['kms:Decrypt', 'kms:GenerateDataKey'],
      Resource: localKey,
    });
  });

  it('reads each secret by name, from this region’s replica only', () => {
    const env = fn().Environment.Variables as Record<string, unknown>;
    const config = loadConfig(resolvedEnv(env));
    const ids = [...config.connections.values()].map((c) => c.secretId);
    expect(ids.length).toBeGreaterThan(0);
    for (const id of ids) expect(id).not.toMatch(/^arn:/);
    const resources = [bySid('ConnectionSecrets')?.Resource].flat() as string[];
    expect(resources.length).toBe(ids.length);
    for (const arn of resources) expect(arn).toMatch(/^arn:aws:secretsmanager:eu-west-2:/);
  });

  it('rolls each region out on its own: its own aliases live and url and canary deployment groups (issues 25, 37)', () => {
    const resources = template().Resources;
    expect(resources.BrokerLiveAlias?.Properties.Name).toBe('live');
    expect(resources.BrokerUrlAlias?.Properties.Name).toBe('url');
    expect(resources.BrokerLambdaFunctionUrl?.Properties.Qualifier).toBe('url');
    for (const id of ['BrokerDeploymentGroup', 'BrokerUrlDeploymentGroup']) {
      expect(resources[id]?.Properties.DeploymentConfigName, id).toBe(
        'CodeDeployDefault.LambdaCanary10Percent10Minutes',
      );
    }
  });

  it('runs its own warm-up, and watches this region’s replica', () => {
    expect(resourcesOfType(template(), 'AWS::Events::Rule')).toHaveLength(1);
    const throttles = template().Resources.DynamoDBThrottlesAlarm?.Properties;
    expect(JSON.stringify(throttles.Metrics)).toContain(
      '"Name":"TableName","Value":"token-broker-global-tokens"',
    );
    const dashboard = template().Resources.BrokerDashboard?.Properties;
    expect(dashboard.DashboardBody['Fn::Sub'][1].TableName).toBe('token-broker-global-tokens');
    // Dashboards are global to the account: each region's stack needs a name of its own.
    expect(dashboard.DashboardName).toBe('token-broker-global-eu-west-2');
  });

  it('passes npm run validate in each of its regions, and is refused in any other', async () => {
    const print = async (region: string) =>
      JSON.parse(
        (
          await run(
            join(root, 'node_modules/.bin/serverless'),
            ['print', '--stage', 'global', '--region', region, '--format', 'json'],
            { cwd: root, env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir } },
          )
        ).stdout,
      ) as PrintedConfig;
    // An example: its placeholders (account, example.com, key) are allowed here, as CI allows
    // them, and refused without the flag (issue 38).
    const example = { allowPlaceholders: true };
    for (const region of ['eu-west-1', 'eu-west-3']) {
      expect(checkStage('global', await print(region), example), region).toEqual([]);
    }
    expect(checkStage('global', await print('us-east-1'), example)[0]).toContain(
      "region 'us-east-1' is not among params.global.regions",
    );
    expect(checkStage('global', await print('eu-west-1'))[0]).toMatch(
      /example stages' account: 111122223333\..*only dev may keep placeholders$/,
    );
  }, 60_000);

  it('is validated for the region named: without --region, npm run validate refuses rather than check the default one', async () => {
    const validate = (...args: string[]) =>
      run(process.execPath, ['scripts/validate-stage.mjs', '--stage', 'global', ...args], {
        cwd: root,
        env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir },
      }).then(
        ({ stdout }) => ({ code: 0, out: stdout }),
        (error: { code: number; stderr: string }) => ({ code: error.code, out: error.stderr }),
      );
    expect(await validate()).toEqual({
      code: 2,
      out: "Stage 'global' is on a global table and deployed once per region: give --region (each of its regions in turn).\n",
    });
    expect(await validate('--region', 'eu-west-2', '--allow-placeholders')).toEqual({
      code: 0,
      out: "Stage 'global' in eu-west-2 may be packaged, its placeholders allowed (--allow-placeholders).\n",
    });
  }, 60_000);
});

describe('Template: the global table (infra/global-table.yml; issue 26)', () => {
  const template = () => standalone('global-table.yml');
  const table = () => template().Resources.GlobalTokenTable?.Properties;
  const parameters = () => template().Parameters as Record<string, Json>;
  const conditions = () => template().Conditions as Json;

  it('passes cfn-lint', async () => {
    expect(['clean', 'no cfn-lint']).toContain(await cfnLint(join(root, 'infra/global-table.yml')));
  });

  it('is one global table with multi-Region strong consistency, on demand, keyed as the regional table', () => {
    expect(resourcesOfType(template(), 'AWS::DynamoDB::GlobalTable')).toHaveLength(1);
    const regional = standalone('table.yml').Resources.TokenTable?.Properties;
    expect(table()).toMatchObject({
      MultiRegionConsistency: 'STRONG',
      BillingMode: 'PAY_PER_REQUEST',
      KeySchema: regional.KeySchema,
      AttributeDefinitions: regional.AttributeDefinitions,
      TableName: { Ref: 'TableName' },
    });
    expect(template().Resources.GlobalTokenTable?.DeletionPolicy).toBe('Retain');
  });

  it('has no TTL: multi-Region strongly consistent tables have none', () => {
    expect(table().TimeToLiveSpecification).toBeUndefined();
    expect(JSON.stringify(template())).not.toContain('TimeToLive');
  });

  it('has three replicas, or two and a witness in the third region', () => {
    const [first, second, third] = table().Replicas;
    expect(table().Replicas).toHaveLength(3);
    expect(first.Region).toEqual({ Ref: 'AWS::Region' });
    expect(second.Region).toEqual({ Ref: 'SecondRegion' });
    // The third replica only with ThreeReplicas; the witness, in the same region, only without.
    expect(third['Fn::If'][0]).toBe('ThreeReplicas');
    expect(third['Fn::If'][1].Region).toEqual({ Ref: 'ThirdRegion' });
    expect(third['Fn::If'][2]).toEqual({ Ref: 'AWS::NoValue' });
    expect(table().GlobalTableWitnesses).toEqual({
      'Fn::If': ['WithWitness', [{ Region: { Ref: 'ThirdRegion' } }], { Ref: 'AWS::NoValue' }],
    });
    expect(conditions()).toMatchObject({
      ThreeReplicas: { 'Fn::Equals': [{ Ref: 'ThirdRegionRole' }, 'replica'] },
      WithWitness: { 'Fn::Equals': [{ Ref: 'ThirdRegionRole' }, 'witness'] },
    });
    expect(parameters().ThirdRegionRole).toMatchObject({
      Default: 'replica',
      AllowedValues: ['replica', 'witness'],
    });
  });

  it('gives each replica point-in-time recovery, deletion protection and its region’s copy of the multi-Region key', () => {
    const [first, second, third] = table().Replicas;
    const replicas = [first, second, third['Fn::If'][1]];
    const regionOf = ['AWS::Region', 'SecondRegion', 'ThirdRegion'];
    replicas.forEach((replica: Json, i: number) => {
      expect(replica.PointInTimeRecoverySpecification).toEqual({
        PointInTimeRecoveryEnabled: true,
      });
      expect(replica.DeletionProtectionEnabled).toEqual({ 'Fn::If': ['Protected', true, false] });
      expect(replica.SSESpecification).toEqual({
        KMSMasterKeyId: {
          'Fn::Sub': `arn:\${AWS::Partition}:kms:\${${regionOf[i]}}:\${AWS::AccountId}:key/\${KeyId}`,
        },
      });
    });
    expect(table().SSESpecification).toEqual({ SSEEnabled: true, SSEType: 'KMS' });
    expect(parameters().DeletionProtection?.Default).toBe('true');
    expect(parameters().KeyId?.AllowedPattern).toBe('^mrk-[0-9a-f]{32}$');
  });

  it('allows exactly the MRSC region sets the stage check knows', () => {
    const all = Object.values(MRSC_REGION_SETS).flat();
    expect(parameters().SecondRegion?.AllowedValues).toEqual(all);
    expect(parameters().ThirdRegion?.AllowedValues).toEqual(all);
  });
});

describe('Template: the multi-Region key (infra/global-key.yml; issue 26)', () => {
  const template = () => standalone('global-key.yml');

  it('passes cfn-lint', async () => {
    expect(['clean', 'no cfn-lint']).toContain(await cfnLint(join(root, 'infra/global-key.yml')));
  });

  it('is the multi-Region primary in the first region and its replica in every other', () => {
    const { PrimaryKey: primary, ReplicaKey: replica } = template().Resources;
    expect(primary).toMatchObject({
      Type: 'AWS::KMS::Key',
      Condition: 'IsPrimary',
      Properties: { MultiRegion: true, EnableKeyRotation: true },
    });
    expect(replica).toMatchObject({
      Type: 'AWS::KMS::ReplicaKey',
      Condition: 'IsReplica',
      Properties: { PrimaryKeyArn: { Ref: 'PrimaryKeyArn' } },
    });
    expect((template().Conditions as Json).IsPrimary).toEqual({
      'Fn::Equals': [{ Ref: 'PrimaryKeyArn' }, ''],
    });
    // Each copy has its own policy: the same one, DynamoDB in the copy's own region included.
    expect(replica?.Properties.KeyPolicy).toEqual(primary?.Properties.KeyPolicy);
    expect(JSON.stringify(primary?.Properties.KeyPolicy)).toContain(
      `dynamodb.\${AWS::Region}.amazonaws.com`,
    );
    expect(Object.keys(template().Outputs as Json).sort()).toEqual(['KeyArn', 'KeyId']);
  });
});

describe('Packaging without a build', () => {
  it('says to run npm run build, not "No file matches include / exclude patterns"', async () => {
    // The service's files without dist/: a checkout where nobody has built yet.
    const service = join(dir, 'unbuilt');
    mkdirSync(service);
    cpSync(join(root, 'serverless.yml'), join(service, 'serverless.yml'));
    cpSync(join(root, 'infra'), join(service, 'infra'), { recursive: true });
    const failure = await run(
      join(root, 'node_modules/.bin/serverless'),
      ['package', '--stage', 'dev', '--package', join(service, 'out')],
      { cwd: service, env: { PATH: process.env.PATH ?? '', HOME: service } },
    ).then(
      () => undefined,
      (error: { code?: unknown; stdout?: string; stderr?: string }) => error,
    );
    expect(failure?.code).toBe(1);
    const said = `${failure?.stdout}${failure?.stderr}`;
    expect(said).toContain(
      'dist/broker/index.mjs is missing: run `npm run build` before packaging or deploying',
    );
    expect(said).not.toContain('No file matches');
  }, 60_000);
});
