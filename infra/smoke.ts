/**
 * `npm run smoke`: whether a deployed stage (or a broker at a URL) works, as the last step of a
 * deploy. One table, check | result | detail; exit 1 on any failure, each named.
 *
 * - `--stage <s> [--region <r>]`: finds the stack `token-broker-<s>` and from its outputs the
 *   aliases `live` and `url`, the Function URL and the deployment groups; gets a token over the
 *   Function URL (SigV4; it serves `url`) and by direct invoke of `live`, with the project's own
 *   client; sends `live` an HTTP-shaped event naming a caller it is not, which must be refused
 *   (issue 37); calls `ready`; and checks that both aliases are on the latest published version,
 *   each deployment group's last deployment, the stage's alarms (each with its state) and the
 *   table's TTL, point-in-time recovery and deletion protection against what the stack's
 *   template declares.
 * - `--endpoint <url> [--function <name>]`: a broker at a URL (`npm start`): health, a token over
 *   HTTP, `ready`, and with `--function` a token by direct invoke through the URL's Lambda Invoke
 *   API and the HTTP-shaped event sent there; every AWS-only check is shown as skipped.
 *
 * A token is never printed: its length and the first characters of its digest (the `tokenDigest`
 * that `status` shows) only.
 */
import { parseArgs } from 'node:util';
import {
  CloudFormationClient,
  DescribeStacksCommand,
  GetTemplateCommand,
  type Stack,
} from '@aws-sdk/client-cloudformation';
import {
  CloudWatchClient,
  type CompositeAlarm,
  type MetricAlarm,
  paginateDescribeAlarms,
} from '@aws-sdk/client-cloudwatch';
import { CodeDeployClient, GetDeploymentGroupCommand } from '@aws-sdk/client-codedeploy';
import {
  DescribeContinuousBackupsCommand,
  DescribeTableCommand,
  DescribeTimeToLiveCommand,
  DynamoDBClient,
} from '@aws-sdk/client-dynamodb';
import {
  GetAliasCommand,
  InvokeCommand,
  LambdaClient,
  paginateListVersionsByFunction,
} from '@aws-sdk/client-lambda';
import { defaultProvider } from '@aws-sdk/credential-provider-node';
import { Hash } from '@smithy/hash-node';
import { SignatureV4 } from '@smithy/signature-v4';
import type { AwsCredentialIdentity, AwsCredentialIdentityProvider } from '@smithy/types';
import {
  type AccessToken,
  createTokenClient,
  isLoopback,
  LOCAL_DEFAULTS,
  type ReadinessReport,
  type TokenClient,
  type TransportOptions,
} from '../client/src/index.js';
import { tokenDigest } from '../lib/broker/types.js';

/** serverless.yml's `service`: the stack of stage `s` is `token-broker-<s>`. */
export const SERVICE = 'token-broker';
/** The alias direct invokers and the warm-up invoke (infra/rollout.yml). */
export const ALIAS = 'live';
/** The alias the Function URL serves, and nothing else (infra/rollout.yml; issue 37). */
export const URL_ALIAS = 'url';
/**
 * Who the HTTP-shaped event sent by direct invoke claims to be: no principal of any account
 * (000000000000 is none). A broker that served it would trust any direct invoker's word.
 */
export const FORGED_CALLER = 'arn:aws:iam::000000000000:user/token-broker-smoke-forged-caller';
/** Each call's limit, ms. */
export const CALL_TIMEOUT_MS = 15_000;
/** Characters of the token's digest printed: enough to tell tokens apart, none of the token. */
const DIGEST_SHOWN = 12;

export type Result = 'ok' | 'FAIL' | 'note' | 'not run' | 'skipped (endpoint mode)';

export interface Row {
  readonly check: string;
  readonly result: Result;
  readonly detail: string;
}

export type SmokeOptions =
  | {
      readonly mode: 'stage';
      readonly stage: string;
      readonly region?: string | undefined;
      readonly connection?: string | undefined;
      readonly timeoutMs?: number | undefined;
    }
  | {
      readonly mode: 'endpoint';
      readonly endpoint: string;
      readonly region?: string | undefined;
      readonly connection?: string | undefined;
      /** The function's name at the endpoint's Lambda Invoke API (`npm start`: `token-broker`). */
      readonly functionName?: string | undefined;
      readonly timeoutMs?: number | undefined;
    };

export const USAGE = [
  'usage: npm run smoke -- --stage <stage> [--region <region>] [--connection <name>]',
  '       npm run smoke -- --endpoint <url> [--function <name>] [--connection <name>] [--region <region>]',
  '',
  '  --stage       the deployed stage: its stack token-broker-<stage> in --region (default: your AWS region)',
  '  --endpoint    a broker URL (npm start: http://127.0.0.1:3000); AWS-only checks are skipped',
  '  --function    with --endpoint: also get a token by direct invoke, through the Invoke API at that URL, and send it an HTTP-shaped event (which must be refused)',
  '  --connection  the connection to get tokens of (default: the first /health lists, else ready)',
  '',
  'Exit 0: every check passed (notes are not failures); 1: a check failed, named; 2: wrong usage, or no AWS region or credentials for --stage (nothing was sent).',
].join('\n');

export class UsageError extends Error {
  override readonly name = 'UsageError';
}

/** No AWS region or credentials for `--stage`: nothing was sent (exit 2, as the CLI's). */
export class SettingsError extends Error {
  override readonly name = 'SettingsError';
}

