/**
 * The chaos harness's own pieces: the fault proxy's link modes and hooks, the ledger's verdicts
 * and the simulator's issuance history they rely on. The chaos run itself is `npm run chaos`.
 */
import { createHash } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import type { RunResult, Scenario } from '../chaos/harness.js';
import { estimateMs, isBusy, planLanes } from '../chaos/lanes.js';
import { classify, duplicateIssuances, Ledger, tallyReuse } from '../chaos/ledger.js';
import { MarginMeter, type Margins, marginCells, marginText, tightest } from '../chaos/margins.js';
import {
  buildNeeds,
  checkInstalled,
  defaultPreviousRef,
  type Git,
  latestVersionTag,
  PINNED_PREVIOUS,
  PreviousReleaseError,
  resolveCommit,
} from '../chaos/previous-release.js';
import {
  type Exchange,
  type FaultProxy,
  type ProxiedRequest,
  startFaultProxy,
} from '../chaos/proxy.js';
import { CONFLICT_TYPE, type RegionWorld, startRegionWorld } from '../chaos/regions.js';
import { replacementsBeyondI4 } from '../chaos/release-scenarios.js';
import { faultsNotFired } from '../chaos/report.js';
import { dynamodbWrite, SCENARIOS } from '../chaos/scenarios.js';
import { DynamoDBTokenStore } from '../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../lib/broker/index.js';
import { ensureTable, localDynamoDBClient, startDynalite } from '../local/dynamodb-local.js';
import { generateClient, type Simulator, startSimulator } from '../local/simulator.js';

