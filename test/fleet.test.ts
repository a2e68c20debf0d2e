/**
 * Fleet behaviour with real processes: several containers, each the built bundle in one frozen
 * execution environment (local/lambda-container.ts, as npm start, chaos and bench run it),
 * sharing dynalite, the loopback Secrets Manager and the simulator (which revokes a client's
 * earlier tokens whenever it issues a new one).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { issueWith } from '../lib/broker/issuance/issue-flow.js';
import { Deadline, systemClock } from '../lib/clock.js';
import { OpenApiClient } from '../lib/upstream/open-api.js';
import { ensureTable, localDynamoDBClient } from '../local/dynamodb-local.js';
import { tokenOf } from '../local/fleet.js';
import { type LambdaContainer, startLambdaContainer } from '../local/lambda-container.js';
import { type Stack, startStack } from '../local/stack.js';
import { type Build, sharedBuild } from './support/build.js';
import { connection } from './support/fakes.js';

let build: Build;
beforeAll(() => {
  build = sharedBuild();
});

describe('Fleet of container processes', () => {
  let stack: Stack;
  let containers: LambdaContainer[] = [];
  // A container is a function's concurrency of one: one environment, one memory cache.
  const start = async (count: number, extra: Record<string, string> = {}) => {
    const started = await Promise.all(
      Array.from({ length: count }, () =>
        startLambdaContainer({
          execution: 'frozen',
          bundle: build.bundle,
          bootstrap: build.bootstrap,
          env: { ...stack.env, BROKER_MEMORY_RECHECK_SECONDS: '1', ...extra },
          maxEnvironments: 1,
        }),
      ),
    );
    containers.push(...started);
    return started;
  };
  const getToken = { action: 'getToken', connection: 'sandbox' };

  beforeAll(async () => {
    stack = await startStack({ latencyMs: 50 });
  });
  afterEach(async () => {
    await Promise.all(containers.map((c) => c.close()));
    containers = [];
  });
  afterAll(() => stack.close());

  it('two brokers on one client ID: the one whose token the other revoked says so (ERROR line), when a caller reports the 401', async () => {
    // Two deployments (two tables: two stages, or npm start with production credentials) that
    // share the simulator's client ID, as the evaluation did by accident.
    const otherTable = `${stack.tableName}-other`;
    await ensureTable(localDynamoDBClient(stack.dynamodb.url), otherTable);
    const [first] = await start(1);
    const [second] = await start(1, { BROKER_TABLE_NAME: otherTable });
    if (!first || !second) throw new Error('containers did not start');
    const mine = tokenOf(await first.invoke(getToken));
    // The other broker issues for the same client ID: the upstream revokes the first's token.
    tokenOf(await second.invoke(getToken));
    expect(stack.simulator.isValid(mine)).toBe(false);
    // A caller of the first gets 401 and reports it, as the client's withToken does.
    await first.invoke({ action: 'invalidate', connection: 'sandbox', accessToken: mine });
    await new Promise((done) => setTimeout(done, 100));
    const errors = first
      .output()
      .split('\n')
      .filter((line) => line.includes('"level":"ERROR"'));
    expect(errors).toHaveLength(1);
    expect(errors[0]).toContain('Another system may be issuing tokens for this client ID');
    expect(errors[0]).not.toContain(mine);
    expect(second.output()).not.toContain('Another system may be issuing tokens');
  });

  it('another issuer, revoking the token 4 times: with a probe, each revocation costs one refresh and no caller a second 401 (and is still said); without, a window', async () => {
    // Production's bounds on a caller's word, not the stack's (0 s).
    const bounds = { BROKER_INVALIDATE_MIN_AGE_SECONDS: '2', BROKER_FORCED_MIN_AGE_SECONDS: '600' };
    const other = new OpenApiClient({ timeoutMs: 2_000, limits: { maxLifetimeSeconds: 86_400 } });
    const sandbox = connection({ baseUrl: stack.simulator.url });
    const trial = async (probe: boolean) => {
      const connections = JSON.parse(stack.env.BROKER_CONNECTIONS ?? '{}');
      if (probe) connections.sandbox.probe = { path: '/open-api/v3/ping' };
      const table = `${stack.tableName}-${probe ? 'probe' : 'ages'}`;
      await ensureTable(localDynamoDBClient(stack.dynamodb.url), table);
      const [broker] = await start(1, {
        ...bounds,
        BROKER_TABLE_NAME: table,
        BROKER_CONNECTIONS: JSON.stringify(connections),
      });
      if (!broker) throw new Error('container did not start');
      tokenOf(await broker.invoke(getToken));
      await new Promise((done) => setTimeout(done, 2_100)); // past the 2 s floor
      const before = stack.simulator.stats().issuances;
      let calls = 0;
      let failedAfterRetry = 0;
      for (let round = 0; round < 4; round += 1) {
        // Another system issues on the same client ID: the broker's token is revoked.
        await issueWith(other, sandbox, stack.v3Client, {
          deadline: Deadline.in(systemClock, 5_000),
        });
        // Four calls as the client's withToken makes them: use, report a 401, retry once.
        for (let call = 0; call < 4; call += 1) {
          calls += 1;
          const token = tokenOf(await broker.invoke(getToken));
          if (stack.simulator.isValid(token)) continue;
          await broker.invoke({ action: 'invalidate', connection: 'sandbox', accessToken: token });
          if (!stack.simulator.isValid(tokenOf(await broker.invoke(getToken)))) {
            failedAfterRetry += 1;
          }
        }
      }
      const issued = stack.simulator.stats().issuances - before - 4; // less the other system's
      const said = broker.output().includes('Another system may be issuing tokens');
      return { calls, failedAfterRetry, issued, said };
    };
    const withProbe = await trial(true);
    const withoutProbe = await trial(false);
    expect(withProbe).toEqual({ calls: 16, failedAfterRetry: 0, issued: 4, said: true });
    // Without one, the token issued on the first report is `forced`: later reports wait a window.
    expect(withoutProbe.failedAfterRetry).toBeGreaterThanOrEqual(9);
    expect(withoutProbe.issued).toBe(1);
  }, 60_000);

  it('N containers racing a cold cache cause exactly one issuance and hold one token', async () => {
    const fleet = await start(6);
    const before = stack.simulator.stats().issuances;
    const outcomes = await Promise.all(
      fleet.flatMap((c) => [c.invoke(getToken), c.invoke(getToken)]),
    );
    const tokens = new Set(outcomes.map(tokenOf));
    expect(tokens.size).toBe(1);
    expect(stack.simulator.stats().issuances - before).toBe(1);
    expect(stack.simulator.isValid([...tokens][0] ?? '')).toBe(true);
  });

  it('a container killed while holding the lease is replaced by another shortly after the lease expires', async () => {
    // Start from an empty cache for the legacy connection.
    // The default 10 s Lambda timeout: the heartbeat lease, not the deadline, bounds the wait.
    const [dying] = await start(1);
    const [survivor] = await start(1);
    if (!dying || !survivor) throw new Error('containers did not start');
    const before = stack.simulator.stats();
    const requestsBefore = stack.simulator.requests().length;
    stack.simulator.injectFault({
      times: 1,
      delayMs: 5_000,
      pathIncludes: 'open-api/oauth/authorize',
    });
    const pending = dying
      .invoke({ action: 'getToken', connection: 'legacy' })
      .catch(() => undefined);
    // Wait until the dying container is inside the flow, i.e. holds the lease.
    while (stack.simulator.requests().length === requestsBefore) {
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
    for (const pid of dying.pids()) process.kill(pid, 'SIGKILL');
    await pending;
    const outcome = await survivor.invoke({ action: 'getToken', connection: 'legacy' });
    const token = tokenOf(outcome);
    expect(stack.simulator.isValid(token)).toBe(true);
    expect(stack.simulator.stats().issuances - before.issuances).toBe(1);
    // The survivor found the dead container's lease, waited for it to expire, then took over.
    const output = survivor.output();
    expect(output).toMatch(/"message":"Waiting for another container to issue the token"/);
    expect(output.indexOf('Waiting for another container')).toBeLessThan(
      output.indexOf('Token issued by the Open API'),
    );
    const waiting = JSON.parse(
      output.split('\n').find((line) => line.includes('Waiting for another container')) ?? '{}',
    ) as { leaseExpiresInMs: number };
    expect(waiting.leaseExpiresInMs).toBeLessThanOrEqual(3_000);
  });

  it('invalidate with a stale token changes nothing; with the current one, the fleet re-issues exactly once', async () => {
    const fleet = await start(4);
    const [first, second] = fleet;
    if (!first || !second) throw new Error('containers did not start');
    const current = tokenOf(await first.invoke(getToken));
    await Promise.all(fleet.map((c) => c.invoke(getToken)));
    const before = stack.simulator.stats().issuances;

    const stale = await second.invoke({
      action: 'invalidate',
      connection: 'sandbox',
      accessToken: 'at_stale',
    });
    expect(stale).toEqual({ ok: true, result: { invalidated: false } });
    const unchanged = await Promise.all(fleet.map((c) => c.invoke(getToken)));
    expect(new Set(unchanged.map(tokenOf))).toEqual(new Set([current]));
    expect(stack.simulator.stats().issuances).toBe(before);

    const dropped = await second.invoke({
      action: 'invalidate',
      connection: 'sandbox',
      accessToken: current,
    });
    expect(dropped).toEqual({ ok: true, result: { invalidated: true } });
    // Every container re-checks its memory against the table within BROKER_MEMORY_RECHECK_SECONDS.
    await new Promise((resolve) => setTimeout(resolve, 1_100));
    const after = await Promise.all(fleet.flatMap((c) => [c.invoke(getToken), c.invoke(getToken)]));
    const tokens = new Set(after.map(tokenOf));
    expect(tokens.size).toBe(1);
    expect(tokens.has(current)).toBe(false);
    expect(stack.simulator.isValid([...tokens][0] ?? '')).toBe(true);
    expect(stack.simulator.stats().issuances - before).toBe(1);
  });
});