/** The command line, or a {@link UsageError}. */
export const parseSmokeArgs = (argv: readonly string[]): SmokeOptions | 'help' => {
  let values: Record<string, string | boolean | undefined>;
  try {
    ({ values } = parseArgs({
      args: [...argv],
      options: {
        stage: { type: 'string' },
        region: { type: 'string' },
        endpoint: { type: 'string' },
        function: { type: 'string' },
        connection: { type: 'string' },
        help: { type: 'boolean', short: 'h' },
      },
      strict: true,
      allowPositionals: false,
    }));
  } catch (error) {
    throw new UsageError((error as Error).message);
  }
  if (values.help) return 'help';
  const text = (name: string): string | undefined => {
    const value = values[name];
    if (value === undefined) return undefined;
    if (typeof value !== 'string' || value.trim() === '') {
      throw new UsageError(`--${name} needs a value`);
    }
    return value.trim();
  };
  const stage = text('stage');
  const endpoint = text('endpoint');
  const region = text('region');
  const connection = text('connection');
  const functionName = text('function');
  if ((stage === undefined) === (endpoint === undefined)) {
    throw new UsageError('give either --stage <stage> or --endpoint <url>');
  }
  if (stage !== undefined) {
    if (functionName !== undefined) {
      throw new UsageError(
        '--function is for --endpoint: with --stage the function is the stack’s alias live',
      );
    }
    return { mode: 'stage', stage, region, connection };
  }
  try {
    const url = new URL(endpoint as string);
    if (url.protocol !== 'http:' && url.protocol !== 'https:') throw new Error('not http');
  } catch {
    throw new UsageError(`--endpoint must be an http:// or https:// URL, got '${endpoint}'`);
  }
  return { mode: 'endpoint', endpoint: endpoint as string, region, connection, functionName };
};

// ---------------------------------------------------------------------------------------------
// Output

/** The rows as one table: check | result | detail. */
export const renderTable = (rows: readonly Row[]): string => {
  const header: Row = { check: 'check', result: 'result' as Result, detail: 'detail' };
  const width = (key: 'check' | 'result') =>
    Math.max(...[header, ...rows].map((row) => row[key].length));
  const [check, result] = [width('check'), width('result')];
  const line = (row: Row) =>
    `${row.check.padEnd(check)} | ${row.result.padEnd(result)} | ${row.detail}`.trimEnd();
  return [
    line(header),
    `${'-'.repeat(check)}-+-${'-'.repeat(result)}-+-${'-'.repeat(6)}`,
    ...rows.map(line),
  ].join('\n');
};

/** The closing line: the failures by name, or what passed. */
export const summary = (rows: readonly Row[], elapsedMs: number): string => {
  const seconds = (elapsedMs / 1000).toFixed(1);
  const named = (result: Result) =>
    rows.filter((row) => row.result === result).map((row) => row.check);
  const failed = named('FAIL');
  const notRunRows = named('not run');
  if (failed.length + notRunRows.length > 0) {
    return `smoke: FAILED: ${failed.join(', ') || 'none'}${notRunRows.length > 0 ? `; not run: ${notRunRows.join(', ')}` : ''} (${seconds} s)`;
  }
  const count = (result: Result) => named(result).length;
  const skipped = count('skipped (endpoint mode)');
  return `smoke: passed: ${count('ok')} ok, ${count('note')} note(s)${skipped ? `, ${skipped} skipped (endpoint mode)` : ''} (${seconds} s)`;
};

/** Any token seen, wherever it may have slipped into a detail, as `[token]`. */
const redact = (text: string, tokens: ReadonlySet<string>): string => {
  let out = text;
  for (const token of tokens) if (token.length > 0) out = out.split(token).join('[token]');
  return out;
};

// ---------------------------------------------------------------------------------------------
// Helpers

const ok = (check: string, detail: string): Row => ({ check, result: 'ok', detail });
const fail = (check: string, detail: string): Row => ({ check, result: 'FAIL', detail });
const note = (check: string, detail: string): Row => ({ check, result: 'note', detail });
const notRun = (check: string, detail: string): Row => ({ check, result: 'not run', detail });
const skipped = (check: string, detail: string): Row => ({
  check,
  result: 'skipped (endpoint mode)',
  detail,
});

/** One line of an error: its message, its code, and the system error under it (ECONNREFUSED). */
export const describeError = (error: unknown): string => {
  const parts: string[] = [];
  let current: unknown = error;
  for (let depth = 0; current && depth < 4; depth += 1) {
    const { message, code, name } = current as {
      message?: unknown;
      code?: unknown;
      name?: unknown;
    };
    const said = typeof message === 'string' && message !== '' ? message : String(name ?? '');
    const tagged = typeof code === 'string' && !said.includes(code) ? `${code}: ${said}` : said;
    if (tagged && !parts.some((part) => part.includes(tagged))) parts.push(tagged);
    current = (current as { cause?: unknown }).cause;
  }
  const line = parts.join(': ').replace(/\s+/g, ' ').trim();
  return line.length > 300 ? `${line.slice(0, 300)}…` : line || 'unknown error';
};

/** The AWS service error's name (`ResourceNotFoundException`, `ValidationError`), if any. */
const awsErrorName = (error: unknown): string | undefined => {
  const name = (error as { name?: unknown } | null)?.name;
  return typeof name === 'string' ? name : undefined;
};

const tokenDetail = (token: AccessToken): string =>
  `${token.accessToken.length} chars, digest ${tokenDigest(token.accessToken).slice(0, DIGEST_SHOWN)}…, expires in ${token.expiresIn} s`;

/** `true`/`false` or CloudFormation's `"true"`/`"false"`; undefined for anything else. */
const bool = (value: unknown): boolean | undefined =>
  value === true || value === 'true'
    ? true
    : value === false || value === 'false'
      ? false
      : undefined;

