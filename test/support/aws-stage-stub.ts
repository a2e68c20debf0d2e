/**
 * One deployed stage as AWS would show it to `npm run smoke -- --stage`: a loopback server that
 * speaks each protocol the real SDK clients use for the calls the smoke test makes, reached
 * through `AWS_ENDPOINT_URL_<SERVICE>` as the local runtime reaches its Secrets Manager and KMS
 * stand-ins:
 * - CloudFormation (query protocol, XML): DescribeStacks, GetTemplate;
 * - Lambda (REST JSON): GetAlias (live and url), ListVersionsByFunction (two versions a page),
 *   Invoke (an HTTP-shaped event answered 403 WRONG_QUALIFIER, as the broker does on live);
 * - CodeDeploy (JSON 1.1): GetDeploymentGroup;
 * - CloudWatch (JSON 1.0, query-compatible): DescribeAlarms;
 * - DynamoDB (JSON 1.0): DescribeTable, DescribeTimeToLive, DescribeContinuousBackups;
 * - and the stage's Function URL (`/health`, `/tokens/{connection}`, `/ready`), which answers
 *   403 as AWS does to a request not signed with SigV4 for the service `lambda`.
 * Its state is plain data (`stage`), changed by a test to make one thing wrong.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { readBody, sendJson, serve } from '../../local/loopback.js';

export interface StubAlarm {
  readonly state: 'OK' | 'ALARM' | 'INSUFFICIENT_DATA';
  readonly reason?: string;
}

export interface StubStage {
  stage: string;
  region: string;
  account: string;
  /** `undefined`: DescribeStacks answers that the stack does not exist. */
  stackStatus: string | undefined;
  /** The template GetTemplate answers (a packaged one, from test/__snapshots__). */
  template: unknown;
  /** The version live points at. */
  aliasVersion: string;
  /** The version url (the Function URL's alias) points at. */
  urlAliasVersion: string;
  versions: number;
  /** Traffic live sends to other versions (a shift under way). */
  routing: Record<string, number> | undefined;
  /** Live's deployment group's last deployment. */
  lastDeployment: { readonly id: string; readonly status: string } | undefined;
  /** Url's deployment group's last deployment. */
  urlLastDeployment: { readonly id: string; readonly status: string } | undefined;
  /** Whether live serves an HTTP-shaped event as the caller it names (a broker before issue 37). */
  servesForgedEvents: boolean;
  alarms: Record<string, StubAlarm>;
  table: {
    name: string;
    ttl: { status: string; attribute: string | undefined };
    pitr: 'ENABLED' | 'DISABLED';
    deletionProtection: boolean;
  };
  connections: string[];
  ready: boolean;
  token: string;
}

export interface StageStub {
  readonly url: string;
  readonly stage: StubStage;
  /** `AWS_ENDPOINT_URL_<SERVICE>` for every service the smoke test calls. */
  readonly env: Record<string, string>;
  /** What was called: `Service.Operation`, the Function URL's `GET /path`. */
  readonly calls: string[];
  /** The Authorization header of each Function URL request. */
  readonly urlAuthorizations: (string | undefined)[];
  /** The function names (or ARNs) that Invoke was called with. */
  readonly invoked: string[];
  close(): Promise<void>;
}