describe('Function: startFaultProxy', () => {
  let target: Server;
  let targetUrl: string;
  let hits: string[] = [];
  let proxy: FaultProxy | undefined;

  beforeAll(async () => {
    target = createServer((req, res) => {
      hits.push(`${req.method} ${req.url}`);
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{"ok":true}');
      });
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}`;
  });
  afterEach(async () => {
    await proxy?.close();
    proxy = undefined;
    hits = [];
  });
  afterAll(async () => {
    target.closeAllConnections();
    await new Promise<void>((resolve) => target.close(() => resolve()));
  });

  /**
   * One request through the proxy, on a fresh connection; never throws. The limit is the
   * client's own timeout: short only where the test waits for one (blackhole, stall, drop).
   */
  const call = async (url: string, limitMs = 5_000) => {
    const started = Date.now();
    try {
      const response = await fetch(`${url}/x?y=1`, {
        method: 'POST',
        body: '{"a":1}',
        headers: { connection: 'close' },
        signal: AbortSignal.timeout(limitMs),
      });
      return { status: response.status, body: await response.text(), ms: Date.now() - started };
    } catch (error) {
      const name = (error as Error).name;
      return { error: name === 'TimeoutError' ? 'timeout' : 'failed', ms: Date.now() - started };
    }
  };

  it('passes requests and answers through', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    expect(await call(proxy.url)).toMatchObject({ status: 200, body: '{"ok":true}' });
    expect(hits).toEqual(['POST /x?y=1']);
  });

  it('refuse: the client fails at once and nothing reaches the target', async () => {
    proxy = await startFaultProxy({ target: targetUrl, mode: { kind: 'refuse' } });
    // Failed, not timed out: refused at once.
    expect((await call(proxy.url)).error).toBe('failed');
    expect(hits).toEqual([]);
  });

  it('blackhole: no answer and nothing reaches the target', async () => {
    proxy = await startFaultProxy({ target: targetUrl, mode: { kind: 'blackhole' } });
    expect(await call(proxy.url, 200)).toMatchObject({ error: 'timeout' });
    expect(hits).toEqual([]);
    expect(proxy.stats().blackholed).toBeGreaterThan(0);
  });

  it('stall: the request reaches the target, its answer never comes back', async () => {
    proxy = await startFaultProxy({ target: targetUrl, mode: { kind: 'stall' } });
    expect(await call(proxy.url, 200)).toMatchObject({ error: 'timeout' });
    // The target may read it after the client gave up, on a loaded machine.
    await expect.poll(() => hits).toEqual(['POST /x?y=1']);
  });

  it('delay: the answer comes after the drawn delay', async () => {
    proxy = await startFaultProxy({
      target: targetUrl,
      mode: { kind: 'delay', minMs: 120, maxMs: 150 },
    });
    const result = await call(proxy.url, 1_000);
    expect(result).toMatchObject({ status: 200 });
    expect(result.ms).toBeGreaterThanOrEqual(115);
  });

  it('setMode back to pass heals the link', async () => {
    proxy = await startFaultProxy({ target: targetUrl, mode: { kind: 'refuse' } });
    expect((await call(proxy.url)).error).toBe('failed');
    proxy.setMode({ kind: 'pass' });
    expect(await call(proxy.url)).toMatchObject({ status: 200 });
  });

  it('observe sees each exchange once: when it arrived, when the target answered, when its client was (issue 35: A1, A4)', async () => {
    const seen: Readonly<Exchange>[] = [];
    proxy = await startFaultProxy({ target: targetUrl, observe: (e) => seen.push(e) });
    proxy.setHooks({
      onResponse: async () => {
        await new Promise((resolve) => setTimeout(resolve, 100));
        return undefined;
      },
    });
    await call(proxy.url, 1_000);
    proxy.setHooks({ onRequest: () => ({ kind: 'drop' }) });
    await call(proxy.url, 200);
    await expect.poll(() => seen.length).toBe(2);

    const [answered, dropped] = seen;
    expect(answered?.request.path).toBe('/x?y=1');
    expect(answered?.targetAnsweredAt).toBeGreaterThanOrEqual(answered?.arrivedAt ?? 0);
    expect((answered?.answeredAt ?? 0) - (answered?.targetAnsweredAt ?? 0)).toBeGreaterThanOrEqual(
      95,
    );
    expect(dropped?.targetAnsweredAt).toBeUndefined();
    expect(dropped?.answeredAt).toBeUndefined();
  });

  it('hooks see the request and the answer, and can hold a request', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    const seen: string[] = [];
    proxy.setHooks({
      onRequest: async (request) => {
        seen.push(`request ${request.method} ${request.path} ${request.body.toString()}`);
        await new Promise((resolve) => setTimeout(resolve, 100));
      },
      onResponse: (_, response) => {
        seen.push(`answer ${response.status} ${response.body.toString()}`);
      },
    });
    const result = await call(proxy.url, 1_000);
    expect(result).toMatchObject({ status: 200 });
    expect(result.ms).toBeGreaterThanOrEqual(95);
    expect(seen).toEqual(['request POST /x?y=1 {"a":1}', 'answer 200 {"ok":true}']);
  });

  it('an answer fault "reset": the target processed the request, the client sees a reset', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    proxy.setHooks({ onResponse: () => ({ kind: 'reset' }) });
    // Failed, not timed out: reset.
    expect((await call(proxy.url)).error).toBe('failed');
    expect(hits).toEqual(['POST /x?y=1']);
    expect(proxy.stats()).toMatchObject({ forwarded: 1, answered: 0, answersReset: 1 });
  });

  it('an answer fault "drop": the target processed the request, the client never hears back', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    proxy.setHooks({ onResponse: () => ({ kind: 'drop' }) });
    expect(await call(proxy.url, 200)).toMatchObject({ error: 'timeout' });
    await expect
      .poll(() => proxy?.stats())
      .toMatchObject({ forwarded: 1, answered: 0, answersDropped: 1 });
    expect(hits).toEqual(['POST /x?y=1']);
  });

  it('an answer fault "replace": the target processed the request, the client gets another answer', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    proxy.setHooks({
      onResponse: async () => ({
        kind: 'replace',
        response: {
          status: 502,
          headers: { 'content-type': 'application/json' },
          body: Buffer.from('{"code":"999999","message":"bad gateway"}'),
        },
      }),
    });
    expect(await call(proxy.url, 1_000)).toMatchObject({
      status: 502,
      body: '{"code":"999999","message":"bad gateway"}',
    });
    expect(hits).toEqual(['POST /x?y=1']);
    expect(proxy.stats()).toMatchObject({ answered: 1, answersReplaced: 1 });
    // Only the answer it was returned for: the next one passes.
    proxy.setHooks({});
    expect(await call(proxy.url)).toMatchObject({ status: 200, body: '{"ok":true}' });
  });

  it('a request fault answers or drops a request that never reaches the target', async () => {
    let kind: 'answer' | 'drop' = 'answer';
    proxy = await startFaultProxy({
      target: targetUrl,
      hooks: {
        onRequest: () =>
          kind === 'answer'
            ? { kind, response: { status: 409, headers: {}, body: Buffer.from('no') } }
            : { kind },
      },
    });
    expect(await call(proxy.url)).toMatchObject({ status: 409, body: 'no' });
    kind = 'drop';
    expect((await call(proxy.url, 300)).error).toBe('timeout');
    expect(hits).toEqual([]);
    expect(proxy.stats()).toMatchObject({ requestsAnswered: 1, requestsDropped: 1, forwarded: 0 });
  });

  it('a held request is still forwarded after its client gave up', async () => {
    proxy = await startFaultProxy({ target: targetUrl });
    proxy.setHooks({ onRequest: () => new Promise((resolve) => setTimeout(resolve, 150)) });
    expect(await call(proxy.url, 50)).toMatchObject({ error: 'timeout' });
    // Polled up to 5 s, not the default 1 s: under load the held request once reached the target later.
    await expect.poll(() => hits, { timeout: 5_000 }).toEqual(['POST /x?y=1']);
  });
});

describe('Function: startRegionWorld (MRSC regions in front of one table)', () => {
  let target: Server;
  let targetUrl: string;
  let hits: string[] = [];
  let world: RegionWorld | undefined;

  beforeAll(async () => {
    target = createServer((req, res) => {
      hits.push(String(req.headers['x-amz-target']));
      req.resume();
      req.on('end', () => {
        res.writeHead(200, { 'content-type': 'application/x-amz-json-1.0' });
        res.end('{}');
      });
    });
    await new Promise<void>((resolve) => target.listen(0, '127.0.0.1', resolve));
    targetUrl = `http://127.0.0.1:${(target.address() as AddressInfo).port}`;
  });
  afterEach(async () => {
    await world?.close();
    world = undefined;
    hits = [];
  });
  afterAll(async () => {
    target.closeAllConnections();
    await new Promise<void>((resolve) => target.close(() => resolve()));
  });

  const start = (latencies: number[]) =>
    startRegionWorld({
      target: targetUrl,
      regions: latencies.map((latencyMs, i) => ({ name: `r${i}`, latencyMs })),
      jitterMs: 0,
    });
  /** One DynamoDB JSON request to a region; never throws. */
  const send = async (url: string, operation: string, body: object, limitMs = 5_000) => {
    try {
      const response = await fetch(url, {
        method: 'POST',
        headers: {
          'x-amz-target': `DynamoDB_20120810.${operation}`,
          'content-type': 'application/x-amz-json-1.0',
          connection: 'close',
        },
        body: JSON.stringify(body),
        signal: AbortSignal.timeout(limitMs),
      });
      return { status: response.status, body: (await response.json()) as Record<string, unknown> };
    } catch {
      return { status: 0, body: {} };
    }
  };
  const write = (pk: string) => ({ TableName: 't', Key: { pk: { S: pk } } });

  it('holds writes and strong reads for the region’s latency, and nothing else', async () => {
    world = await start([60]);
    const [region] = world.regions;
    const url = region?.url ?? '';
    const started = Date.now();
    await send(url, 'UpdateItem', write('a'));
    expect(Date.now() - started).toBeGreaterThanOrEqual(55);
    await send(url, 'GetItem', { ...write('a'), ConsistentRead: true });
    await send(url, 'GetItem', write('a'));
    expect(region?.stats()).toEqual({ writes: 1, strongReads: 1, conflicts: 0, isolated: 0 });
    expect(hits).toHaveLength(3);
  });

  it('answers the later of two writes to one item from different regions in flight together with the conflict, unapplied', async () => {
    world = await start([80, 20]);
    const [east, west] = world.regions;
    const first = send(east?.url ?? '', 'UpdateItem', write('a'));
    await new Promise((resolve) => setTimeout(resolve, 20));
    const [won, lost, other] = await Promise.all([
      first,
      send(west?.url ?? '', 'PutItem', { TableName: 't', Item: { pk: { S: 'a' }, x: { N: '1' } } }),
      send(west?.url ?? '', 'UpdateItem', write('b')),
    ]);
    expect(won.status).toBe(200);
    expect(other.status).toBe(200);
    expect(lost).toEqual({
      status: 400,
      body: { __type: CONFLICT_TYPE, message: expect.any(String) },
    });
    expect(world.conflicts()).toBe(1);
    expect(hits).toEqual(['DynamoDB_20120810.UpdateItem', 'DynamoDB_20120810.UpdateItem']);
  });

  it('lets writes of one region to one item overlap, and races none once conflicts are off', async () => {
    world = await start([40, 40]);
    const [a, b] = world.regions;
    const same = await Promise.all([
      send(a?.url ?? '', 'UpdateItem', write('a')),
      send(a?.url ?? '', 'UpdateItem', write('a')),
    ]);
    world.setConflicts(false);
    const apart = await Promise.all([
      send(a?.url ?? '', 'UpdateItem', write('a')),
      send(b?.url ?? '', 'UpdateItem', write('a')),
    ]);
    expect([...same, ...apart].map((r) => r.status)).toEqual([200, 200, 200, 200]);
  });

  it('isolates a region: its writes and strong reads hang or fail, its other reads answer, and it heals', async () => {
    world = await start([10]);
    const [region] = world.regions;
    const url = region?.url ?? '';
    region?.isolate('hang');
    expect((await send(url, 'UpdateItem', write('a'), 300)).status).toBe(0);
    expect((await send(url, 'GetItem', write('a'))).status).toBe(200);
    region?.isolate('fail');
    const failed = await send(url, 'GetItem', { ...write('a'), ConsistentRead: true });
    expect(failed.status).toBe(500);
    expect(region?.isolated()).toBe(true);
    region?.heal();
    expect((await send(url, 'UpdateItem', write('a'))).status).toBe(200);
    expect(region?.stats()).toMatchObject({ isolated: 2 });
    expect(hits).toEqual(['DynamoDB_20120810.GetItem', 'DynamoDB_20120810.UpdateItem']);
  });
});

