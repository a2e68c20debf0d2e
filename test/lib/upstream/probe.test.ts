/**
 * The probe of a reported token, against the simulator over real HTTP: its protected ping
 * answers 401 for a revoked token. Then the whole facade with the real Open API client: another
 * issuer on the same client ID revokes the broker's token, a report of it is verified and the
 * token replaced at once (one issuance), and a report of a token the Open API accepts replaces
 * nothing.
 */
import { type Server as HttpServer, createServer as httpServer } from 'node:http';
import { createServer } from 'node:net';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { TokenBroker } from '../../../lib/broker/index.js';
import { issueWith } from '../../../lib/broker/issuance/issue-flow.js';
import { DEFAULT_TIMING } from '../../../lib/broker/timing/index.js';
import { Deadline, systemClock } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import { OpenApiClient, probeRequest, probeVerdict } from '../../../lib/upstream/open-api.js';
import { generateClient, type Simulator, startSimulator } from '../../../local/simulator.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  FakeSecretSource,
  InMemoryTokenStore,
} from '../../support/fakes.js';

const limits = { maxLifetimeSeconds: 30 * 86_400 };
const client = generateClient('probe');
const deadline = () => Deadline.in(systemClock, 5_000);

let simulator: Simulator;
let v3: ConnectionConfig;
beforeAll(async () => {
  simulator = await startSimulator({ clients: [client] });
  v3 = connection({
    baseUrl: simulator.url,
    probe: { path: '/open-api/v3/ping', intervalSeconds: 1 },
  });
});
afterAll(() => simulator.close());

/** An HTTP server on 127.0.0.1, port 0: its URL and how to close it. */
const listening = (server: HttpServer) =>
  new Promise<{ url: string; close: () => Promise<void> }>((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      resolve({
        url: `http://127.0.0.1:${port}`,
        close: () => new Promise((done) => server.close(() => done())),
      });
    });
  });

const openApi = (timeoutMs = 2_000) => new OpenApiClient({ timeoutMs, limits });
const issue = () => issueWith(openApi(), v3, client, { deadline: deadline() });

describe('Function: probeVerdict', () => {
  it.each([
    [200, { verdict: 'valid' }],
    [204, { verdict: 'valid' }],
    [401, { verdict: 'revoked' }],
    [403, { verdict: 'unknown', reason: 'HTTP 403' }],
    [404, { verdict: 'unknown', reason: 'HTTP 404' }],
    [429, { verdict: 'unknown', reason: 'HTTP 429' }],
    [503, { verdict: 'unknown', reason: 'HTTP 503' }],
  ])('reads HTTP %i as %j', (status, verdict) => {
    expect(probeVerdict(status)).toEqual(verdict);
  });
});

describe('Method: OpenApiClient.probe, redirected', () => {
  it('follows no redirect: the token never reaches another origin, and a 3xx proves nothing (review of issue 24)', async () => {
    const seen: (string | undefined)[] = [];
    const elsewhere = httpServer((req, res) => {
      seen.push(req.headers['x-access-token'] as string | undefined);
      res.writeHead(200).end('{}');
    });
    const { url: there, close: closeThere } = await listening(elsewhere);
    const redirecting = httpServer((_req, res) => {
      res.writeHead(302, { location: `${there}/steal` }).end();
    });
    const { url: here, close: closeHere } = await listening(redirecting);
    try {
      const redirected = connection({
        baseUrl: here,
        probe: { path: '/open-api/v3/ping', intervalSeconds: 1 },
      });
      expect(
        await openApi().probe(redirected, 'at_secret-token', { deadline: deadline() }),
      ).toEqual({ verdict: 'unknown', reason: 'HTTP 302' });
      expect(seen).toEqual([]);
    } finally {
      await closeHere();
      await closeThere();
    }
  });
});

describe('Function: probeRequest', () => {
  it('is a GET of the path under baseUrl with the token in x-access-token only', () => {
    const request = probeRequest(
      connection({
        baseUrl: 'https://api.example.com/gw',
        probe: { path: '/v3/orders?limit=1', intervalSeconds: 5 },
      }),
      'at_token',
    );
    expect(request.method).toBe('GET');
    expect(request.url).toBe('https://api.example.com/gw/v3/orders?limit=1');
    expect(request.headers.get('x-access-token')).toBe('at_token');
    expect(request.url).not.toContain('at_token');
  });

  it('refuses a connection without a probe, naming no token', () => {
    expect(() => probeRequest(connection(), 'at_token')).toThrow(
      new TypeError("Connection 'sandbox' has no probe"),
    );
  });
});

