/**
 * `npm run smoke` (issue 37): against the local runtime as `npm start` runs it (the process
 * tier's build, a process on port 0), and then stopped; and `--stage` against a stage as AWS
 * shows it, from loopback stand-ins speaking each service's protocol to the real SDK clients
 * (test/support/aws-stage-stub.ts), all good and then with one thing wrong at a time.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import {
  FORGED_CALLER,
  main,
  parseSmokeArgs,
  type Row,
  renderTable,
  SERVICE,
  UsageError,
} from '../infra/smoke.js';
import { tokenDigest } from '../lib/broker/types.js';
import { type StageStub, type StubStage, startStageStub } from './support/aws-stage-stub.js';
import { type Build, root, sharedBuild } from './support/build.js';

/** The table's rows, as printed: check | result | detail. */
const tableOf = (stdout: string): Row[] =>
  stdout
    .split('\n')
    .filter((line) => / \| /.test(line) && !line.startsWith('check '))
    .map((line) => {
      const [check = '', result = '', ...detail] = line.split(' | ');
      return { check: check.trim(), result: result.trim(), detail: detail.join(' | ') } as Row;
    });

const rowOf = (rows: readonly Row[], check: string): Row => {
  const row = rows.find((r) => r.check === check);
  if (!row) throw new Error(`no row '${check}' in ${JSON.stringify(rows)}`);
  return row;
};

/** The checks in the order the table prints them: those before the alarm rows, and after. */
const CHECKS_BEFORE_ALARMS = [
  'stack',
  'health',
  'token over HTTP',
  'token by direct invoke',
  'http event by direct invoke',
  'ready',
  'alias live',
  'alias url',
  'deployment live',
  'deployment url',
];
const TABLE_CHECKS = ['table ttl', 'table pitr', 'table deletion protection'];

/** No AWS settings of this machine: what a developer without any has. */
const BARE_ENV = {
  PATH: process.env.PATH ?? '',
  HOME: process.env.HOME ?? '',
  AWS_CONFIG_FILE: '/nonexistent/aws-config',
  AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
  AWS_EC2_METADATA_DISABLED: 'true',
};