describe('Function: dynamodbWrite (what the scenarios aim at)', () => {
  it('tells apart every write the store adapter sends, copies included, and an older release’s token PutItem', async () => {
    const dynalite = await startDynalite();
    const seen: ProxiedRequest[] = [];
    const proxy = await startFaultProxy({
      target: dynalite.url,
      hooks: { onRequest: (request) => void seen.push(request) },
    });
    const client = localDynamoDBClient(proxy.url);
    await ensureTable(client, 'writes');
    const store = new DynamoDBTokenStore(client, 'writes');
    const kinds = async (act: () => Promise<unknown>) => {
      seen.length = 0;
      await act();
      return seen.map(dynamodbWrite);
    };
    const now = Date.now();
    const terms = (version: string, durationMs: number) => ({
      version,
      leaseExpiresAt: now + durationMs,
      durationMs,
      countdown: 1,
    });
    const token = {
      connection: 'c',
      accessToken: 't',
      tokenDigest: tokenDigest('t'),
      issuedAt: now,
      expiresAt: now + 60_000,
    };
    try {
      expect(
        await kinds(() =>
          store.acquireLease('c', {
            holder: 'h',
            replacesDigest: undefined,
            ...terms('v1', 3_000),
          }),
        ),
      ).toEqual(['take']);
      expect(
        await kinds(() =>
          store.renewLease('c', { holder: 'h', version: 'v1' }, terms('v2', 3_000)),
        ),
      ).toEqual(['heartbeat']);
      expect(
        await kinds(() =>
          store.renewLease('c', { holder: 'h', version: 'v2' }, terms('v3', 8_000)),
        ),
      ).toEqual(['confirm']);
      expect(await kinds(() => store.putToken(token, { holder: 'h', version: 'v3' }))).toEqual([
        'put',
      ]);
      expect(await kinds(() => store.setCopies('c', 2))).toEqual([
        'other',
        'other',
        'copy',
        'copy',
      ]);
      expect(await kinds(() => store.deleteIfMatches('c', token.tokenDigest))).toEqual([
        'drop-token',
        'copy',
        'copy',
      ]);
      await store.acquireLease('c', {
        holder: 'h2',
        replacesDigest: undefined,
        ...terms('w1', 3_000),
      });
      expect(await kinds(() => store.releaseLease('c', { holder: 'h2', version: 'w1' }))).toEqual([
        'release',
        'copy',
        'copy',
      ]);
      // An older release writes the token whole.
      const body = Buffer.from(
        JSON.stringify({ TableName: 'writes', Item: { pk: { S: 'token#c' } } }),
      );
      expect(
        dynamodbWrite({
          ...(seen[0] as ProxiedRequest),
          headers: { 'x-amz-target': 'DynamoDB_20120810.PutItem' },
          body,
        }),
      ).toBe('put');
    } finally {
      client.destroy();
      await proxy.close();
      await dynalite.close();
    }
  });
});

