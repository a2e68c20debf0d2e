/**
 * Fleet behaviour with real processes: several containers, each a Node process running the
 * built bundle, sharing dynalite, the loopback Secrets Manager and the simulator (which revokes
 * a client's earlier tokens whenever it issues a new one).
 */
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { ensureTable, localDynamoDBClient } from '../local/dynamodb-local.js';
import { type Container, startContainer, tokenOf } from '../local/fleet.js';
import { type Stack, startStack } from '../local/stack.js';
import { buildPrivate, type PrivateBuild } from './support/build.js';

let build: PrivateBuild;
beforeAll(() => {
  build = buildPrivate('fleet');
});
afterAll(() => build.remove());

describe('Fleet of container processes', () => {
  let stack: Stack;
  let containers: Container[] = [];
  const start = async (count: number, extra: Record<string, string> = {}) => {
    const started = await Promise.all(
      Array.from({ length: count }, () =>
        startContainer({
          runner: build.container,
          bundle: build.bundle,
          env: { ...stack.env, BROKER_MEMORY_RECHECK_SECONDS: '1', ...extra },
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
    await Promise.all(containers.map((c) => c.kill('SIGKILL')));
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
    await dying.kill('SIGKILL');
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