const xml = (text: string) =>
  text.replace(/&/g, '&amp;').replace(/</g, '&lt;').replace(/>/g, '&gt;').replace(/"/g, '&quot;');

const sendXml = (res: ServerResponse, status: number, body: string) => {
  res.writeHead(status, { 'content-type': 'text/xml', 'x-amzn-requestid': 'stub' });
  res.end(`<?xml version="1.0" encoding="UTF-8"?>\n${body}`);
};

const sendAmzJson = (res: ServerResponse, version: '1.0' | '1.1', body: unknown) =>
  sendJson(res, 200, body, {
    'content-type': `application/x-amz-json-${version}`,
    'x-amzn-requestid': 'stub',
  });

const epoch = () => Math.floor(Date.now() / 1000) - 600;

export const startStageStub = async (stage: StubStage): Promise<StageStub> => {
  const calls: string[] = [];
  const urlAuthorizations: (string | undefined)[] = [];
  const invoked: string[] = [];
  let url = '';
  const functionName = () => `token-broker-${stage.stage}-broker`;
  const aliasArn = (name = 'live') =>
    `arn:aws:lambda:${stage.region}:${stage.account}:function:${functionName()}:${name}`;

  const tokenAnswer = (connection: string) => ({
    connection,
    accessToken: stage.token,
    expiresAt: new Date(Date.now() + 3_600_000).toISOString(),
    expiresIn: 3600,
    maxAgeMs: 5000,
    staleIfErrorSeconds: 0,
  });
  const readyReport = () => ({
    ready: stage.ready,
    connections: Object.fromEntries(
      stage.connections.map((name, index) => [
        name,
        stage.ready || index > 0
          ? { ready: true, secret: { status: 'ok' }, token: { status: 'ok', expiresIn: 3600 } }
          : {
              ready: false,
              secret: {
                status: 'failed',
                error: { code: 'SECRET_UNAVAILABLE', message: 'AccessDenied' },
              },
              token: { status: 'skipped' },
            },
      ]),
    ),
  });

  const cloudformation = (res: ServerResponse, form: URLSearchParams) => {
    const action = form.get('Action');
    calls.push(`CloudFormation.${action}`);
    const name = form.get('StackName');
    if (stage.stackStatus === undefined || name !== `token-broker-${stage.stage}`) {
      return sendXml(
        res,
        400,
        `<ErrorResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><Error><Type>Sender</Type><Code>ValidationError</Code><Message>Stack with id ${xml(String(name))} does not exist</Message></Error><RequestId>stub</RequestId></ErrorResponse>`,
      );
    }
    if (action === 'GetTemplate') {
      return sendXml(
        res,
        200,
        `<GetTemplateResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><GetTemplateResult><TemplateBody>${xml(JSON.stringify(stage.template))}</TemplateBody><StagesAvailable><member>Original</member><member>Processed</member></StagesAvailable></GetTemplateResult><ResponseMetadata><RequestId>stub</RequestId></ResponseMetadata></GetTemplateResponse>`,
      );
    }
    const outputs = {
      BrokerLiveAliasArn: aliasArn(),
      BrokerUrlAliasArn: aliasArn('url'),
      BrokerDeployApplicationName: `token-broker-${stage.stage}`,
      BrokerDeploymentGroupName: `token-broker-${stage.stage}`,
      BrokerUrlDeploymentGroupName: `token-broker-${stage.stage}-url`,
      BrokerLambdaFunctionUrl: `${url}/`,
      TokenTableName: stage.table.name,
    };
    return sendXml(
      res,
      200,
      `<DescribeStacksResponse xmlns="http://cloudformation.amazonaws.com/doc/2010-05-15/"><DescribeStacksResult><Stacks><member><StackName>${xml(String(name))}</StackName><StackId>arn:aws:cloudformation:${stage.region}:${stage.account}:stack/${xml(String(name))}/stub</StackId><StackStatus>${stage.stackStatus}</StackStatus><CreationTime>2026-11-01T10:00:00.000Z</CreationTime><LastUpdatedTime>2026-11-27T10:00:00.000Z</LastUpdatedTime><Outputs>${Object.entries(
        outputs,
      )
        .map(
          ([key, value]) =>
            `<member><OutputKey>${key}</OutputKey><OutputValue>${xml(value)}</OutputValue></member>`,
        )
        .join(
          '',
        )}</Outputs></member></Stacks></DescribeStacksResult><ResponseMetadata><RequestId>stub</RequestId></ResponseMetadata></DescribeStacksResponse>`,
    );
  };

  const lambda = async (req: IncomingMessage, res: ServerResponse, path: URL) => {
    const [, name = '', rest = ''] =
      /^\/2015-03-31\/functions\/([^/]+)\/(.*)$/.exec(path.pathname) ?? [];
    const fn = decodeURIComponent(name);
    if (req.method === 'POST' && rest === 'invocations') {
      calls.push('Lambda.Invoke');
      invoked.push(fn);
      const event = JSON.parse(await readBody(req)) as {
        action?: string;
        connection?: string;
        version?: string;
      };
      if (event.version === '2.0') {
        // An HTTP-shaped event by direct invoke (issue 37).
        return stage.servesForgedEvents
          ? sendJson(
              res,
              200,
              { statusCode: 200, body: JSON.stringify({ status: 'ok' }) },
              { 'x-amz-executed-version': stage.aliasVersion },
            )
          : sendJson(
              res,
              200,
              {
                statusCode: 403,
                headers: { 'content-type': 'application/json' },
                body: JSON.stringify({
                  error: {
                    code: 'WRONG_QUALIFIER',
                    message: "An HTTP request was invoked directly (through 'live')",
                  },
                }),
              },
              { 'x-amz-executed-version': stage.aliasVersion },
            );
      }
      const body = event.action === 'ready' ? readyReport() : tokenAnswer(String(event.connection));
      return sendJson(res, 200, body, { 'x-amz-executed-version': stage.aliasVersion });
    }
    if (!fn.endsWith(functionName())) {
      return sendJson(
        res,
        404,
        { Type: 'User', Message: `Function not found: ${fn}` },
        { 'x-amzn-errortype': 'ResourceNotFoundException' },
      );
    }
    if (rest === 'aliases/live') {
      calls.push('Lambda.GetAlias');
      return sendJson(res, 200, {
        AliasArn: aliasArn(),
        Name: 'live',
        FunctionVersion: stage.aliasVersion,
        ...(stage.routing ? { RoutingConfig: { AdditionalVersionWeights: stage.routing } } : {}),
      });
    }
    if (rest === 'aliases/url') {
      calls.push('Lambda.GetAlias');
      return sendJson(res, 200, {
        AliasArn: aliasArn('url'),
        Name: 'url',
        FunctionVersion: stage.urlAliasVersion,
      });
    }
    if (rest === 'versions') {
      calls.push('Lambda.ListVersionsByFunction');
      const all = ['$LATEST', ...Array.from({ length: stage.versions }, (_, i) => String(i + 1))];
      const from = Number(path.searchParams.get('Marker') ?? 0);
      const page = all.slice(from, from + 2);
      return sendJson(res, 200, {
        Versions: page.map((Version) => ({
          FunctionName: functionName(),
          Version,
          FunctionArn: `arn:aws:lambda:${stage.region}:${stage.account}:function:${functionName()}:${Version}`,
        })),
        ...(from + 2 < all.length ? { NextMarker: String(from + 2) } : {}),
      });
    }
    return sendJson(res, 400, { Message: `stub: no ${req.method} ${path.pathname}` });
  };

  const json = (res: ServerResponse, target: string, input: Record<string, unknown>) => {
    const [service, operation] = target.split('.');
    calls.push(`${service?.replace(/_?\d+$/, '')}.${operation}`);
    switch (target) {
      case 'GraniteServiceVersion20100801.DescribeAlarms': {
        const prefix = String(input.AlarmNamePrefix ?? '');
        return sendAmzJson(res, '1.0', {
          MetricAlarms: Object.entries(stage.alarms)
            .filter(([name]) => name.startsWith(prefix))
            .map(([name, alarm]) => ({
              AlarmName: name,
              AlarmArn: `arn:aws:cloudwatch:${stage.region}:${stage.account}:alarm:${name}`,
              StateValue: alarm.state,
              StateReason: alarm.reason ?? 'Threshold Crossed: no datapoints were received',
              StateUpdatedTimestamp: epoch(),
            })),
          CompositeAlarms: [],
        });
      }
      case 'CodeDeploy_20141006.GetDeploymentGroup': {
        const application = `token-broker-${stage.stage}`;
        const last =
          input.deploymentGroupName === `${application}-url`
            ? stage.urlLastDeployment
            : stage.lastDeployment;
        if (
          input.applicationName !== application ||
          ![application, `${application}-url`].includes(String(input.deploymentGroupName))
        ) {
          return sendJson(
            res,
            400,
            { __type: 'DeploymentGroupDoesNotExistException', message: 'No such group' },
            { 'content-type': 'application/x-amz-json-1.1' },
          );
        }
        return sendAmzJson(res, '1.1', {
          deploymentGroupInfo: {
            applicationName: input.applicationName,
            deploymentGroupName: input.deploymentGroupName,
            computePlatform: 'Lambda',
            ...(last
              ? {
                  lastAttemptedDeployment: {
                    deploymentId: last.id,
                    status: last.status,
                    endTime: epoch(),
                    createTime: epoch() - 700,
                  },
                }
              : {}),
          },
        });
      }
      case 'DynamoDB_20120810.DescribeTimeToLive':
        return sendAmzJson(res, '1.0', {
          TimeToLiveDescription: {
            TimeToLiveStatus: stage.table.ttl.status,
            ...(stage.table.ttl.attribute ? { AttributeName: stage.table.ttl.attribute } : {}),
          },
        });
      case 'DynamoDB_20120810.DescribeContinuousBackups':
        return sendAmzJson(res, '1.0', {
          ContinuousBackupsDescription: {
            ContinuousBackupsStatus: 'ENABLED',
            PointInTimeRecoveryDescription: { PointInTimeRecoveryStatus: stage.table.pitr },
          },
        });
      case 'DynamoDB_20120810.DescribeTable':
        return sendAmzJson(res, '1.0', {
          Table: {
            TableName: input.TableName,
            TableStatus: 'ACTIVE',
            DeletionProtectionEnabled: stage.table.deletionProtection,
          },
        });
      default:
        return sendJson(res, 400, { __type: 'UnknownOperationException', message: target });
    }
  };

  /** The Function URL: AWS_IAM auth, so a request without a SigV4 signature for Lambda is 403. */
  const functionUrl = (req: IncomingMessage, res: ServerResponse, path: URL) => {
    calls.push(`FunctionURL.${req.method} ${path.pathname}`);
    const authorization = req.headers.authorization;
    urlAuthorizations.push(authorization);
    if (
      !authorization?.startsWith('AWS4-HMAC-SHA256 ') ||
      !authorization.includes(`/${stage.region}/lambda/aws4_request`)
    ) {
      return sendJson(res, 403, { Message: 'Forbidden' });
    }
    if (path.pathname === '/health') {
      return sendJson(res, 200, { status: 'ok', connections: stage.connections });
    }
    if (path.pathname === '/ready') return sendJson(res, stage.ready ? 200 : 503, readyReport());
    const token = /^\/tokens\/([^/]+)$/.exec(path.pathname);
    if (token?.[1]) return sendJson(res, 200, tokenAnswer(decodeURIComponent(token[1])));
    return sendJson(res, 404, {
      error: { code: 'ROUTE_NOT_FOUND', message: `No route ${path.pathname}` },
    });
  };

  const handle = async (req: IncomingMessage, res: ServerResponse) => {
    const path = new URL(req.url ?? '/', 'http://stub');
    if (path.pathname.startsWith('/2015-03-31/functions/')) return lambda(req, res, path);
    const target = req.headers['x-amz-target'];
    if (typeof target === 'string') {
      const raw = await readBody(req);
      return json(res, target, (raw ? JSON.parse(raw) : {}) as Record<string, unknown>);
    }
    if (String(req.headers['content-type']).startsWith('application/x-www-form-urlencoded')) {
      return cloudformation(res, new URLSearchParams(await readBody(req)));
    }
    return functionUrl(req, res, path);
  };

  const server = await serve(handle, {
    onError: (res, error) => sendJson(res, 500, { message: String(error) }),
  });
  url = server.url;
  const env = Object.fromEntries(
    ['CLOUDFORMATION', 'CLOUDWATCH', 'CODEDEPLOY', 'DYNAMODB', 'LAMBDA'].map((service) => [
      `AWS_ENDPOINT_URL_${service}`,
      server.url,
    ]),
  );
  return { url, stage, env, calls, urlAuthorizations, invoked, close: server.close };
};