describe('Function: classify', () => {
  const history = (revokedAt: number | null, expiresAt = 10_000) => ({
    issuedAt: 0,
    expiresAt,
    revokedAt,
  });

  it('judges a token revoked before the request was sent as a violation', () => {
    expect(classify(history(999), 1_000, 1_010)).toBe('revoked-before-request');
  });

  it('reports a token revoked while the request was under way apart', () => {
    expect(classify(history(1_000), 1_000, 1_010)).toBe('revoked-during-request');
    expect(classify(history(1_010), 1_000, 1_010)).toBe('revoked-during-request');
  });

  it('accepts a token revoked only after it was served', () => {
    expect(classify(history(1_011), 1_000, 1_010)).toBe('valid');
    expect(classify(history(null), 1_000, 1_010)).toBe('valid');
  });

  it('flags expired and unknown tokens', () => {
    expect(classify(history(null, 1_005), 1_000, 1_010)).toBe('expired');
    expect(classify(undefined, 1_000, 1_010)).toBe('unknown');
  });
});

describe('Function: tallyReuse', () => {
  const revoked = (revokedAt: number | null) => ({ issuedAt: 0, expiresAt: 100_000, revokedAt });

  it('counts a grant that outlives its token’s revocation, and by how long', () => {
    const tally = tallyReuse(
      [
        { digest: 'a', sentAt: 1_000, maxAgeMs: 4_000 },
        { digest: 'b', sentAt: 1_000, maxAgeMs: 4_000 },
        { digest: 'c', sentAt: 1_000, maxAgeMs: 0 },
      ],
      new Map([
        ['a', revoked(4_500)],
        ['b', revoked(5_000)],
        ['c', revoked(1_500)],
      ]),
      new Set(),
    );
    // a: revoked 500 ms before its grant ran out; b: exactly at its end (allowed); c: no grant.
    expect(tally).toEqual({
      grants: 2,
      meanMaxAgeMs: 4_000,
      pastRevocation: 1,
      pastRevocationReported: 0,
      maxOverrunMs: 500,
    });
  });

  it('leaves answers revoked before their request to the ledger, and counts reported tokens apart', () => {
    const tally = tallyReuse(
      [
        { digest: 'a', sentAt: 1_000, maxAgeMs: 4_000 },
        { digest: 'r', sentAt: 1_000, maxAgeMs: 4_000 },
        { digest: 'n', sentAt: 1_000, maxAgeMs: 4_000 },
      ],
      new Map([
        ['a', revoked(999)],
        ['r', revoked(2_000)],
        ['n', revoked(null)],
      ]),
      new Set(['r']),
    );
    expect(tally.pastRevocation).toBe(0);
    expect(tally.pastRevocationReported).toBe(1);
  });
});

