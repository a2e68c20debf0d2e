/**
 * The IAM half of `npm run check:deploy` (infra/iam-check.ts), on templates as objects: no
 * packaging. The grant that motivated it (issue 37): CodeDeploy's role allowed the alias actions
 * on `function:<name>:*` only, which cfn-lint passes and AWS denies.
 */
import { readFileSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import {
  ANY,
  arnFormat,
  checkTemplate,
  glob,
  intersects,
  literal,
  resolveResource,
  type Template,
} from '../infra/iam-check.js';

const root = join(import.meta.dirname, '..');

/** infra/rollout.yml as the dev stage packages it: osls's variables filled in, its tags read. */
const rollout = () => {
  const fromOsls = createRequire(join(root, 'node_modules/osls/package.json'));
  const yaml = fromOsls('js-yaml') as { load: (text: string, options: unknown) => unknown };
  const schema = fromOsls('./lib/utils/serverless-utils/cloudformation-schema.js');
  const text = readFileSync(join(root, 'infra/rollout.yml'), 'utf8')
    .replaceAll(`\${sls:stage}`, 'dev')
    .replaceAll(`\${self:service}`, 'token-broker');
  // biome-ignore lint/suspicious/noExplicitAny: CloudFormation templates are untyped JSON.
  return yaml.load(text, { schema }) as any;
};
// biome-ignore lint/suspicious/noExplicitAny: CloudFormation templates are untyped JSON.
const statementsOf = (template: any) =>
  template.Resources.CodeDeployServiceRole.Properties.Policies[0].PolicyDocument.Statement;

/** A template of one role with one statement. */
const role = (statement: Record<string, unknown>, resources: Template['Resources'] = {}) => ({
  Parameters: { Name: { Type: 'String' } },
  Resources: {
    ...resources,
    Role: {
      Type: 'AWS::IAM::Role',
      Properties: {
        Policies: [
          {
            PolicyName: 'p',
            PolicyDocument: { Statement: [{ Sid: 'S', Effect: 'Allow', ...statement }] },
          },
        ],
      },
    },
  },
});
const findings = async (statement: Record<string, unknown>, resources?: Template['Resources']) =>
  (await checkTemplate(role(statement, resources))).findings;
const LOG_GROUP = { Group: { Type: 'AWS::Logs::LogGroup' } };
const TABLE = 'arn:aws:dynamodb:eu-west-1:123456789012:table/x';

describe('CodeDeploy role (infra/rollout.yml)', () => {
  it('passes as it is: the alias actions on the unqualified ARN too, the alarms by name prefix', async () => {
    const report = await checkTemplate(rollout());
    expect(report.findings).toEqual([]);
    expect(report.stars).toEqual([]);
    // cloudwatch:DescribeAlarms (alarm*) on alarm:token-broker-dev-*; three lambda actions.
    expect(report.actions).toBeGreaterThanOrEqual(5);
  });

  it('fails with the function:<name>:*-only grant: UpdateAlias and GetAlias are authorized on the unqualified ARN', async () => {
    const template = rollout();
    const alias = statementsOf(template).find((s: { Sid: string }) => s.Sid === 'Aliases');
    alias.Resource = alias.Resource.filter((r: { 'Fn::Sub': string }) =>
      r['Fn::Sub'].endsWith(':*'),
    );
    expect(alias.Resource).toHaveLength(1);
    const report = await checkTemplate(template);
    expect(report.findings).toEqual([
      expect.stringMatching(
        /^CodeDeployServiceRole\/token-broker-dev-rollout Aliases: lambda:GetAlias is authorized on function ARNs, and none of .*function:token-broker-dev-broker:\* can match one$/,
      ),
      expect.stringMatching(/Aliases: lambda:UpdateAlias is authorized on function ARNs/),
    ]);
  });

  it("accepts DescribeAlarms scoped by the alarms' name prefix (it is authorized per alarm), not on another service's ARN", async () => {
    expect(
      await findings({
        Action: 'cloudwatch:DescribeAlarms',
        Resource: {
          'Fn::Sub': `arn:\${AWS::Partition}:cloudwatch:\${AWS::Region}:\${AWS::AccountId}:alarm:token-broker-dev-*`,
        },
      }),
    ).toEqual([]);
    expect(
      await findings({
        Action: 'cloudwatch:DescribeAlarms',
        Resource: 'arn:aws:logs:eu-west-1:123456789012:log-group:token-broker-dev-*',
      }),
    ).toEqual([
      expect.stringContaining('cloudwatch:DescribeAlarms is authorized on alarm ARNs'),
      expect.stringContaining('matches no ARN any of its actions'),
    ]);
  });
});

describe('actions', () => {
  it('an unknown action, or service, is a finding; wildcards expand, in any case', async () => {
    expect(await findings({ Action: 'lambda:UpdateAliases', Resource: '*' })).toEqual([
      "Role/p S: unknown action 'lambda:UpdateAliases'",
    ]);
    expect(await findings({ Action: 'lamda:UpdateAlias', Resource: '*' })).toEqual([
      "Role/p S: unknown service 'lamda' in 'lamda:UpdateAlias'",
    ]);
    // A wildcard is judged as a whole: Get* names stream and account actions too.
    expect(
      await findings({ Action: ['DynamoDB:get*', 'dynamodb:BatchGetItem'], Resource: TABLE }),
    ).toEqual([]);
    expect(
      await findings({ Action: 'lambda:*Alias', Resource: 'arn:aws:lambda:*:*:function:f:*' }),
    ).toEqual([
      expect.stringMatching(
        /^Role\/p S: none of the actions of lambda:\*Alias \(lambda:CreateAlias, .*lambda:UpdateAlias\) is authorized on arn:aws:lambda:\*:\*:function:f:\*$/,
      ),
      expect.stringContaining('matches no ARN'),
    ]);
  });

  it("Resource '*' needs a reason: none for an action with resource-level permissions, the reference's for a wildcard-only one", async () => {
    expect(await findings({ Action: 'dynamodb:GetItem', Resource: '*' })).toEqual([
      expect.stringMatching(
        /^Role\/p S: Resource '\*' on dynamodb:GetItem, which is authorized on table: name them, or say in STAR_REASONS/,
      ),
    ]);
    const justified = await checkTemplate(role({ Action: 'dynamodb:GetItem', Resource: '*' }), {
      starReasons: { 'dynamodb:getitem': 'a test says so' },
    });
    expect(justified.findings).toEqual([]);
    expect(justified.stars).toEqual([
      { where: 'Role/p S', actions: ['dynamodb:GetItem'], reason: 'a test says so' },
    ]);

    const wildcardOnly = await checkTemplate(
      role({ Action: 'ec2:DescribeNetworkInterfaces', Resource: '*' }),
    );
    expect(wildcardOnly.findings).toEqual([]);
    expect(wildcardOnly.stars[0]?.reason).toBe(
      'supports no resource-level permission (Service Authorization Reference)',
    );
    expect(await findings({ Action: 'ec2:DescribeNetworkInterfaces', Resource: TABLE })).toEqual([
      expect.stringContaining(
        "ec2:DescribeNetworkInterfaces supports no resource-level permission (Service Authorization Reference): it needs Resource '*'",
      ),
      expect.stringContaining('matches no ARN any of its actions'),
    ]);
  });

  it("a key policy's '*' is the key", async () => {
    const report = await checkTemplate({
      Resources: {
        Key: {
          Type: 'AWS::KMS::Key',
          Properties: {
            KeyPolicy: {
              Statement: [
                {
                  Sid: 'Admin',
                  Effect: 'Allow',
                  Principal: { AWS: '*' },
                  Action: 'kms:*',
                  Resource: '*',
                },
              ],
            },
          },
        },
      },
    });
    expect(report.findings).toEqual([]);
    expect(report.stars).toEqual([
      {
        where: 'Key (key policy) Admin',
        actions: ['kms:*'],
        reason: "a KMS key policy's '*' means this key",
      },
    ]);
  });
});

describe('resources against ARN formats (the product automaton)', () => {
  it('a log group ARN ending :* (its Fn::GetAtt Arn) reaches its streams; without it, it does not', async () => {
    for (const action of ['logs:CreateLogStream', 'logs:PutLogEvents']) {
      expect(
        await findings({ Action: action, Resource: { 'Fn::GetAtt': ['Group', 'Arn'] } }, LOG_GROUP),
      ).toEqual([]);
      expect(
        await findings({
          Action: action,
          Resource: 'arn:aws:logs:eu-west-1:123456789012:log-group:/aws/lambda/f:*',
        }),
      ).toEqual([]);
      expect(
        await findings({
          Action: action,
          Resource: 'arn:aws:logs:eu-west-1:123456789012:log-group:/aws/lambda/f',
        }),
      ).toEqual([
        expect.stringContaining(`${action} is authorized on log-stream ARNs`),
        expect.stringContaining('matches no ARN'),
      ]);
    }
    // Log-group actions take the ARN with `:*`; tagging takes it without (CloudWatch Logs docs).
    expect(
      await findings({
        Action: 'logs:CreateLogGroup',
        Resource: 'arn:aws:logs:*:*:log-group:/aws/lambda/f*:*',
      }),
    ).toEqual([]);
    expect(
      await findings({
        Action: 'logs:TagResource',
        Resource: 'arn:aws:logs:*:*:log-group:/aws/lambda/f',
      }),
    ).toEqual([]);
    expect(
      await findings({
        Action: 'logs:TagResource',
        Resource: 'arn:aws:logs:*:*:log-group:/aws/lambda/f:*',
      }),
    ).toEqual([
      expect.stringContaining('logs:TagResource is authorized on'),
      expect.stringContaining('matches no ARN'),
    ]);
  });

  it('a table is not its indexes: table/x authorizes GetItem, table/x/index/* only an index query', async () => {
    expect(await findings({ Action: 'dynamodb:GetItem', Resource: TABLE })).toEqual([]);
    expect(await findings({ Action: 'dynamodb:GetItem', Resource: `${TABLE}/index/*` })).toEqual([
      expect.stringContaining('dynamodb:GetItem is authorized on table ARNs'),
      expect.stringContaining('matches no ARN'),
    ]);
    expect(await findings({ Action: 'dynamodb:Query', Resource: `${TABLE}/index/*` })).toEqual([]);
    expect(await findings({ Action: 'dynamodb:GetItem', Resource: `${TABLE}*` })).toEqual([]);
  });

  it('decides the intersection exactly, wildcards and variables on both sides', () => {
    const fn = arnFormat(
      'lambda',
      `arn:\${Partition}:lambda:\${Region}:\${Account}:function:\${FunctionName}`,
    );
    const alias = arnFormat(
      'lambda',
      `arn:\${Partition}:lambda:\${Region}:\${Account}:function:\${FunctionName}:\${Alias}`,
    );
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f:*'), fn)).toBe(false);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f:*'), alias)).toBe(true);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f*'), fn)).toBe(true);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f*'), alias)).toBe(true);
    expect(intersects(glob('arn:aws:lambda:*:function:f'), fn)).toBe(true);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:'), fn)).toBe(false);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f?'), fn)).toBe(true);
    expect(intersects(glob('arn:aws:lambda:eu-west-1:1:function:f:?'), fn)).toBe(false);
    expect(intersects(glob('*'), literal('*'))).toBe(true);
    expect(intersects(glob('arn:*'), literal('*'))).toBe(false);
    expect(intersects(ANY, [])).toBe(true);
    expect(intersects(glob('a'), [])).toBe(false);
  });
});

