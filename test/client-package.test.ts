/**
 * The client as a service installs it: `npm pack -w client` (which builds on prepack), the
 * tarball installed into an empty project, then used through `import`, `require`, the middy
 * entry point, the type declarations of both module systems, and the `token-broker` bin,
 * against the broker behind the same local runtime `npm start` serves.
 */
import { execFile } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { type LocalLambdaServer, startLambdaServer } from '../local/lambda-server.js';
import { applyEnv, type Stack, startStack } from '../local/stack.js';
import { root } from './support/build.js';
import { newContainer } from './support/lambda.js';

const run = promisify(execFile);

/** This process's environment without npm's own run-script variables or any AWS setting. */
const cleanEnv = (extra: Record<string, string> = {}) => ({
  ...Object.fromEntries(
    Object.entries(process.env).filter(
      ([name]) => !name.startsWith('npm_') && !name.startsWith('AWS_'),
    ),
  ),
  // Nothing of this machine's AWS setup: the loopback defaults must do.
  AWS_EC2_METADATA_DISABLED: 'true',
  AWS_CONFIG_FILE: '/nonexistent',
  AWS_SHARED_CREDENTIALS_FILE: '/nonexistent',
  ...extra,
});

let dir: string;
let app: string;
let tarball: string;
let stack: Stack;
let server: LocalLambdaServer;

beforeAll(async () => {
  dir = mkdtempSync(join(tmpdir(), 'client-package-'));
  app = join(dir, 'app');
  mkdirSync(app);
  const packed = await run('npm', ['pack', '-w', 'client', '--pack-destination', dir, '--json'], {
    cwd: root,
    env: cleanEnv(),
  });
  const [{ filename }] = JSON.parse(packed.stdout) as [{ filename: string }];
  tarball = join(dir, filename);
  writeFileSync(
    join(app, 'package.json'),
    '{ "name": "app", "version": "1.0.0", "private": true }',
  );
  // --prefer-offline: the dependencies are the ones `npm ci` already put in the npm cache.
  await run('npm', ['install', tarball, '--prefer-offline', '--no-audit', '--no-fund'], {
    cwd: app,
    env: cleanEnv(),
  });

  stack = await startStack();
  applyEnv(stack.env);
  server = await startLambdaServer(newContainer());
}, 120_000);

afterAll(async () => {
  await server?.close();
  await stack?.close();
  rmSync(dir, { recursive: true, force: true });
});

const node = (file: string) =>
  run(process.execPath, [file], { cwd: app, env: cleanEnv({ BROKER_URL: server.url }) });