describe('Class: Ledger', () => {
  it('tallies outcomes and counts misses on a faulted container apart', () => {
    const ledger = new Ledger(0);
    ledger.faulted({ container: 1, from: 100, to: 200 });
    ledger.record({
      container: 0,
      sentAt: 10,
      receivedAt: 20,
      outcome: { kind: 'token', verdict: 'revoked-before-request' },
    });
    ledger.record({
      container: 0,
      sentAt: 30,
      receivedAt: 40,
      outcome: { kind: 'token', verdict: 'valid' },
    });
    ledger.record({
      container: 1,
      sentAt: 150,
      receivedAt: 950,
      outcome: { kind: 'unanswered', reason: 'Lambda timeout' },
    });
    ledger.record({
      container: 2,
      sentAt: 150,
      receivedAt: 950,
      outcome: { kind: 'unanswered', reason: 'no answer' },
    });
    ledger.record({
      container: 2,
      sentAt: 960,
      receivedAt: 970,
      outcome: { kind: 'error', errorType: 'UpstreamUnavailableError' },
    });
    expect(ledger.tally()).toMatchObject({
      requests: 5,
      served: 2,
      valid: 1,
      revokedBeforeRequest: 1,
      unanswered: 2,
      unansweredOnFaulted: 1,
      errors: { UpstreamUnavailableError: 1 },
      firstRevokedAtMs: 20,
      lastRevokedAtMs: 20,
      revokedByContainer: { '0': 1 },
    });
  });

  it('counts issuances closer than the gap as duplicates', () => {
    expect(duplicateIssuances([0, 100, 6_000, 6_050, 12_000], 5_000)).toBe(2);
  });
});

