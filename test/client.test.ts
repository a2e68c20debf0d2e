/**
 * The callers' side against the local broker (the built bundle behind the same Lambda emulation
 * `npm start` serves), over both transports; and the operator CLI as a process.
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import { LambdaClient } from '@aws-sdk/client-lambda';
import { afterAll, beforeAll, describe, expect, expectTypeOf, it } from 'vitest';
import {
  type ConnectionStatus,
  createTokenClient,
  type TokenClient,
  TransportError,
  UnknownConnectionError,
  UpstreamUnavailableError,
  type WarmUpReport,
} from '../client/src/index.js';
import type {
  ConnectionStatus as BrokerConnectionStatus,
  WarmUpReport as BrokerWarmUpReport,
} from '../lib/broker.js';
import { OpenApiClient } from '../lib/upstream/open-api.js';
import { type Container, startContainer } from '../local/fleet.js';
import { type Stack, startStack } from '../local/stack.js';
import { buildPrivate, type PrivateBuild } from './support/build.js';
import { caught, unexpected } from './support/errors.js';

const run = promisify(execFile);
const credentials = { accessKeyId: 'local', secretAccessKey: 'local' };

let build: PrivateBuild;
let stack: Stack;
let broker: Container;
let fetches = 0;
let lastAuthorization = '';

const countingFetch: typeof fetch = (input, init) => {
  fetches += 1;
  lastAuthorization = String(
    (init?.headers as Record<string, string> | undefined)?.authorization ?? '',
  );
  return fetch(input, init);
};

const clients = () => ({
  lambda: createTokenClient({
    transport: {
      type: 'lambda',
      functionName: 'token-broker',
      client: new LambdaClient({ endpoint: broker.url, region: 'us-east-1', credentials }),
    },
  }),
  http: createTokenClient({
    transport: {
      type: 'http',
      url: broker.url,
      region: 'us-east-1',
      credentials,
      fetch: countingFetch,
    },
  }),
});

/** Calls the Open API's protected ping with the token, as a service would. */
const ping = (token: string) =>
  fetch(`${stack.simulator.url}/open-api/v3/ping`, { headers: { 'x-access-token': token } });

beforeAll(async () => {
  build = buildPrivate('client');
  stack = await startStack({}, ['sandbox', 'legacy'], { encrypt: true });
  broker = await startContainer({ runner: build.container, bundle: build.bundle, env: stack.env });
}, 60_000);
afterAll(async () => {
  await broker.kill();
  await stack.close();
  build.remove();
});

describe.each(['lambda', 'http'] as const)('Client over %s', (transport) => {
  let client: TokenClient;
  beforeAll(() => {
    client = clients()[transport];
  });

  it('gets a token the Open API accepts, typed', async () => {
    const token = await client.getToken('sandbox');
    expect(token.connection).toBe('sandbox');
    expect(token.expiresAt).toBeInstanceOf(Date);
    expect(token.expiresIn).toBeGreaterThan(86_000);
    expect((await ping(token.accessToken)).status).toBe(200);
  });

  it('raises the broker’s errors as typed errors', async () => {
    const error = await client.getToken('nope').then(unexpected, caught);
    expect(error).toBeInstanceOf(UnknownConnectionError);
    expect(error.code).toBe('UNKNOWN_CONNECTION');
  });

  it('withToken retries once with a new token after the Open API rejected the first', async () => {
    const before = await client.getToken('sandbox');
    // Someone else issues a token for this client: the upstream revokes the broker's token.
    const openApi = new OpenApiClient({ timeoutMs: 5000, limits: { maxLifetimeSeconds: 86_400 } });
    await openApi.issue(
      {
        name: 'x',
        variant: 'v3',
        baseUrl: stack.simulator.url,
        secretId: 's',
        callers: undefined,
        codeField: 'code',
        revokesOnReissue: true,
      },
      stack.v3Client,
      { deadline: Date.now() + 5000 },
    );
    expect((await ping(before.accessToken)).status).toBe(401);
    const seen: string[] = [];
    const response = await client.withToken('sandbox', async (token) => {
      seen.push(token);
      return ping(token);
    });
    expect(response.status).toBe(200);
    expect(seen).toHaveLength(2);
    expect(seen[0]).toBe(before.accessToken);
    expect(seen[1]).not.toBe(before.accessToken);
  });

  it('reports status without a token, and runs the warm-up', async () => {
    const token = await client.getToken('sandbox');
    const status = await client.status();
    expect(status.map((c) => c.connection)).toEqual(['sandbox', 'legacy']);
    expect(JSON.stringify(status)).not.toContain(token.accessToken);
    const report = await client.warmUp();
    expect(report.failed).toBe(0);
  });
});