const onOff = (value: boolean | undefined) =>
  value === undefined ? 'unknown' : value ? 'on' : 'off';

/** `https://<id>.lambda-url.<region>.on.aws` carries its region (as the client reads it). */
const functionUrlRegion = (url: URL): string | undefined =>
  /\.lambda-url\.([a-z0-9-]+)\.on\.aws$/.exec(url.hostname)?.[1];

/** The region the SDK finds (AWS_REGION, the profile), or undefined. */
const sdkRegion = async (): Promise<string | undefined> => {
  const client = new LambdaClient({});
  try {
    return await client.config.region();
  } catch {
    return undefined;
  } finally {
    client.destroy();
  }
};

// ---------------------------------------------------------------------------------------------
// The broker's own answers: health, tokens, ready

interface BrokerTargets {
  /** The broker's base URL (Function URL, or the endpoint). */
  readonly url: string;
  /** Direct invoke: the transport options, or why there is none. */
  readonly invoke: TransportOptions | { readonly skipped: string } | { readonly notRun: string };
  /** How `ready` is asked: by direct invoke (a stage) or over HTTP (an endpoint). */
  readonly readyBy: 'invoke' | 'http';
  readonly region: string | undefined;
  readonly connection: string | undefined;
  readonly timeoutMs: number;
}

const HTTP_TOKEN = 'token over HTTP';
const INVOKE_TOKEN = 'token by direct invoke';
const FORGED = 'http event by direct invoke';

/**
 * What a direct invoker could send to claim a caller identity: the event a Function URL builds
 * (payload format 2.0), for `/health` (nothing to issue, nothing secret), naming
 * {@link FORGED_CALLER}.
 */
export const forgedEvent = () => ({
  version: '2.0',
  routeKey: '$default',
  rawPath: '/health',
  rawQueryString: '',
  headers: {},
  requestContext: {
    http: {
      method: 'GET',
      path: '/health',
      protocol: 'HTTP/1.1',
      sourceIp: '127.0.0.1',
      userAgent: 'token-broker-smoke',
    },
    authorizer: { iam: { userArn: FORGED_CALLER } },
  },
  isBase64Encoded: false,
});

/**
 * The forged event sent by direct invoke to `functionName`: answered 403 WRONG_QUALIFIER (the
 * broker serves HTTP requests only through the Function URL's alias) is ok; served, or answered
 * or failed otherwise, fails.
 */
const forgedCheck = async (
  target: { readonly functionName: string; readonly endpoint?: string | undefined },
  signing: Signing,
  timeoutMs: number,
): Promise<Row> => {
  if ('error' in signing) return notRun(FORGED, signing.error);
  const lambda = new LambdaClient({
    region: signing.region,
    credentials: signing.credentials,
    ...(target.endpoint ? { endpoint: target.endpoint } : {}),
    requestHandler: { requestTimeout: timeoutMs, connectionTimeout: timeoutMs },
  });
  const where = `to ${target.functionName}`;
  try {
    const answer = await lambda.send(
      new InvokeCommand({
        FunctionName: target.functionName,
        Payload: new TextEncoder().encode(JSON.stringify(forgedEvent())),
      }),
      { abortSignal: AbortSignal.timeout(timeoutMs) },
    );
    const text = new TextDecoder().decode(answer.Payload ?? new Uint8Array());
    let body:
      | { errorType?: unknown; errorMessage?: unknown; statusCode?: unknown; body?: unknown }
      | undefined;
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      body = undefined;
    }
    if (answer.FunctionError) {
      return fail(
        FORGED,
        `${where}: failed with ${String(body?.errorType ?? answer.FunctionError)} (a function error), not 403 WRONG_QUALIFIER: ${String(body?.errorMessage ?? '').slice(0, 200)}`,
      );
    }
    let code: unknown;
    try {
      code = (JSON.parse(String(body?.body)) as { error?: { code?: unknown } }).error?.code;
    } catch {
      code = undefined;
    }
    if (body?.statusCode === 403 && code === 'WRONG_QUALIFIER') {
      return ok(
        FORGED,
        `${where}, naming ${FORGED_CALLER}: refused (403 WRONG_QUALIFIER): only the Function URL's alias serves HTTP requests`,
      );
    }
    return fail(
      FORGED,
      body?.statusCode === 200
        ? `${where}: served (HTTP 200) as ${FORGED_CALLER}: a direct invoker can claim any caller identity (a release before issue 37, or BROKER_URL_QUALIFIER unset)`
        : `${where}: answered HTTP ${String(body?.statusCode ?? '?')}${code ? ` ${String(code)}` : ''}, not 403 WRONG_QUALIFIER`,
    );
  } catch (error) {
    return fail(FORGED, `${where}: ${describeError(error)}`);
  } finally {
    lambda.destroy();
  }
};

/** How requests to the broker's URL are signed: the region and credentials, or why none. */
type Signing =
  | {
      readonly region: string;
      readonly credentials: AwsCredentialIdentity | AwsCredentialIdentityProvider;
    }
  | { readonly error: string };

/**
 * The region and credentials to sign with, found as the client finds them: `--region`, the
 * Function URL's region, the SDK's chains. A broker on this machine (`npm start`) without them
 * gets the client's local defaults, said once; any other URL fails without them.
 */