describe('Simulator: GET /__simulator/tokens/<digest>', () => {
  let simulator: Simulator;
  // Plain requests from the test itself: this client does not run in strict mode.
  const client = { ...generateClient('chaos'), signing: false as const };
  beforeAll(async () => {
    simulator = await startSimulator({ clients: [client], expiresIn: 60 });
  });
  afterAll(() => simulator.close());

  const issue = async () => {
    const authorize = await fetch(
      `${simulator.url}/open-api/v3/oauth/authorize?clientId=${client.clientId}`,
    );
    const { data } = (await authorize.json()) as { data: { code: string } };
    const response = await fetch(`${simulator.url}/open-api/v3/oauth/access-token`, {
      method: 'POST',
      headers: { 'content-type': 'application/json' },
      body: JSON.stringify({ clientId: client.clientId, code: data.code }),
    });
    return ((await response.json()) as { data: { accessToken: string } }).data.accessToken;
  };
  const lookup = async (token: string) => {
    const digest = createHash('sha256').update(token).digest('base64url');
    const response = await fetch(`${simulator.url}/__simulator/tokens/${digest}`);
    return { status: response.status, body: (await response.json()) as Record<string, unknown> };
  };

  it('tells when a token was issued and when a later issuance revoked it, by digest only', async () => {
    const first = await issue();
    const standing = await lookup(first);
    expect(standing.status).toBe(200);
    expect(standing.body.revokedAt).toBeNull();
    expect(Object.keys(standing.body).sort()).toEqual(['expiresAt', 'issuedAt', 'revokedAt']);

    const second = await issue();
    const revoked = await lookup(first);
    const current = await lookup(second);
    expect(revoked.body.revokedAt).toBe(current.body.issuedAt);
    expect(current.body.revokedAt).toBeNull();
    expect(simulator.isValid(first)).toBe(false);
  });

  it('answers 404 for a digest it never issued', async () => {
    expect((await lookup('at_never-issued')).status).toBe(404);
  });
});

describe('Function: planLanes', () => {
  const names = (plan: Scenario[][]) => plan.map((lane) => lane.map((s) => s.name));
  const busy = SCENARIOS.filter(isBusy);
  const idle = SCENARIOS.filter((s) => !isBusy(s));

  it('never runs two busy fleets at once: all of them in the first lane, in order', () => {
    const plan = planLanes(SCENARIOS, undefined, 2);
    expect(names(plan)[0]?.slice(0, busy.length)).toEqual(busy.map((s) => s.name));
    for (const lane of plan.slice(1)) expect(lane.filter(isBusy)).toEqual([]);
    expect(plan.flat().toSorted((a, b) => a.name.localeCompare(b.name))).toEqual(
      [...SCENARIOS].toSorted((a, b) => a.name.localeCompare(b.name)),
    );
  });

  it('sorts the suite into busy fleets and mostly idle ones (the issue-17 and issue-26 scenarios)', () => {
    expect(idle.map((s) => s.name)).toEqual([
      'idle-fleet-requests-only',
      'idle-fleet-no-extension',
      'idle-fleet-foreground-only',
      'idle-fleet-warm-up',
      'mixed-settings',
      'holder-stopped-past-lease',
      'post-in-socket-at-freeze',
      'regions-three',
      'regions-skewed',
      'regions-isolated-holder',
      'regions-conflicts',
    ]);
  });

  it('puts the idle fleets, longest first, in the lane with the least run time', () => {
    const short = { ...SCENARIOS[0], name: 'short' } as Scenario;
    const plan = planLanes([short, ...idle.slice(0, 2)], undefined, 2);
    // 20 s of busy runs in lane 1: the first 75 s idle fleet goes beside it, the second after it.
    expect(names(plan)).toEqual([
      ['short', 'idle-fleet-no-extension'],
      ['idle-fleet-requests-only'],
    ]);
  });

  it('with three lanes, the suite lasts its busy lane: no idle lane runs longer', () => {
    const plan = planLanes(SCENARIOS, undefined, 3);
    const runTime = (lane: Scenario[]) => lane.reduce((t, s) => t + estimateMs(s, undefined), 0);
    expect(plan).toHaveLength(3);
    expect(plan[0]?.filter((s) => !isBusy(s))).toEqual([]);
    for (const lane of plan.slice(1)) {
      expect(runTime(lane)).toBeLessThanOrEqual(runTime(plan[0] ?? []));
    }
  });

  it('with one lane, runs the given order; drops empty lanes', () => {
    expect(names(planLanes(SCENARIOS, undefined, 1))).toEqual([SCENARIOS.map((s) => s.name)]);
    expect(names(planLanes(busy.slice(0, 2), undefined, 2))).toEqual([
      busy.slice(0, 2).map((s) => s.name),
    ]);
    expect(planLanes([], undefined, 2)).toEqual([]);
  });
});

