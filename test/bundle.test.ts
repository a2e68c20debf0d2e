/**
 * The built artefacts as real processes: the Lambda bundle loaded like Lambda loads it, against
 * an HTTPS upstream whose certificate is trusted only through NODE_EXTRA_CA_CERTS; and
 * `npm start`'s local runtime serving both variants over HTTP and the Lambda Invoke API.
 */
import { type ChildProcess, execFileSync, spawn } from 'node:child_process';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer } from 'node:net';
import { dirname, join } from 'node:path';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { createTokenClient, UnknownConnectionError } from '../client/src/index.js';
import { httpEvent, scheduledEvent } from '../local/lambda-events.js';
import { startSsmEmulator } from '../local/ssm-emulator.js';
import { type Stack, startStack } from '../local/stack.js';
import { type Build, root, sharedBuild } from './support/build.js';

let build: Build;
/** This file's own scratch directory (events, results, certificates, npm start's build). */
let outdir = '';
beforeAll(() => {
  build = sharedBuild();
  outdir = join(root, '.build-test', `bundle-${process.pid}`);
  mkdirSync(outdir, { recursive: true });
});
afterAll(() => rmSync(outdir, { recursive: true, force: true }));

/** A self-signed certificate for localhost, made with the machine's openssl. */
const selfSignedCertificate = (dir: string) => {
  const key = join(dir, 'key.pem');
  const cert = join(dir, 'cert.pem');
  execFileSync(
    'openssl',
    [
      'req',
      '-x509',
      '-newkey',
      'ec',
      '-pkeyopt',
      'ec_paramgen_curve:prime256v1',
      '-nodes',
      '-keyout',
      key,
      '-out',
      cert,
      '-days',
      '1',
      '-subj',
      '/CN=localhost',
      '-addext',
      'subjectAltName=DNS:localhost,IP:127.0.0.1',
    ],
    { stdio: 'ignore' },
  );
  return { key: readFileSync(key), cert: readFileSync(cert), certPath: cert };
};

const runBundle = (env: Record<string, string>, events: unknown[]) =>
  new Promise<{
    results: {
      ok: boolean;
      result?: Record<string, unknown>;
      errorType?: string;
      errorMessage?: string;
    }[];
    output: string;
  }>((done, fail) => {
    const eventsFile = join(outdir, `events-${Date.now()}.json`);
    const resultsFile = join(outdir, `results-${Date.now()}.json`);
    writeFileSync(eventsFile, JSON.stringify(events));
    const child = spawn(
      process.execPath,
      [join(root, 'test/support/lambda-runner.mjs'), build.bundle, eventsFile, resultsFile],
      // Only what Lambda would have: no inherited AWS or broker settings from this process.
      { env: { PATH: process.env.PATH ?? '', ...env }, stdio: ['ignore', 'pipe', 'pipe'] },
    );
    let output = '';
    child.stdout.on('data', (chunk) => {
      output += chunk;
    });
    child.stderr.on('data', (chunk) => {
      output += chunk;
    });
    child.on('error', fail);
    child.on('exit', (code) => {
      if (code !== 0) return fail(new Error(`runner exited ${code}: ${output.slice(-2000)}`));
      done({ results: JSON.parse(readFileSync(resultsFile, 'utf8')), output });
    });
  });