describe('resolving intrinsics', () => {
  const texts = (value: unknown, resources: Template['Resources'] = {}) =>
    resolveResource({ Parameters: { Name: {} }, Resources: resources }, value).map((r) => r.text);

  it('Fn::Sub, Fn::Join and Fn::If (both branches); AWS::NoValue names nothing', () => {
    expect(
      texts({
        'Fn::Sub': [
          `arn:\${AWS::Partition}:sns:\${AWS::Region}:\${AWS::AccountId}:\${T}`,
          { T: 'topic' },
        ],
      }),
    ).toEqual([`arn:\${AWS::Partition}:sns:\${AWS::Region}:\${AWS::AccountId}:topic`]);
    expect(texts({ 'Fn::Join': ['', ['arn:', { Ref: 'AWS::Partition' }, ':s3:::b/*']] })).toEqual([
      `arn:\${AWS::Partition}:s3:::b/*`,
    ]);
    expect(texts({ 'Fn::If': ['C', 'a', { Ref: 'AWS::NoValue' }] })).toEqual(['a']);
    expect(texts({ 'Fn::Sub': `x:\${!aws:username}` })).toEqual([`x:\${aws:username}`]);
  });

  it('a parameter is any value; Ref and Fn::GetAtt by the resource type; a bare name is no ARN', async () => {
    expect(await findings({ Action: 'kms:Decrypt', Resource: { Ref: 'Name' } })).toEqual([]);
    expect(
      await findings(
        { Action: 'dynamodb:GetItem', Resource: { 'Fn::GetAtt': ['T', 'Arn'] } },
        { T: { Type: 'AWS::DynamoDB::Table' } },
      ),
    ).toEqual([]);
    expect(
      await findings(
        { Action: 'dynamodb:GetItem', Resource: { Ref: 'T' } },
        { T: { Type: 'AWS::DynamoDB::Table' } },
      ),
    ).toEqual([
      expect.stringContaining(
        `dynamodb:GetItem is authorized on table ARNs, and none of \${T} can match one`,
      ),
      expect.stringContaining(`resource \${T} matches no ARN`),
    ]);
    expect(
      await findings(
        { Action: 'lambda:InvokeFunction', Resource: { 'Fn::GetAtt': ['F', 'Arn'] } },
        { F: { Type: 'AWS::Lambda::Function' } },
      ),
    ).toEqual([]);
  });
});