describe('Class: MarginMeter (issue 35: how close a run came to A1-A4)', () => {
  const request = (path: string, target = '') =>
    ({ path, headers: { 'x-amz-target': target } }) as unknown as ProxiedRequest;
  const meter = () =>
    new MarginMeter({
      upstreamTimeoutMs: 5_000,
      storeRoundTripMs: 50,
      skewsMs: [2_500, 0, -1_000],
    });

  it('A1: the latest access-token POST processed after its arrival, against twice the upstream timeout', () => {
    const m = meter();
    m.upstream({ request: request('/oauth/access-token'), arrivedAt: 0, targetAnsweredAt: 9_050 });
    m.upstream({ request: request('/oauth/access-token?x=1'), arrivedAt: 0, targetAnsweredAt: 60 });
    m.upstream({ request: request('/oauth/access-token'), arrivedAt: 0 }); // never processed
    m.upstream({ request: request('/oauth/authorize'), arrivedAt: 0, targetAnsweredAt: 12_000 });
    expect(m.margins().a1).toEqual({ worstMs: 9_050, boundMs: 10_000, posts: 2 });
  });

  it('A2: each delay less the pauses injected into that process, only those closed during the run', () => {
    const m = meter();
    m.run({ from: 1_000, to: 10_000 });
    m.injected(7, { from: 2_000, to: 2_400 });
    const counted = m.environment(7, [
      { from: 1_990, to: 2_520, delayMs: 520 }, // 400 ms of it injected: 120 left
      { from: 5_000, to: 5_090, delayMs: 80 },
      { from: 500, to: 900, delayMs: 390 }, // before the run
      { from: 10_000, to: 10_500, delayMs: 490 }, // at shutdown
    ]);
    m.environment(8, [{ from: 3_000, to: 3_040, delayMs: 30 }]);
    expect(counted.map((d) => d.delayMs)).toEqual([120, 80]);
    expect(m.margins().a2).toEqual({
      worstMs: 120,
      boundMs: 100,
      over: 1,
      injectedMaxMs: 400,
      environments: 2,
    });
  });

  it('A3: the widest pair of clocks; A4: the slowest answered store call, named', () => {
    const m = meter();
    m.dynamodb({
      request: request('/', 'DynamoDB_20120810.UpdateItem'),
      arrivedAt: 0,
      answeredAt: 70,
    });
    m.dynamodb({
      request: request('/', 'DynamoDB_20120810.GetItem'),
      arrivedAt: 0,
      answeredAt: 20,
    });
    m.dynamodb({ request: request('/', 'DynamoDB_20120810.GetItem'), arrivedAt: 0 }); // no answer
    const { a3, a4 } = m.margins();
    expect(a3).toEqual({ worstMs: 3_500, boundMs: 10_000 });
    expect(a4).toEqual({ worstMs: 70, boundMs: 50, operation: 'UpdateItem', calls: 2 });
  });

  it('says each margin left, or how far over, and keeps the tightest of several runs', () => {
    expect(marginText(38, 100)).toBe('38 ms of 100 ms (62 ms left)');
    expect(marginText(9_050, 10_000)).toBe('9.05 s of 10.00 s (950 ms left)');
    expect(marginText(130, 100)).toBe('130 ms of 100 ms (**30 ms over**)');
    const run = (a1: number, a2: number): Margins => ({
      a1: { worstMs: a1, boundMs: 10_000, posts: 1 },
      a2: { worstMs: a2, boundMs: 100, over: a2 > 100 ? 1 : 0, injectedMaxMs: 0, environments: 4 },
      a3: { worstMs: 0, boundMs: 10_000 },
      a4: { worstMs: 10, boundMs: 50, operation: 'GetItem', calls: 9 },
    });
    const worst = tightest([run(60, 130), run(9_050, 40)]);
    expect(worst?.a1.worstMs).toBe(9_050);
    expect(worst?.a2).toMatchObject({ worstMs: 130, over: 1, environments: 8 });
    expect(worst && marginCells(worst)).toEqual([
      '9.05 s of 10.00 s (950 ms left)',
      '130 ms of 100 ms (**30 ms over**), 1 over',
      '0 ms of 10.00 s (10.00 s left)',
      '10 ms of 50 ms (40 ms left) (GetItem)',
    ]);
    expect(tightest([])).toBeUndefined();
  });
});

describe('Function: faultsNotFired', () => {
  const run = (faultsInjected: number) => ({ faultsInjected }) as RunResult;

  it('names each run of a fault scenario whose fault never fired, and only those', () => {
    const summaries = [
      { scenario: 'pause-during-post', runs: [run(2), run(0)] },
      { scenario: 'control', runs: [run(0)] },
    ];
    expect(faultsNotFired(summaries, (name) => name !== 'control')).toEqual([
      'pause-during-post #2: its fault never fired',
    ]);
  });
});