const signingFor = async (
  base: URL,
  region: string | undefined,
  warn: (message: string) => void,
): Promise<Signing> => {
  const chain = defaultProvider();
  let credentialsError: unknown;
  const credentials = await chain().then(
    () => chain,
    (error: unknown) => {
      credentialsError = error;
      return undefined;
    },
  );
  const found = region ?? functionUrlRegion(base) ?? (await sdkRegion());
  const missing = [found ? '' : 'region', credentials ? '' : 'credentials'].filter(Boolean);
  if (missing.length === 0) {
    return { region: found as string, credentials: credentials as AwsCredentialIdentityProvider };
  }
  if (!isLoopback(base)) {
    return {
      error: `no AWS ${missing.join(' and no AWS ')} to sign requests to ${base.origin} with (set AWS_REGION or --region, AWS_PROFILE or credentials)${credentialsError ? `: ${describeError(credentialsError)}` : ''}`,
    };
  }
  warn(
    `${base.origin} is on this machine and no AWS ${missing.join(' or ')} ${missing.length > 1 ? 'are' : 'is'} configured: signing with the client's local defaults (${[found ? '' : `region ${LOCAL_DEFAULTS.region}`, credentials ? '' : 'placeholder credentials'].filter(Boolean).join(', ')}), which the local runtime accepts.`,
  );
  return {
    region: found ?? LOCAL_DEFAULTS.region,
    credentials: credentials ?? LOCAL_DEFAULTS.credentials,
  };
};

/** GET `<url>/health`, signed with SigV4 as the client signs (service `lambda`). */
const health = async (
  base: URL,
  signing: Signing,
  timeoutMs: number,
): Promise<{ row: Row; connections: readonly string[] }> => {
  if ('error' in signing) return { row: fail('health', signing.error), connections: [] };
  const path = `${base.pathname.replace(/\/+$/, '')}/health`;
  const signer = new SignatureV4({
    service: 'lambda',
    region: signing.region,
    credentials: signing.credentials,
    sha256: Hash.bind(null, 'sha256'),
  });
  try {
    const signed = await signer.sign({
      method: 'GET',
      protocol: base.protocol,
      hostname: base.hostname,
      ...(base.port ? { port: Number(base.port) } : {}),
      path,
      query: {},
      headers: { host: base.host, accept: 'application/json' },
    });
    const response = await fetch(new URL(path, base), {
      headers: signed.headers as Record<string, string>,
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
    });
    const text = await response.text();
    let body: { status?: unknown; connections?: unknown } | undefined;
    try {
      body = JSON.parse(text) as typeof body;
    } catch {
      body = undefined;
    }
    if (response.status !== 200 || body?.status !== 'ok') {
      return {
        row: fail(
          'health',
          `GET /health answered HTTP ${response.status}${body ? `: ${JSON.stringify(body).slice(0, 200)}` : ' without JSON'}`,
        ),
        connections: [],
      };
    }
    const connections = Array.isArray(body.connections)
      ? body.connections.filter((name): name is string => typeof name === 'string')
      : [];
    return {
      row: ok(
        'health',
        connections.length > 0
          ? `status ok; connections visible to this caller: ${connections.join(', ')}`
          : 'status ok; no connection visible to this caller (connections with `callers`)',
      ),
      connections,
    };
  } catch (error) {
    return {
      row: fail('health', `could not reach ${base.origin}: ${describeError(error)}`),
      connections: [],
    };
  }
};

const readyRow = (report: ReadinessReport, by: string): Row => {
  const names = Object.keys(report.connections);
  if (report.ready) {
    return ok('ready', `ready (${by}): ${names.join(', ')}`);
  }
  const why = Object.entries(report.connections)
    .filter(([, readiness]) => !readiness.ready)
    .map(([name, readiness]) => {
      const failed = [
        readiness.secret.status === 'failed' ? `secret ${readiness.secret.error.code}` : '',
        readiness.token.status === 'failed' ? `token ${readiness.token.error.code}` : '',
      ].filter(Boolean);
      return `${name} (${failed.join(', ') || 'not ready'})`;
    });
  return fail('ready', `not ready (${by}): ${why.join('; ')}`);
};

/** Health, a token each way, and ready. */
const brokerChecks = async (
  targets: BrokerTargets,
  warn: (message: string) => void,
  tokens: Set<string>,
): Promise<Row[]> => {
  const base = new URL(targets.url);
  const signing = await signingFor(base, targets.region, warn);
  const client = (transport: TransportOptions): TokenClient =>
    createTokenClient({ transport, timeoutMs: targets.timeoutMs, onWarning: warn });
  // The client's own HTTP transport, signing with what was found above (said once, there).
  const http = client({
    type: 'http',
    url: targets.url,
    ...('error' in signing ? {} : { region: signing.region, credentials: signing.credentials }),
  });
  const invoke = 'type' in targets.invoke ? client(targets.invoke) : undefined;

  const [healthy, ready] = await Promise.all([
    health(base, signing, targets.timeoutMs),
    (async (): Promise<{ row: Row; connections: readonly string[] }> => {
      const by = targets.readyBy === 'invoke' ? 'direct invoke' : 'GET /ready';
      const asker = targets.readyBy === 'invoke' ? invoke : http;
      if (!asker) return { row: notRun('ready', 'no direct invoke target'), connections: [] };
      try {
        const report = await asker.ready();
        return { row: readyRow(report, by), connections: Object.keys(report.connections) };
      } catch (error) {
        return { row: fail('ready', `${by}: ${describeError(error)}`), connections: [] };
      }
    })(),
  ]);

  const connection = targets.connection ?? healthy.connections[0] ?? ready.connections[0];
  let first: string | undefined;
  const getToken = async (check: string, tokenClient: TokenClient, how: string) => {
    if (connection === undefined) {
      return healthy.row.result === 'FAIL' && ready.row.result === 'FAIL'
        ? notRun(
            check,
            'no connection known: /health and ready failed (--connection <name> asks anyway)',
          )
        : fail(
            check,
            'no connection to ask for: /health and ready named none (pass --connection <name>)',
          );
    }
    try {
      const token = await tokenClient.getToken(connection);
      tokens.add(token.accessToken);
      if (!(token.accessToken.length > 0 && token.expiresIn > 0)) {
        return fail(check, `${connection} ${how}: an empty or expired token`);
      }
      const same =
        first === undefined
          ? ''
          : first === token.accessToken
            ? '; the same token'
            : '; another token';
      first ??= token.accessToken;
      return ok(check, `${connection} ${how}: ${tokenDetail(token)}${same}`);
    } catch (error) {
      return fail(check, `${connection} ${how}: ${describeError(error)}`);
    }
  };
  const overHttp = await getToken(HTTP_TOKEN, http, `over ${base.origin}`);
  let byInvoke: Row;
  let forged: Row;
  if ('skipped' in targets.invoke) {
    byInvoke = skipped(INVOKE_TOKEN, targets.invoke.skipped);
    forged = skipped(FORGED, targets.invoke.skipped);
  } else if ('notRun' in targets.invoke) {
    byInvoke = notRun(INVOKE_TOKEN, targets.invoke.notRun);
    forged = notRun(FORGED, targets.invoke.notRun);
  } else {
    const target = targets.invoke as { functionName: string; endpoint?: string };
    byInvoke = await getToken(INVOKE_TOKEN, invoke as TokenClient, `from ${target.functionName}`);
    forged = await forgedCheck(target, signing, targets.timeoutMs);
  }
  return [healthy.row, overHttp, byInvoke, forged, ready.row];
};