describe('Method: OpenApiClient.probe, against the simulator', () => {
  it('says valid for a live token and revoked once another issuance revoked it', async () => {
    const first = await issue();
    expect(await openApi().probe(v3, first.accessToken, { deadline: deadline() })).toEqual({
      verdict: 'valid',
    });
    await issue();
    expect(await openApi().probe(v3, first.accessToken, { deadline: deadline() })).toEqual({
      verdict: 'revoked',
    });
    expect(simulator.requests().at(-1)).toMatchObject({ method: 'GET', path: '/open-api/v3/ping' });
  });

  it('takes a deadline that is no whole number of ms (what is left of a report’s time)', async () => {
    const { accessToken } = await issue();
    expect(
      await openApi().probe(v3, accessToken, { deadline: Deadline.in(systemClock, 1_000.5) }),
    ).toEqual({
      verdict: 'valid',
    });
  });

  it('proves nothing on a 5xx, a hang or a refused connection, naming no token', async () => {
    const { accessToken } = await issue();
    simulator.injectFault({ times: 1, status: 503, pathIncludes: '/ping', body: accessToken });
    const answers = [await openApi().probe(v3, accessToken, { deadline: deadline() })];
    simulator.injectFault({ times: 1, delayMs: 1_000, pathIncludes: '/ping' });
    answers.push(await openApi(200).probe(v3, accessToken, { deadline: deadline() }));
    const closed = await unusedPort();
    const unreachable = { ...v3, baseUrl: `http://127.0.0.1:${closed}` };
    answers.push(await openApi().probe(unreachable, accessToken, { deadline: deadline() }));
    expect(answers).toEqual([
      { verdict: 'unknown', reason: 'HTTP 503' },
      { verdict: 'unknown', reason: 'timed out after 200 ms' },
      { verdict: 'unknown', reason: 'ECONNREFUSED (connect)' },
    ]);
    expect(JSON.stringify(answers)).not.toContain(accessToken);
  });
});

describe('Verified reports end to end: the facade with the Open API client', () => {
  const broker = () => {
    const logger = captureLogger();
    const metrics = new CountingMetrics();
    const upstream = openApi();
    const broker = new TokenBroker({
      config: {
        connections: new Map([[v3.name, v3]]),
        defaultMinValiditySeconds: 60,
        refreshWindowSeconds: 600,
        memoryRecheckSeconds: 5,
        maxTokenLifetimeSeconds: 30 * 86_400,
        upstreamTimeoutMs: 2_000,
        // A report would wait a whole minute on age alone.
        invalidateMinAgeSeconds: 60,
      },
      timing: DEFAULT_TIMING,
      store: new InMemoryTokenStore(),
      secrets: new FakeSecretSource(client),
      issuer: upstream,
      probe: upstream,
      logger,
      metrics,
    });
    return { broker, logger, metrics };
  };

  it('replaces a token another issuer revoked at once, and keeps one the Open API accepts', async () => {
    const { broker: b, logger, metrics } = broker();
    const served = await b.getToken(v3.name, { deadline: deadline() });
    const issuedBefore = simulator.stats().issuances;
    // A report of a token the Open API accepts replaces nothing.
    expect(await b.invalidate(v3.name, served.record.accessToken, 'svc', deadline())).toEqual({
      invalidated: false,
      verified: 'valid',
    });
    expect((await b.getToken(v3.name, { deadline: deadline() })).record.accessToken).toBe(
      served.record.accessToken,
    );
    // Another system issues on the same client ID: the broker's token is revoked.
    await issue();
    expect(simulator.isValid(served.record.accessToken)).toBe(false);
    await new Promise((resolve) => setTimeout(resolve, 1_100)); // past the probe's interval
    expect(await b.invalidate(v3.name, served.record.accessToken, 'svc', deadline())).toEqual({
      invalidated: true,
      verified: 'revoked',
    });
    const next = await b.getToken(v3.name, { deadline: deadline() });
    expect(simulator.isValid(next.record.accessToken)).toBe(true);
    // One issuance by the broker (and the other issuer's).
    expect(simulator.stats().issuances - issuedBefore).toBe(2);
    expect(metrics.get('AnotherIssuerSuspected')).toBe(1);
    expect(JSON.stringify(logger.lines)).not.toContain(served.record.accessToken);
  });
});

/** A loopback port nothing listens on. */
const unusedPort = () =>
  new Promise<number>((resolve) => {
    const server = createServer().listen(0, '127.0.0.1', () => {
      const { port } = server.address() as { port: number };
      server.close(() => resolve(port));
    });
  });