/** `npm run smoke -- <args>` as a process: scripts/smoke.mjs, from the repository root. */
const smokeCli = (args: readonly string[], env: Record<string, string> = BARE_ENV) =>
  new Promise<{ code: number | null; stdout: string; stderr: string }>((done) => {
    const child = spawn(process.execPath, [join(root, 'scripts/smoke.mjs'), ...args], {
      cwd: root,
      env,
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let stdout = '';
    let stderr = '';
    child.stdout.on('data', (chunk) => {
      stdout += chunk;
    });
    child.stderr.on('data', (chunk) => {
      stderr += chunk;
    });
    child.once('exit', (code) => done({ code, stdout, stderr }));
  });

describe('npm run smoke -- --endpoint: against the local runtime', () => {
  let build: Build;
  let child: ChildProcess;
  let url: string;

  beforeAll(async () => {
    build = sharedBuild();
    child = spawn(process.execPath, [build.start], {
      env: { ...BARE_ENV, PORT: '0', BROKER_LOCAL_SCHEDULE_SECONDS: '0' },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    let output = '';
    url = await new Promise<string>((done, fail) => {
      child.stdout?.on('data', (chunk: Buffer) => {
        output += chunk.toString();
        const match = /Token broker\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (match?.[1] && output.includes('Ctrl-C')) done(match[1]);
      });
      child.once('exit', (code) => fail(new Error(`npm start exited ${code}: ${output}`)));
    });
  }, 60_000);

  afterAll(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    }
  });

  it('passes: health, a token over HTTP and by direct invoke, an HTTP-shaped direct invoke refused, ready; AWS-only checks skipped; no token printed', async () => {
    const { code, stdout, stderr } = await smokeCli([
      '--endpoint',
      url,
      '--function',
      'token-broker',
    ]);
    expect(code, stdout + stderr).toBe(0);
    const rows = tableOf(stdout);
    expect(rows.map((row) => row.check)).toEqual([
      ...CHECKS_BEFORE_ALARMS,
      'alarms',
      ...TABLE_CHECKS,
    ]);
    for (const check of [
      'health',
      'token over HTTP',
      'token by direct invoke',
      'http event by direct invoke',
      'ready',
    ]) {
      expect(rowOf(rows, check).result, check).toBe('ok');
    }
    // npm start serves HTTP requests only through its URL's alias, as the stack (issue 37).
    expect(rowOf(rows, 'http event by direct invoke').detail).toBe(
      `to token-broker, naming ${FORGED_CALLER}: refused (403 WRONG_QUALIFIER): only the Function URL's alias serves HTTP requests`,
    );
    for (const check of [
      'stack',
      'alias live',
      'alias url',
      'deployment live',
      'deployment url',
      'alarms',
      'table pitr',
    ]) {
      expect(rowOf(rows, check).result).toBe('skipped (endpoint mode)');
    }
    expect(rowOf(rows, 'health').detail).toContain('demo-v3, demo-legacy');
    expect(rowOf(rows, 'ready').detail).toBe('ready (GET /ready): demo-v3, demo-legacy');
    expect(stdout).toMatch(/smoke: passed: 5 ok, 0 note\(s\), 9 skipped \(endpoint mode\)/);
    // The token the broker serves now (the one the smoke test got: no refresh in between) is
    // nowhere in what it printed; its digest's first characters are.
    const { accessToken } = (await (await fetch(`${url}/tokens/demo-v3`)).json()) as {
      accessToken: string;
    };
    expect(accessToken.length).toBeGreaterThan(8);
    expect(stdout + stderr).not.toContain(accessToken);
    const digest = tokenDigest(accessToken).slice(0, 12);
    expect(rowOf(rows, 'token over HTTP').detail).toBe(
      `demo-v3 over ${url}: ${accessToken.length} chars, digest ${digest}…, expires in ${/expires in (\d+) s/.exec(rowOf(rows, 'token over HTTP').detail)?.[1]} s`,
    );
    expect(rowOf(rows, 'token by direct invoke').detail).toContain(`digest ${digest}…`);
    expect(rowOf(rows, 'token by direct invoke').detail).toContain('; the same token');
  }, 60_000);

  it('a stopped one: exit 1, each failure named', async () => {
    const exited = new Promise((done) => child.once('exit', done));
    child.kill('SIGTERM');
    await exited;
    const { code, stdout } = await smokeCli(['--endpoint', url]);
    expect(code).toBe(1);
    const rows = tableOf(stdout);
    expect(rowOf(rows, 'health')).toMatchObject({ result: 'FAIL' });
    expect(rowOf(rows, 'health').detail).toContain('ECONNREFUSED');
    expect(rowOf(rows, 'ready').result).toBe('FAIL');
    expect(rowOf(rows, 'token over HTTP').result).toBe('not run');
    expect(rowOf(rows, 'token by direct invoke').result).toBe('skipped (endpoint mode)');
    expect(rowOf(rows, 'http event by direct invoke').result).toBe('skipped (endpoint mode)');
    expect(stdout).toMatch(/smoke: FAILED: health, ready; not run: token over HTTP \(/);
    // Told the connection, it asks, each way, and each fails for the reason.
    const named = await smokeCli([
      '--endpoint',
      url,
      '--connection',
      'demo-v3',
      '--function',
      'token-broker',
    ]);
    expect(named.code).toBe(1);
    const tokenRows = tableOf(named.stdout).filter((row) => row.check.startsWith('token '));
    expect(tokenRows.map((row) => row.result)).toEqual(['FAIL', 'FAIL']);
    for (const row of tokenRows) expect(row.detail).toContain('ECONNREFUSED');
    expect(rowOf(tableOf(named.stdout), 'http event by direct invoke').detail).toContain(
      'ECONNREFUSED',
    );
    expect(named.stdout).toMatch(
      /smoke: FAILED: health, token over HTTP, token by direct invoke, http event by direct invoke, ready \(/,
    );
  }, 60_000);
});

// ---------------------------------------------------------------------------------------------

const TOKEN = 'stub-access-token-4f1c2e9a7b3d';
/** The dev stage's packaged template, as `npm test` keeps it (test/infra.test.ts). */
const devTemplate = () =>
  JSON.parse(
    readFileSync(join(root, 'test/__snapshots__/single-region-dev.template.json.snap'), 'utf8'),
  ) as { Resources: Record<string, { Type: string; Properties: Record<string, unknown> }> };
const alarmNames = (template: ReturnType<typeof devTemplate>) =>
  Object.values(template.Resources)
    .filter((resource) => resource.Type === 'AWS::CloudWatch::Alarm')
    .map((resource) => String(resource.Properties.AlarmName));

/** A dev stage after a good deploy: everything as its template declares. */
const goodStage = (): StubStage => {
  const template = devTemplate();
  return {
    stage: 'dev',
    region: 'eu-west-1',
    account: '111122223333',
    stackStatus: 'UPDATE_COMPLETE',
    template,
    aliasVersion: '5',
    urlAliasVersion: '5',
    versions: 5,
    routing: undefined,
    lastDeployment: { id: 'd-ABCDEF123', status: 'Succeeded' },
    urlLastDeployment: { id: 'd-ABCDEF124', status: 'Succeeded' },
    servesForgedEvents: false,
    alarms: Object.fromEntries(alarmNames(template).map((name) => [name, { state: 'OK' }])),
    table: {
      name: 'token-broker-dev-TokenTable-ABC123',
      ttl: { status: 'ENABLED', attribute: 'ttl' },
      pitr: 'DISABLED',
      deletionProtection: false,
    },
    connections: ['sandbox'],
    ready: true,
    token: TOKEN,
  };
};

describe('npm run smoke -- --stage: against AWS stand-ins', () => {
  let stub: StageStub;
  const saved = { ...process.env };

  beforeAll(async () => {
    stub = await startStageStub(goodStage());
    for (const key of Object.keys(process.env)) if (key.startsWith('AWS_')) delete process.env[key];
    Object.assign(process.env, {
      ...stub.env,
      AWS_REGION: 'eu-west-1',
      AWS_ACCESS_KEY_ID: 'AKIASTUBSTUBSTUB',
      AWS_SECRET_ACCESS_KEY: 'stub-secret',
      AWS_CONFIG_FILE: '/nonexistent/aws-config',
      AWS_SHARED_CREDENTIALS_FILE: '/nonexistent/aws-credentials',
      AWS_EC2_METADATA_DISABLED: 'true',
    });
  });
  afterAll(async () => {
    await stub.close();
    for (const key of Object.keys(process.env)) delete process.env[key];
    Object.assign(process.env, saved);
  });
  beforeEach(() => {
    Object.assign(stub.stage, goodStage());
    stub.calls.length = 0;
    stub.urlAuthorizations.length = 0;
    stub.invoked.length = 0;
  });

  /** The smoke test of stage dev, in this process: exit code, rows, and all it printed. */
  const smoke = async (args: readonly string[] = ['--stage', 'dev']) => {
    let stdout = '';
    let stderr = '';
    const code = await main(args, {
      stdout: (text) => {
        stdout += text;
      },
      stderr: (text) => {
        stderr += text;
      },
    });
    return { code, rows: tableOf(stdout), stdout, stderr };
  };

  it('all good: exit 0, every check ok, the token neither printed nor fetched unsigned', async () => {
    const { code, rows, stdout, stderr } = await smoke();
    expect(code, stdout).toBe(0);
    const failed = rows.filter((row) => row.result !== 'ok');
    expect(failed).toEqual([]);
    expect(rows.map((row) => row.check)).toEqual([
      ...CHECKS_BEFORE_ALARMS,
      ...alarmNames(devTemplate()).map((name) => `alarm ${name.replace('token-broker-dev-', '')}`),
      ...TABLE_CHECKS,
    ]);
    expect(rowOf(rows, 'stack').detail).toBe(
      'token-broker-dev UPDATE_COMPLETE (2026-11-27T10:00:00.000Z)',
    );
    expect(rowOf(rows, 'alias live').detail).toBe('live → 5, the latest published version');
    expect(rowOf(rows, 'alias url').detail).toBe('url → 5, the latest published version');
    expect(rowOf(rows, 'deployment url').detail).toMatch(
      /^token-broker-dev-url: last d-ABCDEF124 Succeeded/,
    );
    expect(rowOf(rows, 'http event by direct invoke').detail).toBe(
      `to arn:aws:lambda:eu-west-1:111122223333:function:token-broker-dev-broker:live, naming ${FORGED_CALLER}: refused (403 WRONG_QUALIFIER): only the Function URL's alias serves HTTP requests`,
    );
    expect(rowOf(rows, 'table pitr').detail).toContain('DISABLED, as the stack declares (off)');
    expect(rowOf(rows, 'table deletion protection').detail).toContain('off, as the stage declares');
    expect(stdout + stderr).not.toContain(TOKEN);
    expect(rowOf(rows, 'token over HTTP').detail).toContain(
      `digest ${tokenDigest(TOKEN).slice(0, 12)}…`,
    );
    // Through the alias: the Function URL (each request signed for Lambda, in the stage's
    // region) and the :live ARN.
    expect(stub.urlAuthorizations.length).toBeGreaterThanOrEqual(2);
    for (const authorization of stub.urlAuthorizations) {
      expect(authorization).toMatch(
        /^AWS4-HMAC-SHA256 Credential=AKIASTUBSTUBSTUB\/\d{8}\/eu-west-1\/lambda\/aws4_request/,
      );
    }
    expect(new Set(stub.invoked)).toEqual(
      new Set(['arn:aws:lambda:eu-west-1:111122223333:function:token-broker-dev-broker:live']),
    );
    expect(stub.calls).toEqual(
      expect.arrayContaining([
        'CloudFormation.DescribeStacks',
        'CloudFormation.GetTemplate',
        'FunctionURL.GET /health',
        'FunctionURL.GET /tokens/sandbox',
        'Lambda.Invoke',
        'Lambda.GetAlias',
        'Lambda.ListVersionsByFunction',
        'CodeDeploy.GetDeploymentGroup',
        'GraniteServiceVersion.DescribeAlarms',
        'DynamoDB.DescribeTimeToLive',
        'DynamoDB.DescribeContinuousBackups',
        'DynamoDB.DescribeTable',
      ]),
    );
    // Every page of versions was read (two a page), for each alias: 5 is on the third.
    expect(stub.calls.filter((call) => call === 'Lambda.ListVersionsByFunction')).toHaveLength(6);
    expect(stub.calls.filter((call) => call === 'CodeDeploy.GetDeploymentGroup')).toHaveLength(2);
  });

  it.each<[string, (stage: StubStage) => void, string, RegExp]>([
    [
      'live on an older version',
      (stage) => {
        stage.aliasVersion = '4';
      },
      'alias live',
      /^live → 4, but 5 is the latest published version/,
    ],
    [
      'live still shifting',
      (stage) => {
        stage.aliasVersion = '4';
        stage.routing = { '5': 0.1 };
      },
      'alias live',
      /^live → 4, shifting 10 % to 5: a deployment is under way$/,
    ],
    [
      'url on an older version (its canary rolled back)',
      (stage) => {
        stage.urlAliasVersion = '4';
      },
      'alias url',
      /^url → 4, but 5 is the latest published version/,
    ],
    [
      'url’s last deployment rolled back',
      (stage) => {
        stage.urlLastDeployment = { id: 'd-URL', status: 'Stopped' };
      },
      'deployment url',
      /^token-broker-dev-url: last d-URL Stopped .*rolled back/,
    ],
    [
      'live serves an HTTP-shaped direct invoke as the caller it names',
      (stage) => {
        stage.servesForgedEvents = true;
      },
      'http event by direct invoke',
      /: served \(HTTP 200\) as arn:aws:iam::000000000000:user\/token-broker-smoke-forged-caller: a direct invoker can claim any caller identity/,
    ],
    [
      'an alarm in ALARM',
      (stage) => {
        stage.alarms['token-broker-dev-request-errors'] = {
          state: 'ALARM',
          reason: 'Threshold Crossed: 1 datapoint [9.0] was greater than the threshold (5.0).',
        };
      },
      'alarm request-errors',
      /^ALARM since .*: Threshold Crossed: 1 datapoint \[9\.0\]/,
    ],
    [
      'an alarm the stack declares is missing',
      (stage) => {
        delete stage.alarms['token-broker-dev-another-issuer'];
      },
      'alarm another-issuer',
      /^token-broker-dev-another-issuer: missing/,
    ],
    [
      'point-in-time recovery off on a global table',
      (stage) => {
        const template = devTemplate();
        delete template.Resources.TokenTable;
        stage.template = template;
        stage.table = {
          name: 'token-broker-global-tokens',
          ttl: { status: 'DISABLED', attribute: undefined },
          pitr: 'DISABLED',
          deletionProtection: true,
        };
      },
      'table pitr',
      /^token-broker-global-tokens: point-in-time recovery DISABLED; the global table declares it on$/,
    ],
    [
      'deletion protection off where the stage declares it on',
      (stage) => {
        const template = devTemplate();
        (
          template.Resources.TokenTable as { Properties: Record<string, unknown> }
        ).Properties.DeletionProtectionEnabled = true;
        stage.template = template;
      },
      'table deletion protection',
      /deletion protection off; the stage declares it on/,
    ],
    [
      'TTL off',
      (stage) => {
        stage.table.ttl = { status: 'DISABLED', attribute: undefined };
      },
      'table ttl',
      /DISABLED; expected ENABLED on 'ttl'$/,
    ],
    [
      'the last deployment rolled back',
      (stage) => {
        stage.lastDeployment = { id: 'd-XYZ', status: 'Stopped' };
      },
      'deployment live',
      /^token-broker-dev: last d-XYZ Stopped .*rolled back/,
    ],
    [
      'a connection not ready',
      (stage) => {
        stage.ready = false;
      },
      'ready',
      /^not ready \(direct invoke\): sandbox \(secret SECRET_UNAVAILABLE\)$/,
    ],
    [
      'the last deploy rolled the stack back',
      (stage) => {
        stage.stackStatus = 'UPDATE_ROLLBACK_COMPLETE';
      },
      'stack',
      /UPDATE_ROLLBACK_COMPLETE .*: the last deploy rolled back$/,
    ],
  ])('%s: exit 1, that check named and failed, the others ok', async (_, breakIt, check, detail) => {
    breakIt(stub.stage);
    const { code, rows, stdout } = await smoke();
    expect(code).toBe(1);
    expect(rowOf(rows, check)).toMatchObject({ result: 'FAIL' });
    expect(rowOf(rows, check).detail).toMatch(detail);
    // Only that check failed.
    expect(rows.filter((row) => row.result === 'FAIL').map((row) => row.check)).toEqual([check]);
    expect(stdout).toContain(`smoke: FAILED: ${check} (`);
  });

  it('notes, not failures: an alarm without data, no deployment yet, a global table’s TTL', async () => {
    stub.stage.alarms['token-broker-dev-warm-up-stopped'] = { state: 'INSUFFICIENT_DATA' };
    stub.stage.lastDeployment = undefined;
    stub.stage.urlLastDeployment = undefined;
    const template = devTemplate();
    delete template.Resources.TokenTable;
    stub.stage.template = template;
    stub.stage.table = {
      name: 'token-broker-global-tokens',
      ttl: { status: 'DISABLED', attribute: undefined },
      pitr: 'ENABLED',
      deletionProtection: true,
    };
    const { code, rows } = await smoke();
    expect(code).toBe(0);
    expect(
      rows.filter((row) => row.result === 'note').map((row) => [row.check, row.detail]),
    ).toEqual([
      ['deployment live', expect.stringMatching(/none yet/)],
      ['deployment url', expect.stringMatching(/none yet \(a stack's first deploy creates url/)],
      ['alarm warm-up-stopped', expect.stringMatching(/^INSUFFICIENT_DATA since .*: no data yet/)],
      ['table ttl', expect.stringMatching(/has no TTL/)],
    ]);
  });

  it('no region, or no credentials: exit 2, said, nothing sent', async () => {
    const { AWS_REGION, AWS_ACCESS_KEY_ID } = process.env;
    try {
      delete process.env.AWS_REGION;
      const noRegion = await smoke();
      expect(noRegion.code).toBe(2);
      expect(noRegion.stderr).toMatch(/^No AWS region to find the stage in: pass --region/);
      expect(noRegion.stdout).toBe('');
      process.env.AWS_REGION = AWS_REGION;
      delete process.env.AWS_ACCESS_KEY_ID;
      const noCredentials = await smoke();
      expect(noCredentials.code).toBe(2);
      expect(noCredentials.stderr).toMatch(/^No AWS credentials to read the stage with/);
    } finally {
      Object.assign(process.env, { AWS_REGION, AWS_ACCESS_KEY_ID });
    }
    expect(stub.calls).toEqual([]);
  });

  it('no stack: exit 1, named, and nothing else run', async () => {
    stub.stage.stackStatus = undefined;
    const { code, rows, stdout } = await smoke(['--stage', 'dev', '--region', 'eu-west-1']);
    expect(code).toBe(1);
    expect(rowOf(rows, 'stack')).toEqual({
      check: 'stack',
      result: 'FAIL',
      detail:
        'no stack token-broker-dev in eu-west-1 (deployed with --stage dev --region eu-west-1?)',
    });
    expect(
      rows.filter((row) => row.check !== 'stack').every((row) => row.result === 'not run'),
    ).toBe(true);
    expect(stdout).toContain('smoke: FAILED: stack; not run: health, token over HTTP');
    expect(stub.calls.filter((call) => !call.startsWith('CloudFormation.'))).toEqual([]);
  });
});

describe('npm run smoke: usage and output', () => {
  it('takes --stage or --endpoint, not both nor neither; wrong usage exits 2', async () => {
    expect(parseSmokeArgs(['--stage', 'prod', '--region', 'eu-west-1'])).toEqual({
      mode: 'stage',
      stage: 'prod',
      region: 'eu-west-1',
      connection: undefined,
    });
    expect(() => parseSmokeArgs([])).toThrow(UsageError);
    expect(() => parseSmokeArgs(['--stage', 'a', '--endpoint', 'http://127.0.0.1:1'])).toThrow(
      'give either --stage <stage> or --endpoint <url>',
    );
    expect(() => parseSmokeArgs(['--endpoint', 'ftp://x'])).toThrow('--endpoint must be');
    expect(() => parseSmokeArgs(['--stage', 'a', '--function', 'f'])).toThrow('--function is for');
    expect(() => parseSmokeArgs(['--stage'])).toThrow(UsageError);
    let stderr = '';
    const code = await main(['--stag', 'dev'], {
      stdout: () => undefined,
      stderr: (text) => {
        stderr += text;
      },
    });
    expect(code).toBe(2);
    expect(stderr).toContain("Unknown option '--stag'");
    expect(stderr).toContain('usage: npm run smoke');
  });

  it('prints one table', () => {
    expect(
      renderTable([
        { check: 'health', result: 'ok', detail: 'ok' },
        { check: 'alias live', result: 'FAIL', detail: 'live → 4' },
      ]),
    ).toBe(
      [
        'check      | result | detail',
        '-----------+--------+-------',
        'health     | ok     | ok',
        'alias live | FAIL   | live → 4',
      ].join('\n'),
    );
  });

  it("finds the stack by serverless.yml's service", () => {
    expect(readFileSync(join(root, 'serverless.yml'), 'utf8')).toMatch(
      new RegExp(`^service: ${SERVICE}$`, 'm'),
    );
  });
});