// ---------------------------------------------------------------------------------------------
// The stage in AWS: stack, alias, deployment, alarms, table

interface Declared {
  /** Alarm names the template declares; undefined when it could not be read. */
  readonly alarms: readonly string[] | undefined;
  /** The table's settings as the template declares them: this stack's own, or the global table. */
  readonly table:
    | {
        readonly kind: 'regional';
        readonly ttlAttribute: string | undefined;
        readonly pitr: boolean | undefined;
        readonly deletionProtection: boolean | undefined;
      }
    | { readonly kind: 'global' }
    | undefined;
}

interface TemplateResource {
  readonly Type?: string;
  readonly Properties?: Record<string, unknown>;
}

/** What the stack's template declares of alarms and table. */
export const declaredIn = (templateBody: string | undefined): Declared => {
  let template: { Resources?: Record<string, TemplateResource> };
  try {
    template = JSON.parse(templateBody ?? '') as typeof template;
  } catch {
    return { alarms: undefined, table: undefined };
  }
  const resources = Object.values(template.Resources ?? {});
  const alarms = resources
    .filter((resource) => resource.Type === 'AWS::CloudWatch::Alarm')
    .map((resource) => resource.Properties?.AlarmName)
    .filter((name): name is string => typeof name === 'string');
  const table = resources.find((resource) => resource.Type === 'AWS::DynamoDB::Table');
  if (!table) return { alarms, table: { kind: 'global' } };
  const properties = table.Properties ?? {};
  const ttl = properties.TimeToLiveSpecification as
    | { AttributeName?: unknown; Enabled?: unknown }
    | undefined;
  const pitr = properties.PointInTimeRecoverySpecification as
    | { PointInTimeRecoveryEnabled?: unknown }
    | undefined;
  return {
    alarms,
    table: {
      kind: 'regional',
      ttlAttribute:
        bool(ttl?.Enabled) && typeof ttl?.AttributeName === 'string'
          ? ttl.AttributeName
          : undefined,
      pitr: bool(pitr?.PointInTimeRecoveryEnabled) ?? false,
      deletionProtection: bool(properties.DeletionProtectionEnabled) ?? false,
    },
  };
};

const STACK_DONE = /^(CREATE|UPDATE|IMPORT)_COMPLETE$/;

const stackRow = (stack: Stack, missing: readonly string[]): Row => {
  const status = String(stack.StackStatus);
  const when = (stack.LastUpdatedTime ?? stack.CreationTime)?.toISOString();
  const what = `${stack.StackName} ${status}${when ? ` (${when})` : ''}`;
  if (missing.length > 0) return fail('stack', `${what}; outputs missing: ${missing.join(', ')}`);
  if (status === 'UPDATE_COMPLETE_CLEANUP_IN_PROGRESS') return ok('stack', what);
  if (!STACK_DONE.test(status)) {
    return fail(
      'stack',
      `${what}: ${/ROLLBACK/.test(status) ? 'the last deploy rolled back' : /IN_PROGRESS/.test(status) ? 'a deploy is under way' : 'not deployed'}`,
    );
  }
  return ok('stack', what);
};

const aliasCheck = async (
  lambda: LambdaClient,
  functionName: string,
  name: string,
): Promise<Row> => {
  const check = `alias ${name}`;
  try {
    const [alias, latest] = await Promise.all([
      lambda.send(new GetAliasCommand({ FunctionName: functionName, Name: name })),
      (async () => {
        let highest = 0;
        for await (const page of paginateListVersionsByFunction(
          { client: lambda },
          { FunctionName: functionName },
        )) {
          for (const { Version } of page.Versions ?? []) {
            const number = Number(Version);
            if (Number.isInteger(number) && number > highest) highest = number;
          }
        }
        return highest;
      })(),
    ]);
    const at = alias.FunctionVersion;
    const weights = Object.entries(alias.RoutingConfig?.AdditionalVersionWeights ?? {});
    if (latest === 0) return fail(check, `${name} → ${at}; the function has no published version`);
    if (weights.length > 0) {
      const shifting = weights
        .map(([version, weight]) => `${Math.round(weight * 100)} % to ${version}`)
        .join(', ');
      return fail(check, `${name} → ${at}, shifting ${shifting}: a deployment is under way`);
    }
    if (at !== String(latest)) {
      return fail(
        check,
        `${name} → ${at}, but ${latest} is the latest published version (rolled back, or not shifted yet)`,
      );
    }
    return ok(check, `${name} → ${at}, the latest published version`);
  } catch (error) {
    return fail(check, `${functionName}: ${describeError(error)}`);
  }
};