describe("the Function URL's alias: invoked through the URL only (issue 37)", () => {
  const FN = 'arn:aws:lambda:eu-west-1:123456789012:function:token-broker-dev-broker';
  /** A function, its aliases live and url, and a Function URL on url. */
  const stack: Template['Resources'] = {
    Fn: { Type: 'AWS::Lambda::Function', Properties: { FunctionName: 'token-broker-dev-broker' } },
    Live: {
      Type: 'AWS::Lambda::Alias',
      Properties: { Name: 'live', FunctionName: { Ref: 'Fn' } },
    },
    UrlAlias: {
      Type: 'AWS::Lambda::Alias',
      Properties: { Name: 'url', FunctionName: { Ref: 'Fn' } },
    },
    Url: {
      Type: 'AWS::Lambda::Url',
      Properties: {
        AuthType: 'AWS_IAM',
        TargetFunctionArn: { 'Fn::GetAtt': ['Fn', 'Arn'] },
        Qualifier: 'url',
      },
    },
  };
  const permission = (properties: Record<string, unknown>) =>
    checkTemplate({
      Resources: {
        ...stack,
        Grant: {
          Type: 'AWS::Lambda::Permission',
          Properties: { Principal: '111122223333', ...properties },
        },
      },
    }).then((report) => report.findings);
  const VIA_URL = { Bool: { 'lambda:InvokedViaFunctionUrl': 'true' } };

  it.each<[string, Record<string, unknown>]>([
    ['on the alias', { Resource: `${FN}:url` }],
    ['on every qualifier', { Resource: `${FN}:*` }],
    ['on the function and its qualifiers', { Resource: `${FN}*` }],
    ['with lambda:Invoke*', { Action: 'lambda:Invoke*', Resource: `${FN}:url` }],
    [
      'under BoolIfExists, which a direct invoke passes',
      { Resource: `${FN}:url`, Condition: { BoolIfExists: VIA_URL.Bool } },
    ],
  ])('an identity policy granting plain lambda:InvokeFunction %s is a finding', async (_, statement) => {
    expect(await findings({ Action: 'lambda:InvokeFunction', ...statement }, stack)).toEqual([
      expect.stringMatching(
        /^Role\/p S: lambda:InvokeFunction on the Function URL's alias 'url' \(.*\) without the condition Bool lambda:InvokedViaFunctionUrl/,
      ),
    ]);
  });

  it("takes an alias's ARN for invoking (Lambda's guide), not for the alias actions", async () => {
    expect(await findings({ Action: 'lambda:InvokeFunction', Resource: `${FN}:live` })).toEqual([]);
    expect(await findings({ Action: 'lambda:InvokeFunctionUrl', Resource: `${FN}:url` })).toEqual(
      [],
    );
    expect(await findings({ Action: 'lambda:GetAlias', Resource: `${FN}:live` })).toEqual([
      expect.stringContaining('lambda:GetAlias is authorized on function ARNs, and none of'),
      expect.stringContaining('matches no ARN any of its actions'),
    ]);
  });

  it('passes grants under lambda:InvokedViaFunctionUrl, on live, or of the URL action alone', async () => {
    expect(
      await findings(
        { Action: 'lambda:InvokeFunction', Resource: `${FN}:url`, Condition: VIA_URL },
        stack,
      ),
    ).toEqual([]);
    expect(
      await findings(
        {
          Action: 'lambda:InvokeFunction',
          Resource: `${FN}:url`,
          Condition: { bool: { 'LAMBDA:InvokedViaFunctionUrl': true } },
        },
        stack,
      ),
    ).toEqual([]);
    expect(
      await findings({ Action: 'lambda:InvokeFunction', Resource: `${FN}:live` }, stack),
    ).toEqual([]);
    expect(
      await findings({ Action: 'lambda:InvokeFunctionUrl', Resource: `${FN}:url` }, stack),
    ).toEqual([]);
    // Without a Function URL in the template there is nothing to guard.
    expect(await findings({ Action: 'lambda:InvokeFunction', Resource: `${FN}:url` })).toEqual([]);
  });

  it("a Lambda permission on the URL's alias: InvokedViaFunctionUrl or the URL action, never plain InvokeFunction", async () => {
    expect(
      await permission({ FunctionName: { Ref: 'UrlAlias' }, Action: 'lambda:InvokeFunction' }),
    ).toEqual([
      expect.stringMatching(
        /^Grant: lambda:InvokeFunction on the Function URL's alias 'url' without InvokedViaFunctionUrl/,
      ),
    ]);
    expect(
      await permission({ FunctionName: 'token-broker-dev-broker:url', Action: 'lambda:*' }),
    ).toHaveLength(1);
    expect(
      await permission({ FunctionName: `${FN}:url`, Action: 'lambda:InvokeFunction' }),
    ).toHaveLength(1);
    for (const ok of [
      {
        FunctionName: { Ref: 'UrlAlias' },
        Action: 'lambda:InvokeFunction',
        InvokedViaFunctionUrl: true,
      },
      {
        FunctionName: { Ref: 'UrlAlias' },
        Action: 'lambda:InvokeFunctionUrl',
        FunctionUrlAuthType: 'AWS_IAM',
      },
      { FunctionName: { Ref: 'Live' }, Action: 'lambda:InvokeFunction' },
      { FunctionName: 'token-broker-dev-broker:live', Action: 'lambda:InvokeFunction' },
      { FunctionName: { Ref: 'Fn' }, Action: 'lambda:InvokeFunction' },
    ]) {
      expect(await permission(ok), JSON.stringify(ok)).toEqual([]);
    }
  });
});