describe('Function: latestVersionTag and defaultPreviousRef (the previous release)', () => {
  /** A git that knows only the given tags and commits. */
  const fakeGit =
    (tags: string[], commits: Record<string, string> = {}, onHead: string[] = []): Git =>
    (args) => {
      if (args[0] === 'tag') return (args[1] === '--points-at' ? onHead : tags).join('\n');
      if (args[0] === 'rev-parse') {
        const ref = String(args.at(-1)).replace(/\^\{commit\}$/, '');
        const commit = commits[ref];
        if (commit === undefined) throw new Error('exit 1');
        return commit;
      }
      throw new Error(`unexpected git ${args.join(' ')}`);
    };

  it('picks the highest version tag by number, not by text; pre-releases and other tags aside', () => {
    expect(latestVersionTag(['v0.9.0', 'v0.10.0', '0.2.1', 'v1.0.0-rc.1', 'nightly', ''])).toBe(
      'v0.10.0',
    );
    expect(latestVersionTag(['0.1.0', 'v0.1.1'])).toBe('v0.1.1');
  });

  it('defaults to the latest version tag reachable from HEAD and not on it, else the pinned 0.1.0 commit', () => {
    expect(defaultPreviousRef(fakeGit(['v0.2.0', 'v0.3.0']))).toBe('v0.3.0');
    expect(defaultPreviousRef(fakeGit([]))).toBe(PINNED_PREVIOUS.commit);
    expect(defaultPreviousRef(fakeGit(['nightly']))).toBe(PINNED_PREVIOUS.commit);
    // A tag on HEAD is this tree itself, not the release it rolls from.
    expect(defaultPreviousRef(fakeGit(['v0.2.0', 'v0.3.0'], {}, ['v0.3.0']))).toBe('v0.2.0');
    expect(defaultPreviousRef(fakeGit(['v0.3.0'], {}, ['v0.3.0']))).toBe(PINNED_PREVIOUS.commit);
  });

  it('throws a PreviousReleaseError that names the ref and how to choose another when git knows no such commit', () => {
    const git = fakeGit([], { 'v0.3.0': 'c'.repeat(40) });
    expect(resolveCommit(git, 'v0.3.0')).toBe('c'.repeat(40));
    for (const ref of ['v9.9.9', '', '--all']) {
      let error: unknown;
      try {
        resolveCommit(git, ref);
      } catch (e) {
        error = e;
      }
      expect(error).toBeInstanceOf(PreviousReleaseError);
      expect((error as Error).message).toContain(`'${ref}'`);
      expect((error as Error).message).toContain('--previous <ref>');
      expect((error as Error).message).toContain('git fetch --unshallow');
    }
  });
});

describe('Function: checkInstalled (the previous release builds offline)', () => {
  const needs = buildNeeds({
    dependencies: { zod: '4.6.7', cockatiel: '4.0.0' },
    devDependencies: { esbuild: '0.28.2', vitest: '5.1.1' },
  });

  it('needs the old tree’s runtime packages and esbuild, not its other dev tools', () => {
    expect(needs).toEqual({ zod: '4.6.7', cockatiel: '4.0.0', esbuild: '0.28.2' });
  });

  it('reports a version that differs as drift, and builds', () => {
    const installed = (name: string) => (name === 'zod' ? '4.7.0' : needs[name]);
    expect(checkInstalled(needs, installed, '0.1.0 (a5f1bf2)')).toEqual([
      'zod: 4.6.7 pinned, 4.7.0 installed',
    ]);
    expect(checkInstalled(needs, (name) => needs[name], 'x')).toEqual([]);
  });

  it('refuses, naming the packages, when one is not installed: nothing is downloaded', () => {
    const installed = (name: string) => (name === 'cockatiel' ? undefined : needs[name]);
    expect(() => checkInstalled(needs, installed, '0.1.0 (a5f1bf2)')).toThrow(
      /0\.1\.0 \(a5f1bf2\) needs cockatiel@4\.0\.0, not installed/,
    );
  });
});

describe('Function: replacementsBeyondI4', () => {
  it('allows one replacement per refresh window, and one right after each natural issuance', () => {
    // Cold start, a forced replacement 3 s later, the natural refresh 12 s after that.
    expect(replacementsBeyondI4([400, 3_400, 15_400], 9_000)).toBe(0);
    // The refresh, then one replacement at once: allowed after a natural issuance.
    expect(replacementsBeyondI4([400, 11_000, 12_000], 9_000)).toBe(0);
  });

  it('counts each replacement of a replacement within a window', () => {
    // The mixed fleet with 0.1.0: every forcing request to an old container replaced the token.
    expect(replacementsBeyondI4([400, 4_800, 11_400, 18_100], 9_000)).toBe(2);
    expect(replacementsBeyondI4([], 9_000)).toBe(0);
    expect(replacementsBeyondI4([1, 2], 9_000)).toBe(0);
  });
});