const deploymentCheck = async (
  codedeploy: CodeDeployClient,
  application: string,
  group: string,
  alias: string,
): Promise<Row> => {
  const check = `deployment ${alias}`;
  try {
    const { deploymentGroupInfo: info } = await codedeploy.send(
      new GetDeploymentGroupCommand({ applicationName: application, deploymentGroupName: group }),
    );
    const last = info?.lastAttemptedDeployment;
    if (!last?.deploymentId) {
      return note(
        check,
        `${group}: none yet (a stack's first deploy creates ${alias} without CodeDeploy)`,
      );
    }
    const when = (last.endTime ?? last.createTime)?.toISOString();
    const what = `${group}: last ${last.deploymentId} ${last.status}${when ? ` (${when})` : ''}`;
    if (last.status === 'Succeeded') return ok(check, what);
    const succeeded = info?.lastSuccessfulDeployment?.deploymentId;
    return fail(
      check,
      `${what}${succeeded ? `; last succeeded: ${succeeded}` : ''}${last.status === 'Failed' || last.status === 'Stopped' ? ' (rolled back: see the deployment in CodeDeploy)' : ''}`,
    );
  } catch (error) {
    return fail(check, `${group}: ${describeError(error)}`);
  }
};

const alarmChecks = async (
  cloudwatch: CloudWatchClient,
  prefix: string,
  declared: readonly string[] | undefined,
): Promise<Row[]> => {
  const found = new Map<string, MetricAlarm | CompositeAlarm>();
  try {
    for await (const page of paginateDescribeAlarms(
      { client: cloudwatch },
      { AlarmNamePrefix: prefix, AlarmTypes: ['MetricAlarm', 'CompositeAlarm'] },
    )) {
      for (const alarm of [...(page.MetricAlarms ?? []), ...(page.CompositeAlarms ?? [])]) {
        if (alarm.AlarmName) found.set(alarm.AlarmName, alarm);
      }
    }
  } catch (error) {
    return [fail('alarms', `${prefix}*: ${describeError(error)}`)];
  }
  const names = [...new Set([...(declared ?? []), ...found.keys()])];
  if (names.length === 0) return [fail('alarms', `no alarm named ${prefix}*`)];
  return names.map((name) => {
    const check = `alarm ${name.startsWith(prefix) ? name.slice(prefix.length) : name}`;
    const alarm = found.get(name);
    if (!alarm) return fail(check, `${name}: missing (the stack declares it)`);
    const since = alarm.StateUpdatedTimestamp?.toISOString();
    const state = `${alarm.StateValue}${since ? ` since ${since}` : ''}`;
    if (alarm.StateValue === 'OK') return ok(check, state);
    if (alarm.StateValue === 'INSUFFICIENT_DATA') {
      return note(check, `${state}: no data yet (a new stack, or a metric nothing emitted)`);
    }
    const reason = (alarm.StateReason ?? '').replace(/\s+/g, ' ');
    return fail(check, `${state}${reason ? `: ${reason.slice(0, 200)}` : ''}`);
  });
};

const tableChecks = async (
  dynamodb: DynamoDBClient,
  tableName: string,
  declared: Declared['table'],
): Promise<Row[]> => {
  const [ttl, backups, table] = await Promise.allSettled([
    dynamodb.send(new DescribeTimeToLiveCommand({ TableName: tableName })),
    dynamodb.send(new DescribeContinuousBackupsCommand({ TableName: tableName })),
    dynamodb.send(new DescribeTableCommand({ TableName: tableName })),
  ]);
  const rows: Row[] = [];
  const global = declared?.kind === 'global';
  const regional = declared?.kind === 'regional' ? declared : undefined;

  // TTL: clean-up of the regional table on `ttl`; none on a multi-Region strongly consistent one.
  if (ttl.status === 'rejected')
    rows.push(fail('table ttl', `${tableName}: ${describeError(ttl.reason)}`));
  else {
    const status = ttl.value.TimeToLiveDescription?.TimeToLiveStatus ?? 'DISABLED';
    const attribute = ttl.value.TimeToLiveDescription?.AttributeName;
    const now = `${tableName}: ${status}${attribute ? ` on '${attribute}'` : ''}`;
    const expected = regional?.ttlAttribute ?? (global ? undefined : 'ttl');
    if (expected === undefined) {
      rows.push(
        global
          ? note('table ttl', `${now} (a multi-Region strongly consistent table has no TTL)`)
          : note('table ttl', `${now} (the stack declares none)`),
      );
    } else if (status === 'ENABLED' && attribute === expected) rows.push(ok('table ttl', now));
    else if (status === 'ENABLING' && attribute === expected) {
      rows.push(note('table ttl', `${now}: being turned on`));
    } else rows.push(fail('table ttl', `${now}; expected ENABLED on '${expected}'`));
  }

  // Point-in-time recovery: as the stack declares (the regional table is a cache, off by
  // design: infra/table.yml); always on for a global table (infra/global-table.yml).
  if (backups.status === 'rejected') {
    rows.push(fail('table pitr', `${tableName}: ${describeError(backups.reason)}`));
  } else {
    const status =
      backups.value.ContinuousBackupsDescription?.PointInTimeRecoveryDescription
        ?.PointInTimeRecoveryStatus ?? 'DISABLED';
    const on = status === 'ENABLED';
    const expected = global ? true : regional?.pitr;
    const now = `${tableName}: point-in-time recovery ${status}`;
    if (expected === undefined) rows.push(note('table pitr', `${now} (not declared)`));
    else if (on === expected) {
      rows.push(
        ok(
          'table pitr',
          `${now}, as ${global ? 'infra/global-table.yml declares' : `the stack declares (${onOff(expected)})`}`,
        ),
      );
    } else if (expected) {
      rows.push(
        fail('table pitr', `${now}; the ${global ? 'global table' : 'stack'} declares it on`),
      );
    } else rows.push(note('table pitr', `${now}, though the stack declares it off`));
  }

  // Deletion protection: as the stage declares (`deletionProtection`); a global table's is on
  // unless its stack was deployed with DeletionProtection=false (a short-lived test stage).
  if (table.status === 'rejected') {
    rows.push(fail('table deletion protection', `${tableName}: ${describeError(table.reason)}`));
  } else {
    const on = table.value.Table?.DeletionProtectionEnabled === true;
    const state = `${tableName} ${table.value.Table?.TableStatus ?? '?'}: deletion protection ${onOff(on)}`;
    const check = 'table deletion protection';
    if (global) {
      rows.push(
        on
          ? ok(check, state)
          : note(
              check,
              `${state}: the global table stack's DeletionProtection=false (short-lived test stages only)`,
            ),
      );
    } else if (regional?.deletionProtection === undefined) rows.push(note(check, state));
    else if (on === regional.deletionProtection) {
      rows.push(ok(check, `${state}, as the stage declares (deletionProtection)`));
    } else if (regional.deletionProtection) {
      rows.push(
        fail(check, `${state}; the stage declares it on (turned off outside CloudFormation?)`),
      );
    } else rows.push(note(check, `${state}, though the stage declares it off`));
  }
  return rows;
};