describe('Bundle: dist/broker/index.mjs loaded like Lambda loads it', () => {
  let stack: Stack;
  let certPath: string;

  beforeAll(async () => {
    const tls = selfSignedCertificate(outdir);
    certPath = tls.certPath;
    stack = await startStack({ tls: { key: tls.key, cert: tls.cert } }, ['sandbox', 'legacy'], {
      encrypt: true,
    });
  });
  afterAll(() => stack.close());

  it('serves all three kinds of caller for both variants over HTTPS, and logs no credential', async () => {
    expect(stack.simulator.url).toMatch(/^https:\/\/localhost:\d+$/);
    const env = { ...stack.env, NODE_EXTRA_CA_CERTS: certPath, POWERTOOLS_LOG_LEVEL: 'DEBUG' };
    const { results, output } = await runBundle(env, [
      scheduledEvent(),
      httpEvent({ method: 'GET', url: '/tokens/sandbox?minValidity=60' }),
      httpEvent({ method: 'GET', url: '/tokens/legacy' }),
      { action: 'getToken', connection: 'sandbox' },
      { action: 'getToken', connection: 'legacy', minValidity: 3600 },
      { action: 'getToken', connection: 'nope' },
      { unexpected: true },
      // Refused by the schema, a chunk of its own loaded then (issue 25): its message as before.
      { action: 'getToken', connection: 'sandbox', minvalidity: 60 },
      { action: 'getToken', connection: 'sandbox', minValidity: -1 },
    ]);
    const [warm, httpV3, httpLegacy, invokeV3, invokeLegacy, unknown, bad, typo, negative] =
      results;
    expect(warm?.result).toMatchObject({ issued: 2, failed: 0 });
    const v3Body = JSON.parse(String(httpV3?.result?.body));
    const legacyBody = JSON.parse(String(httpLegacy?.result?.body));
    expect(httpV3?.result?.statusCode).toBe(200);
    expect(stack.simulator.isValid(v3Body.accessToken)).toBe(true);
    expect(stack.simulator.isValid(legacyBody.accessToken)).toBe(true);
    expect(invokeV3?.result?.accessToken).toBe(v3Body.accessToken);
    expect(invokeLegacy?.result?.accessToken).toBe(legacyBody.accessToken);
    expect(unknown).toMatchObject({ ok: false, errorType: 'UnknownConnectionError' });
    expect(bad).toMatchObject({ ok: false, errorType: 'BadRequestError' });
    expect(typo).toMatchObject({
      ok: false,
      errorType: 'BadRequestError',
      errorMessage: 'Invalid direct invoke: unknown field "minvalidity"',
    });
    expect(negative).toMatchObject({
      ok: false,
      errorType: 'BadRequestError',
      errorMessage:
        'Invalid direct invoke: "minValidity": must be a whole number of seconds from 0 to 1000000000',
    });
    expect(stack.simulator.stats().issuances).toBe(2);

    const secrets = stack.credentials();
    expect(secrets.length).toBeGreaterThanOrEqual(8);
    // The bundle signed the v3 token request: its signature and string-to-sign are searched too.
    expect(secrets.filter((value) => /^[0-9a-f]{64}$/.test(value))).toHaveLength(1);
    expect(secrets.filter((value) => value.startsWith('clientId='))).toHaveLength(1);
    expect(output).toContain('"message":"Token served"');
    expect(secrets.filter((value) => output.includes(value))).toEqual([]);
  });

  it('reads its connections from an SSM parameter at cold start (BROKER_CONNECTIONS_PARAMETER)', async () => {
    const ssm = await startSsmEmulator();
    try {
      const { BROKER_CONNECTIONS: connections, ...env } = stack.env;
      ssm.setParameter('/token-broker/test/connections', String(connections));
      const { results } = await runBundle(
        {
          ...env,
          BROKER_CONNECTIONS_PARAMETER: '/token-broker/test/connections',
          AWS_ENDPOINT_URL_SSM: ssm.url,
        },
        [{ action: 'getToken', connection: 'sandbox' }],
      );
      expect(stack.simulator.isValid(String(results[0]?.result?.accessToken))).toBe(true);
      expect(ssm.calls()).toBe(1);
    } finally {
      await ssm.close();
    }
  });

  it('refuses the HTTPS upstream when its certificate is not trusted', async () => {
    const fresh = await startStack({ tls: selfSignedCertificate(outdir) });
    try {
      const { results } = await runBundle(fresh.env, [
        { action: 'getToken', connection: 'sandbox' },
      ]);
      expect(results[0]).toMatchObject({ ok: false, errorType: 'UpstreamUnavailableError' });
      expect(fresh.simulator.stats().issuances).toBe(0);
    } finally {
      await fresh.close();
    }
  });

  it('fails at cold start with a message naming the bad variable, connection and field', async () => {
    const env = {
      BROKER_TABLE_NAME: 'tokens',
      BROKER_CONNECTIONS: JSON.stringify({
        production: { variant: 'v3', baseUrl: 'http://api.example.com', secretId: 's' },
      }),
    };
    await expect(runBundle(env, [])).rejects.toThrow(
      'BROKER_CONNECTIONS: connection "production", field "baseUrl": must use https://',
    );
  });
});