describe('Client types', () => {
  it('restate the broker’s wire types exactly (checked by the type-checker)', () => {
    expectTypeOf<ConnectionStatus>().toEqualTypeOf<BrokerConnectionStatus>();
    expectTypeOf<WarmUpReport>().toEqualTypeOf<BrokerWarmUpReport>();
  });
});

describe('Client cache', () => {
  it('reuses a token until its margin, shares one request between concurrent calls, and passes minValidity', async () => {
    const { http } = clients();
    fetches = 0;
    const first = await http.getToken('legacy');
    await http.getToken('legacy');
    expect(fetches).toBe(1);
    // Signed for a Function URL with AWS_IAM: SigV4, service lambda.
    expect(lastAuthorization).toMatch(
      /^AWS4-HMAC-SHA256 Credential=local\/\d{8}\/us-east-1\/lambda\/aws4_request, SignedHeaders=/,
    );
    const concurrent = await Promise.all(
      Array.from({ length: 10 }, () =>
        http.getToken('legacy', { minValidity: 90_000 }).catch((e) => e),
      ),
    );
    expect(fetches).toBe(2);
    expect(concurrent.every((r) => r.name === 'MinValidityUnsatisfiableError')).toBe(true);
    expect((await http.getToken('legacy', { minValidity: 3_600 })).accessToken).toBe(
      first.accessToken,
    );
    expect(fetches).toBe(2);
  });

  it('raises a TransportError when the broker cannot be reached', async () => {
    const client = createTokenClient({
      transport: { type: 'http', url: 'http://127.0.0.1:9', region: 'us-east-1', credentials },
    });
    const error = await client.getToken('sandbox').then(unexpected, caught);
    expect(error).toBeInstanceOf(TransportError);
    expect(error).not.toBeInstanceOf(UpstreamUnavailableError);
  });
});

describe('CLI: token-broker', () => {
  const cli = (...args: string[]) =>
    run(process.execPath, [build.outdir.concat('/client/esm/cli.js'), ...args], {
      env: {
        PATH: process.env.PATH ?? '',
        AWS_ACCESS_KEY_ID: 'local',
        AWS_SECRET_ACCESS_KEY: 'local',
        AWS_REGION: 'us-east-1',
      },
    }).then(
      ({ stdout, stderr }) => ({ code: 0, stdout, stderr }),
      (error: { code: number; stdout: string; stderr: string }) => ({
        code: error.code,
        stdout: error.stdout,
        stderr: error.stderr,
      }),
    );
  const target = () => ['--function', 'token-broker', '--endpoint', broker.url];

  it('prints help and exits 0; refuses wrong usage with exit 2', async () => {
    expect(await cli('--help')).toMatchObject({
      code: 0,
      stdout: expect.stringContaining('token-broker <command>'),
    });
    expect((await cli('frobnicate', ...target())).code).toBe(2);
    expect((await cli('token', ...target())).code).toBe(2);
    expect((await cli('status')).code).toBe(2);
  });

  it('status --json lists every connection, never a token', async () => {
    const token = await clients().lambda.getToken('sandbox');
    const { code, stdout } = await cli('status', '--json', ...target());
    expect(code).toBe(0);
    expect(JSON.parse(stdout).connections[0]).toMatchObject({
      connection: 'sandbox',
      variant: 'v3',
    });
    expect(stdout).not.toContain(token.accessToken);
  });

  it('token shows metadata, and the token only with --reveal; over HTTP too', async () => {
    const hidden = await cli('token', 'sandbox', '--json', ...target());
    expect(JSON.parse(hidden.stdout)).not.toHaveProperty('accessToken');
    const shown = await cli('token', 'sandbox', '--json', '--reveal', '--url', broker.url);
    const { accessToken } = JSON.parse(shown.stdout);
    expect((await ping(accessToken)).status).toBe(200);
  });

  it('invalidate and warm work, and a broker error exits 1', async () => {
    const { stdout } = await cli('token', 'sandbox', '--json', '--reveal', ...target());
    const { accessToken } = JSON.parse(stdout);
    expect(
      JSON.parse(
        (await cli('invalidate', 'sandbox', '--token', accessToken, '--json', ...target())).stdout,
      ),
    ).toEqual({
      invalidated: true,
    });
    expect((await cli('warm', ...target())).code).toBe(0);
    const failed = await cli('token', 'nope', ...target());
    expect(failed.code).toBe(1);
    expect(failed.stderr).toContain('UNKNOWN_CONNECTION');
  });
});