const AWS_ONLY = [
  ['stack', 'the stack token-broker-<stage> and its outputs'],
  ['alias live', 'live on the latest published version'],
  ['alias url', 'url on the latest published version'],
  ['deployment live', "live's deployment group's last deployment"],
  ['deployment url', "url's deployment group's last deployment"],
  ['alarms', 'the alarms token-broker-<stage>-* and their states'],
  ['table ttl', "the table's TTL"],
  ['table pitr', "the table's point-in-time recovery"],
  ['table deletion protection', "the table's deletion protection"],
] as const;

const OUTPUTS = [
  'BrokerLiveAliasArn',
  'BrokerUrlAliasArn',
  'BrokerDeployApplicationName',
  'BrokerDeploymentGroupName',
  'BrokerUrlDeploymentGroupName',
  'BrokerLambdaFunctionUrl',
];

const stageChecks = async (
  options: Extract<SmokeOptions, { mode: 'stage' }>,
  warn: (message: string) => void,
  tokens: Set<string>,
): Promise<Row[]> => {
  const timeoutMs = options.timeoutMs ?? CALL_TIMEOUT_MS;
  const region = options.region ?? (await sdkRegion());
  if (!region) {
    throw new SettingsError(
      'No AWS region to find the stage in: pass --region, or set AWS_REGION or AWS_PROFILE (a profile with a region).',
    );
  }
  await defaultProvider()().catch((error: unknown) => {
    throw new SettingsError(
      `No AWS credentials to read the stage with: set AWS_PROFILE, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or run where a role provides them (${describeError(error)}).`,
    );
  });
  // Each call's limit: no AWS call of the smoke test waits longer than this.
  const settings = {
    region,
    requestHandler: { requestTimeout: timeoutMs, connectionTimeout: timeoutMs },
  };
  const stackName = `${SERVICE}-${options.stage}`;
  const cloudformation = new CloudFormationClient(settings);
  const clients = {
    lambda: new LambdaClient(settings),
    codedeploy: new CodeDeployClient(settings),
    cloudwatch: new CloudWatchClient(settings),
    dynamodb: new DynamoDBClient(settings),
  };
  try {
    let stack: Stack | undefined;
    let templateBody: string | undefined;
    try {
      const [described, template] = await Promise.all([
        cloudformation.send(new DescribeStacksCommand({ StackName: stackName }), {
          abortSignal: AbortSignal.timeout(timeoutMs),
        }),
        cloudformation
          .send(new GetTemplateCommand({ StackName: stackName, TemplateStage: 'Original' }), {
            abortSignal: AbortSignal.timeout(timeoutMs),
          })
          .catch(() => undefined),
      ]);
      stack = described.Stacks?.[0];
      templateBody = template?.TemplateBody;
    } catch (error) {
      const missing =
        awsErrorName(error) === 'ValidationError' && /does not exist/.test(describeError(error));
      const why = missing
        ? `no stack ${stackName} in ${region} (deployed with --stage ${options.stage} --region ${region}?)`
        : `${stackName} in ${region}: ${describeError(error)}`;
      return [
        fail('stack', why),
        ...[
          'health',
          HTTP_TOKEN,
          INVOKE_TOKEN,
          FORGED,
          'ready',
          ...AWS_ONLY.slice(1).map(([c]) => c),
        ].map((check) => notRun(check, 'needs the stack')),
      ];
    }
    if (!stack) return [fail('stack', `${stackName}: DescribeStacks named no stack`)];
    const outputs = new Map(
      (stack.Outputs ?? []).map(({ OutputKey, OutputValue }) => [OutputKey, OutputValue]),
    );
    const missing = OUTPUTS.filter((key) => !outputs.get(key));
    const declared = declaredIn(templateBody);
    const rows: Row[] = [stackRow(stack, missing)];
    if (templateBody === undefined || declared.alarms === undefined) {
      rows.push(
        note(
          'template',
          `${stackName}'s template could not be read as JSON: nothing compared with it`,
        ),
      );
    }
    const aliasArn = outputs.get('BrokerLiveAliasArn');
    const url = outputs.get('BrokerLambdaFunctionUrl');
    const application = outputs.get('BrokerDeployApplicationName');
    const groups = [
      [ALIAS, outputs.get('BrokerDeploymentGroupName'), 'BrokerDeploymentGroupName'],
      [URL_ALIAS, outputs.get('BrokerUrlDeploymentGroupName'), 'BrokerUrlDeploymentGroupName'],
    ] as const;
    const tableName = outputs.get('TokenTableName');
    const functionName = aliasArn ? /:function:([^:]+)/.exec(aliasArn)?.[1] : undefined;

    const broker = url
      ? brokerChecks(
          {
            url,
            invoke: aliasArn
              ? { type: 'lambda', functionName: aliasArn }
              : { notRun: 'no BrokerLiveAliasArn output' },
            readyBy: 'invoke',
            region: options.region,
            connection: options.connection,
            timeoutMs,
          },
          warn,
          tokens,
        )
      : Promise.resolve(
          ['health', HTTP_TOKEN, INVOKE_TOKEN, FORGED, 'ready'].map((check) =>
            notRun(check, 'no BrokerLambdaFunctionUrl output'),
          ),
        );
    const results = await Promise.all([
      broker,
      functionName
        ? Promise.all(
            [ALIAS, URL_ALIAS].map((name) => aliasCheck(clients.lambda, functionName, name)),
          )
        : [ALIAS, URL_ALIAS].map((name) => notRun(`alias ${name}`, 'no BrokerLiveAliasArn output')),
      Promise.all(
        groups.map(([alias, group, output]) =>
          group && application
            ? deploymentCheck(clients.codedeploy, application, group, alias)
            : notRun(
                `deployment ${alias}`,
                `no ${application ? output : 'BrokerDeployApplicationName'} output`,
              ),
        ),
      ),
      alarmChecks(clients.cloudwatch, `${SERVICE}-${options.stage}-`, declared.alarms),
      tableName
        ? tableChecks(clients.dynamodb, tableName, declared.table)
        : [fail('table', `${stackName} has no TokenTableName output`)],
    ]);
    return [...rows, ...results.flat()];
  } finally {
    cloudformation.destroy();
    for (const client of Object.values(clients)) client.destroy();
  }
};