describe('Bundle: what its cold start loads (issue 25)', () => {
  /**
   * The files the runtime's import of index.mjs loads: it, what it imports (the entry's own
   * dynamic import is init's: functions/broker/index.ts), and their static imports, transitively.
   * Dynamic imports inside chunks are loaded on first use.
   */
  const loadedAtInit = (entry: string): Map<string, string> => {
    const files = new Map<string, string>();
    const visit = (file: string) => {
      if (files.has(file)) return;
      const text = readFileSync(file, 'utf8');
      files.set(file, text);
      const imports = [
        ...text.matchAll(/\b(?:import|export)\s*(?:[^"'();]*?\bfrom\s*)?["'](\.\.?\/[^"']+)["']/g),
        ...(file === entry ? text.matchAll(/\bimport\(\s*["'](\.\.?\/[^"']+)["']\s*\)/g) : []),
      ];
      for (const [, path] of imports) visit(join(dirname(file), String(path)));
    };
    visit(entry);
    return files;
  };

  it('leaves out of init what only issuing, probing, encrypting, refusing or HTTP needs', () => {
    const init = [...loadedAtInit(build.bundle).values()].join('\n');
    // The DynamoDB client serves a cold start's first token: it is there.
    expect(init).toContain('com.amazonaws.dynamodb');
    // Loaded on first use (lib/adapters/aws.ts), each a file of its own that init never parses.
    expect(init).not.toContain('com.amazonaws.kms');
    expect(init).not.toContain('com.amazonaws.secretsmanager');
    // The upstream client's resilience library (cockatiel).
    expect(init).not.toContain('Execution prevented because the circuit breaker is open');
    // The schema library: a valid configuration and a valid request are checked without it
    // (lib/config/build.ts, functions/broker/requests.ts); it is loaded to judge the others.
    expect(init).not.toContain('$ZodType');
    // The HTTP side (functions/broker/http.ts, middy's router and body parser): loaded on the
    // first HTTP request, which the first test of this file sends after a scheduled event.
    expect(init).not.toContain('Invalid or malformed JSON was provided');
  });

  it('takes the AWS SDK as ES modules: only the commands it sends, and no credential provider Lambda does not use', () => {
    // scripts/esbuild-node.mjs, docs/adr/0026: the SDK's CommonJS is one file per package, every
    // command and every credential provider in it.
    const init = [...loadedAtInit(build.bundle).values()].join('\n');
    expect(init).toContain('GetItem');
    expect(init).not.toContain('CreateBackup');
    expect(init).not.toContain('ExportTableToPointInTime');
    // Lambda gives a function its credentials in the environment: the SSO, STS (web identity)
    // and other providers are loaded only when it has none (chunks of their own).
    expect(init).not.toContain('GetRoleCredentials');
    expect(init).not.toContain('AssumeRoleWithWebIdentity');
  });

  it('registers its extension without loading undici: no fetch, no ESM facade of node:http', () => {
    // A loopback Extensions API, the bundle imported with AWS_LAMBDA_RUNTIME_API pointing at it;
    // every fetch call is counted, and Node's list of loaded internal modules read. An ESM import
    // of node:http (middy's util has one) loads undici through the module's facade, as a fetch
    // does (scripts/esbuild-node.mjs): this script takes node:http without one.
    const script = `
      const { createServer } = process.getBuiltinModule('node:http');
      const real = globalThis.fetch;
      let fetches = 0;
      globalThis.fetch = (...args) => { fetches += 1; return real(...args); };
      let registered = 0;
      const server = createServer((req, res) => {
        if (req.url.endsWith('/extension/register')) {
          registered += 1;
          res.writeHead(200, { 'Lambda-Extension-Identifier': 'ext-1' }).end('{}');
        } // event/next: held
      });
      await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
      process.env.AWS_LAMBDA_RUNTIME_API = '127.0.0.1:' + server.address().port;
      await import(process.argv[1]);
      const undici = process.moduleLoadList.some((name) => name.includes('undici'));
      console.log(JSON.stringify({ registered, fetches, undici }));
      process.exit(0);`;
    const output = execFileSync(
      process.execPath,
      ['--input-type=module', '-e', script, `file://${build.bundle}`],
      {
        env: {
          PATH: process.env.PATH ?? '',
          AWS_REGION: 'us-east-1',
          BROKER_TABLE_NAME: 'tokens',
          BROKER_CONNECTIONS: JSON.stringify({
            sandbox: { variant: 'v3', baseUrl: 'https://api.example.com', secretId: 's' },
          }),
          POWERTOOLS_LOG_LEVEL: 'ERROR',
        },
        encoding: 'utf8',
      },
    );
    expect(JSON.parse(output.trim().split('\n').pop() ?? '{}')).toEqual({
      registered: 1,
      fetches: 0,
      undici: false,
    });
  });
});

describe('Local runtime: npm start', () => {
  let child: ChildProcess;
  let url = '';
  let output = '';

  beforeAll(async () => {
    // `npm start` itself, as a user runs it (its own build dir, so it does not race dist/).
    child = spawn('npm', ['start', '--silent'], {
      cwd: root,
      env: {
        PATH: process.env.PATH ?? '',
        HOME: process.env.HOME ?? '',
        PORT: '0',
        BROKER_LOCAL_SCHEDULE_SECONDS: '0',
        BUILD_OUTDIR: join(outdir, 'npm-start'),
      },
      stdio: ['ignore', 'pipe', 'pipe'],
    });
    child.stderr?.on('data', (chunk) => {
      output += chunk;
    });
    url = await new Promise<string>((done, fail) => {
      child.stdout?.on('data', (chunk) => {
        output += chunk;
        const match = /Token broker\s+(http:\/\/127\.0\.0\.1:\d+)/.exec(output);
        if (match?.[1] && output.includes('Ctrl-C')) done(match[1]);
      });
      child.on('exit', (code) => fail(new Error(`npm start exited ${code}: ${output}`)));
    });
  }, 120_000);
  afterAll(async () => {
    if (child.exitCode === null && child.signalCode === null) {
      const exited = new Promise((done) => child.once('exit', done));
      child.kill('SIGTERM');
      await exited;
    }
  });

  it('says that BROKER_LOCAL_SCHEDULE_SECONDS=0 runs the warm-up once', () => {
    expect(output).toContain('Warm-up ran once at start and does not repeat');
    expect(output).not.toContain('every 0s');
    expect(output).toContain('--cli-binary-format raw-in-base64-out');
  });

  it('serves tokens for both variants over HTTP and the Lambda Invoke API', async () => {
    const v3 = await fetch(`${url}/tokens/demo-v3`);
    expect(v3.status).toBe(200);
    const v3Body = (await v3.json()) as {
      accessToken: string;
      maxAgeMs: number;
      staleIfErrorSeconds: number;
    };
    // The reuse time, in HTTP's terms: whole seconds, private, and how long the token may be
    // used stale (RFC 5861); no-store when it may be neither reused a second nor used stale.
    const seconds = Math.floor(v3Body.maxAgeMs / 1000);
    const stale = v3Body.staleIfErrorSeconds;
    expect(v3.headers.get('cache-control')).toBe(
      stale > 0
        ? `private, max-age=${seconds}, stale-if-error=${stale}`
        : seconds > 0
          ? `private, max-age=${seconds}`
          : 'no-store',
    );
    const legacy = (await (await fetch(`${url}/tokens/demo-legacy`)).json()) as {
      accessToken: string;
    };
    expect(v3Body.accessToken).toMatch(/^at_/);
    expect(legacy.accessToken).toMatch(/^at_/);
    expect(legacy.accessToken).not.toBe(v3Body.accessToken);

    const invoke = await fetch(`${url}/2015-03-31/functions/token-broker/invocations`, {
      method: 'POST',
      body: JSON.stringify({ action: 'getToken', connection: 'demo-v3' }),
    });
    expect(invoke.status).toBe(200);
    expect(((await invoke.json()) as { accessToken: string }).accessToken).toBe(v3Body.accessToken);

    const failed = await fetch(`${url}/2015-03-31/functions/token-broker/invocations`, {
      method: 'POST',
      body: JSON.stringify({ action: 'getToken', connection: 'nope' }),
    });
    expect(failed.headers.get('x-amz-function-error')).toBe('Unhandled');
    expect(await failed.json()).toEqual({
      errorType: 'UnknownConnectionError',
      errorMessage: "Unknown connection 'nope'; this caller may use: demo-v3, demo-legacy",
    });
  });

  it('serves the caller client over both transports', async () => {
    const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };
    const overHttp = createTokenClient({
      transport: { type: 'http', url, region: 'us-east-1', credentials },
    });
    const overInvoke = createTokenClient({
      transport: {
        type: 'lambda',
        functionName: 'token-broker',
        client: new LambdaClient({ endpoint: url, region: 'us-east-1', credentials }),
      },
    });
    const [a, b] = await Promise.all([
      overHttp.getToken('demo-v3'),
      overInvoke.getToken('demo-v3'),
    ]);
    expect(a.accessToken).toBe(b.accessToken);
    await expect(overInvoke.getToken('nope')).rejects.toBeInstanceOf(UnknownConnectionError);
    expect((await overHttp.status()).map((c) => c.connection)).toEqual(['demo-v3', 'demo-legacy']);
  });

  it('stops on a SIGTERM sent to npm, and frees its port', async () => {
    const port = Number(new URL(url).port);
    const exited = new Promise<number | null>((done) => child.once('exit', done));
    child.kill('SIGTERM');
    expect(await exited).toBe(0);
    expect(output).toContain('SIGTERM: stopping');
    // The port can be taken again: nothing of npm start is left listening on it.
    const probe = createServer();
    await new Promise<void>((done, fail) => {
      probe.once('error', fail);
      probe.listen(port, '127.0.0.1', done);
    });
    await new Promise((done) => probe.close(done));
  });
});