describe('Client package: npm pack -w client, installed in an empty project', () => {
  it('ships only what runs, and installs without the broker’s own dependencies', async () => {
    const { stdout } = await run('tar', ['-tzf', tarball]);
    const files = stdout.trim().split('\n');
    expect(files).toContain('package/dist/esm/index.js');
    expect(files).toContain('package/dist/cjs/index.js');
    expect(files).toContain('package/dist/esm/index.d.ts');
    expect(files).toContain('package/README.md');
    expect(files).toContain('package/CHANGELOG.md');
    expect(files.filter((f) => /\.map$|\/src\/|\.test\.|tsconfig|scripts\//.test(f))).toEqual([]);

    const installed = readdirSync(join(app, 'node_modules'), { recursive: true }).map(String);
    for (const absent of [
      '@aws-lambda-powertools',
      '@middy',
      'zod',
      join('@aws-sdk', 'client-dynamodb'),
      join('@aws-sdk', 'client-kms'),
      join('@aws-sdk', 'client-secrets-manager'),
    ]) {
      expect(installed).not.toContain(absent);
    }
    const { stdout: list } = await run('npm', ['ls', '--all', '--parseable'], {
      cwd: app,
      env: cleanEnv(),
    });
    const packages = list.trim().split('\n').length - 1;
    console.log(`installed client: ${packages} packages, tarball ${tarball}`);
    expect(packages).toBeLessThan(40);
  });

  it('works through import, with the local defaults said on stderr', async () => {
    const file = join(app, 'use.mjs');
    writeFileSync(
      file,
      `import { createTokenClient, UnknownConnectionError } from '@open-api-token-broker/client';
import { tokenBroker } from '@open-api-token-broker/client/middy';
const tokens = createTokenClient({ transport: { type: 'lambda', functionName: 'token-broker', endpoint: process.env.BROKER_URL } });
const token = await tokens.getToken('sandbox');
const unknown = await tokens.getToken('nope').catch((error) => error);
console.log(JSON.stringify({
  token: token.accessToken.startsWith('at_'),
  typed: unknown instanceof UnknownConnectionError,
  middleware: typeof tokenBroker({ client: tokens, fetchData: { t: 'sandbox' } }).before,
}));
`,
    );
    const { stdout, stderr } = await node(file);
    expect(JSON.parse(stdout)).toEqual({ token: true, typed: true, middleware: 'function' });
    expect(stderr).toContain('TokenBrokerWarning');
    expect(stderr).toContain('placeholder credentials');
  });

  it('works through require', async () => {
    const file = join(app, 'use.cjs');
    writeFileSync(
      file,
      `const { createTokenClient, TokenBrokerError } = require('@open-api-token-broker/client');
const { tokenBroker } = require('@open-api-token-broker/client/middy');
const tokens = createTokenClient({ onWarning: () => {}, transport: { type: 'http', url: process.env.BROKER_URL } });
(async () => {
  const token = await tokens.getToken('legacy');
  const refused = await tokens.getToken('legacy', { minValidity: -1 }).catch((error) => error);
  console.log(JSON.stringify({
    token: token.accessToken.startsWith('at_'),
    refused: refused instanceof TokenBrokerError && refused.code,
    middleware: typeof tokenBroker({ client: tokens, fetchData: { t: 'legacy' } }).before,
  }));
})();
`,
    );
    const { stdout } = await node(file);
    expect(JSON.parse(stdout)).toEqual({
      token: true,
      refused: 'BAD_REQUEST',
      middleware: 'function',
    });
  });

  it('has type declarations for both module systems', async () => {
    writeFileSync(
      join(app, 'types.mts'),
      `import { createTokenClient, type AccessToken } from '@open-api-token-broker/client';
import { tokenBroker } from '@open-api-token-broker/client/middy';
const tokens = createTokenClient({ transport: { type: 'http', url: 'http://127.0.0.1:3000' } });
export const get: Promise<AccessToken> = tokens.getToken('x', { minValidity: 60, timeoutMs: 1000 });
export const provider: () => Promise<string> = tokens.provider('x');
export const middleware = tokenBroker({ client: tokens, fetchData: { openApiToken: 'x' } });
`,
    );
    writeFileSync(
      join(app, 'types.cts'),
      `import client = require('@open-api-token-broker/client');
export const tokens: client.TokenClient = client.createTokenClient({ transport: { type: 'lambda', functionName: 'f' } });
`,
    );
    writeFileSync(
      join(app, 'tsconfig.json'),
      JSON.stringify({
        compilerOptions: {
          module: 'node16',
          target: 'es2022',
          lib: ['es2022', 'dom'],
          strict: true,
          noEmit: true,
          // A service that uses the AWS SDK has @types/node; the SDK's own declarations need it.
          typeRoots: [join(root, 'node_modules/@types')],
          types: ['node'],
        },
        files: ['types.mts', 'types.cts'],
      }),
    );
    const tsc = join(root, 'node_modules/typescript/bin/tsc');
    const result = await run(process.execPath, [tsc, '-p', app]).catch(
      (error: { stdout: string }) => error,
    );
    expect(result.stdout).toBe('');
  });

  it('ships the token-broker CLI as its bin', async () => {
    const { stdout } = await run(
      join(app, 'node_modules/.bin/token-broker'),
      ['status', '--json', '--function', 'token-broker', '--endpoint', server.url],
      { cwd: app, env: cleanEnv() },
    );
    expect(JSON.parse(stdout).connections.map((c: { connection: string }) => c.connection)).toEqual(
      ['sandbox', 'legacy'],
    );
  });
});