const endpointChecks = async (
  options: Extract<SmokeOptions, { mode: 'endpoint' }>,
  warn: (message: string) => void,
  tokens: Set<string>,
): Promise<Row[]> => {
  const rows = await brokerChecks(
    {
      url: options.endpoint,
      invoke: options.functionName
        ? {
            type: 'lambda',
            functionName: options.functionName,
            endpoint: new URL(options.endpoint).origin,
            ...(options.region ? { region: options.region } : {}),
          }
        : {
            skipped:
              'direct invoke of the alias live (--function <name>: the Invoke API at the URL)',
          },
      readyBy: 'http',
      region: options.region,
      connection: options.connection,
      timeoutMs: options.timeoutMs ?? CALL_TIMEOUT_MS,
    },
    warn,
    tokens,
  );
  return [
    skipped('stack', AWS_ONLY[0][1]),
    ...rows,
    ...AWS_ONLY.slice(1).map(([check, what]) => skipped(check, what)),
  ];
};

/** Every check, in the table's order. */
export const runSmoke = async (
  options: SmokeOptions,
  warn: (message: string) => void = () => undefined,
): Promise<{ rows: Row[]; tokens: ReadonlySet<string> }> => {
  const tokens = new Set<string>();
  const rows =
    options.mode === 'stage'
      ? await stageChecks(options, warn, tokens)
      : await endpointChecks(options, warn, tokens);
  return {
    rows: rows.map((row) => ({ ...row, detail: redact(row.detail, tokens) })),
    tokens,
  };
};

export interface SmokeIo {
  readonly stdout: (text: string) => void;
  readonly stderr: (text: string) => void;
  readonly now?: () => number;
}

/** The command: prints the table and the closing line; the exit code. */
export const main = async (
  argv: readonly string[],
  io: SmokeIo = {
    stdout: (text) => process.stdout.write(text),
    stderr: (text) => process.stderr.write(text),
  },
): Promise<number> => {
  const now = io.now ?? (() => performance.now());
  let options: SmokeOptions | 'help';
  try {
    options = parseSmokeArgs(argv);
  } catch (error) {
    io.stderr(`${(error as Error).message}\n${USAGE}\n`);
    return 2;
  }
  if (options === 'help') {
    io.stdout(`${USAGE}\n`);
    return 0;
  }
  const started = now();
  const warnings = new Set<string>();
  let outcome: Awaited<ReturnType<typeof runSmoke>>;
  try {
    outcome = await runSmoke(options, (message) => warnings.add(message));
  } catch (error) {
    if (!(error instanceof SettingsError)) throw error;
    io.stderr(`${error.message}\n`);
    return 2;
  }
  const { rows, tokens } = outcome;
  for (const warning of warnings) io.stderr(`note: ${redact(warning, tokens)}\n`);
  const target =
    options.mode === 'stage'
      ? `stage ${options.stage}${options.region ? ` in ${options.region}` : ''}`
      : options.endpoint;
  io.stdout(
    `Smoke test of ${target}\n\n${renderTable(rows)}\n\n${summary(rows, now() - started)}\n`,
  );
  return rows.some((row) => row.result === 'FAIL' || row.result === 'not run') ? 1 : 0;
};
