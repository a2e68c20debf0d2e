import { DynamoDBClient, GetItemCommand, UpdateItemCommand } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { DynamoDBTokenStore, tokenKey } from '../../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../../lib/broker/index.js';
import { systemClock } from '../../../lib/clock.js';
import type { Lease, LeaseRequest, TokenRecord } from '../../../lib/ports.js';
import { applyEnv, type Stack, startStack } from '../../../local/stack.js';
import { fleetBroker, Upstream } from '../../support/fleet-model.js';
import { sweepExpired } from '../../support/ttl-sweep.js';
import { deadline } from '../broker/setup.js';

const record = (accessToken: string, expiresAt: number, connection: string): TokenRecord => ({
  connection,
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - 86_400_000,
  expiresAt,
});

// The port's behaviour (leases, conditional writes, compare-and-delete) is checked on dynalite and
// on DynamoDB Local by test/lib/token-store.contract.test.ts; this file checks the DynamoDB side
// only: the item's shape, its TTL, and how SDK failures surface.
describe('Class: DynamoDBTokenStore (dynalite)', () => {
  let stack: Stack;
  let client: DynamoDBClient;
  let store: DynamoDBTokenStore;
  const now = Date.now();
  const lease = (holder: string, replacesDigest?: string, takeOver?: Lease): LeaseRequest => ({
    holder,
    version: `v-${holder}`,
    leaseExpiresAt: now + 10_000,
    durationMs: 10_000,
    countdown: 0,
    replacesDigest,
    takeOver,
  });
  /** Writes an item as a release that recorded no lease version would (and its renewals). */
  const legacyLease = (connection: string, holder: string, expiresAt: number) =>
    client.send(
      new UpdateItemCommand({
        TableName: stack.tableName,
        Key: tokenKey(connection),
        UpdateExpression:
          'SET leaseHolder = :h, leaseExpiresAt = :e, leaseDurationMs = :d, leaseCountdown = :c',
        ExpressionAttributeValues: {
          ':h': { S: holder },
          ':e': { N: String(expiresAt) },
          ':d': { N: '3000' },
          ':c': { N: '0' },
        },
      }),
    );
  const rawItem = async (connection: string) =>
    (
      await client.send(
        new GetItemCommand({
          TableName: stack.tableName,
          Key: tokenKey(connection),
          ConsistentRead: true,
        }),
      )
    ).Item;

  beforeAll(async () => {
    stack = await startStack();
    applyEnv(stack.env);
    // No endpoint given: AWS_ENDPOINT_URL_DYNAMODB redirects the client, as in the contract.
    client = new DynamoDBClient({});
    store = new DynamoDBTokenStore(client, stack.tableName);
  });
  afterAll(async () => {
    client.destroy();
    await stack.close();
  });

  it('writes the token under the lease: pk, ttl a minute past the expiry, no secret, lease released', async () => {
    expect(await store.acquireLease('roundtrip', lease('a:1'))).toEqual({ acquired: true });
    expect((await store.read('roundtrip')).lease).toEqual({
      holder: 'a:1',
      version: 'v-a:1',
      expiresAt: now + 10_000,
      durationMs: 10_000,
      countdown: 0,
    });
    const issuedAt = 1_795_262_400_123;
    const token = { ...record('tok-a', issuedAt + 86_400_000, 'roundtrip'), issuedAt };
    expect(await store.putToken(token, { holder: 'a:1', version: 'v-a:1' })).toBe(true);
    expect(await store.read('roundtrip')).toEqual({ token, lease: undefined });
    const item = await rawItem('roundtrip');
    expect(item?.pk).toEqual({ S: 'token#roundtrip' });
    // Expiry 1_795_348_800.123 s, rounded up, plus TTL_MARGIN_SECONDS: clean-up only (ADR 0014).
    expect(item?.ttl).toEqual({ N: '1795348861' });
    // The token's attributes and the copies' bookkeeping (two writes: the lease, the token).
    expect(Object.keys(item ?? {}).sort()).toEqual(
      [
        'accessToken',
        'connection',
        'expiresAt',
        'issuedAt',
        'pk',
        'tokenDigest',
        'ttl',
        'epoch',
        'seq',
      ].sort(),
    );
    expect(item?.seq).toEqual({ N: '2' });
  });

  it('takes over a lease of a release that recorded no version only in the write seen (holder and expiry)', async () => {
    await legacyLease('legacy', 'old:1', now + 3_000);
    const seen = (await store.read('legacy')).lease;
    expect(seen).toEqual({
      holder: 'old:1',
      version: 'legacy',
      expiresAt: now + 3_000,
      durationMs: 3_000,
      countdown: 0,
    });
    // The old release renews (a new expiry, no version): the write seen has gone.
    await legacyLease('legacy', 'old:1', now + 4_000);
    expect((await store.acquireLease('legacy', lease('new:1', undefined, seen))).acquired).toBe(
      false,
    );
    const renewed = (await store.read('legacy')).lease;
    expect(await store.acquireLease('legacy', lease('new:2', undefined, renewed))).toEqual({
      acquired: true,
    });
  });

  it('tells an old release’s renewal apart from the version it left behind', async () => {
    // A versioned lease, released by an old release that removes only the attributes it knows.
    await store.acquireLease('leftover', lease('new:1'));
    await legacyLease('leftover', 'old:1', now + 3_000);
    const seen = (await store.read('leftover')).lease;
    expect(seen?.version).toBe('v-new:1');
    await legacyLease('leftover', 'old:1', now + 4_000);
    // Same version attribute and holder, another expiry: not the write seen, not taken over.
    expect((await store.acquireLease('leftover', lease('new:2', undefined, seen))).acquired).toBe(
      false,
    );
  });

  it('keeps the step a holder announces with each lease write, and none once a write or the release announces none', async () => {
    await store.acquireLease('stepping', lease('h:1'));
    expect((await store.read('stepping')).lease?.stepMs).toBeUndefined();
    const step = { leaseExpiresAt: now + 1_000, durationMs: 1_000 };
    const held = { holder: 'h:1', version: 'v-h:1' };
    expect(
      await store.renewLease('stepping', held, {
        ...step,
        version: 'v2',
        countdown: 4,
        stepMs: 345,
      }),
    ).toBe(true);
    expect((await store.read('stepping')).lease).toMatchObject({ countdown: 4, stepMs: 345 });
    // A write that announces none leaves none: not the step an earlier write measured.
    expect(
      await store.renewLease(
        'stepping',
        { ...held, version: 'v2' },
        { ...step, version: 'v3', countdown: 3 },
      ),
    ).toBe(true);
    expect((await store.read('stepping')).lease?.stepMs).toBeUndefined();
    await store.renewLease(
      'stepping',
      { ...held, version: 'v3' },
      { ...step, version: 'v4', countdown: 2, stepMs: 300 },
    );
    expect(await store.releaseLease('stepping', { ...held, version: 'v4' })).toBe(true);
    expect((await rawItem('stepping'))?.leaseStepMs).toBeUndefined();
  });

  it('reads no announced step on a lease an older release wrote over ours (it keeps the attribute it does not know)', async () => {
    // Review s30: 0.1.0 sets neither leaseVersion nor leaseStepMs, and its release removes
    // neither: its takeover, or its next lease after its release, carries our holder's step.
    await store.acquireLease('stale-step', lease('h:1'));
    await store.renewLease(
      'stale-step',
      { holder: 'h:1', version: 'v-h:1' },
      { leaseExpiresAt: now + 1_000, durationMs: 1_000, version: 'v2', countdown: 4, stepMs: 300 },
    );
    await legacyLease('stale-step', 'old:1', now + 3_000);
    expect((await store.read('stale-step')).lease).toMatchObject({ holder: 'old:1' });
    expect((await store.read('stale-step')).lease?.stepMs).toBeUndefined();
  });

  it('lets a lease replace a token it could not read (sealed under another key, or tampered)', async () => {
    await store.acquireLease('unreadable', lease('a:1'));
    await store.putToken(record('tok-u', now + 3_600_000, 'unreadable'), {
      holder: 'a:1',
      version: 'v-a:1',
    });
    await client.send(
      new UpdateItemCommand({
        TableName: stack.tableName,
        Key: tokenKey('unreadable'),
        UpdateExpression: 'REMOVE accessToken',
      }),
    );
    const state = await store.read('unreadable');
    expect(state.token).toBeUndefined();
    expect(state.unreadable?.tokenDigest).toBe(tokenDigest('tok-u'));
    expect((await store.acquireLease('unreadable', lease('b:1'))).acquired).toBe(false);
    expect(
      await store.acquireLease('unreadable', lease('b:2', state.unreadable?.tokenDigest)),
    ).toEqual({
      acquired: true,
    });
  });

  // Review 4 (a known gap of the 0.1.0 rollout, docs/operations.md): 0.1.0's lease writes leave
  // the item's `ttl` as it was (ADR 0014 came after it). A token this release wrote and that
  // expired past its TTL margin (a fleet idle overnight), replaced under a 0.1.0 lease: TTL may
  // delete the item, lease and all, and this release then takes a fresh lease on nothing, with no
  // countdown, while the 0.1.0 holder's POST may still leave (I1, I2). This test pins the gap.
  it('I1 (0.1.0 rollout gap): TTL deletes an item under a 0.1.0 lease, and a fresh lease is granted beside it', async () => {
    const connection = 'ttl-mixed';
    expect(await store.acquireLease(connection, lease('new:1'))).toEqual({ acquired: true });
    // Expired an hour ago: its ttl (a minute past the expiry) is past too.
    const expired = record('tok-old', now - 3_600_000, connection);
    expect(await store.putToken(expired, { holder: 'new:1', version: 'v-new:1' })).toBe(true);
    // 0.1.0 replaces it: SET leaseHolder, leaseExpiresAt, … and nothing about ttl.
    await legacyLease(connection, 'old:1', now + 3_000);
    expect((await store.read(connection)).lease?.holder).toBe('old:1');
    expect((await rawItem(connection))?.ttl).toBeDefined();
    await sweepExpired(client, stack.tableName, Math.floor(now / 1000));
    // The 0.1.0 holder's lease went with the item: this release sees nothing and takes a lease.
    expect(await rawItem(connection)).toBeUndefined();
    expect(await store.acquireLease(connection, lease('new:2'))).toEqual({ acquired: true });
  });

  // Found in issue 24: recheckOf trusted any non-negative recheckMs.
  it('I2: a token whose item records a re-check of 1e12 ms is replaced with the reader’s own countdown, not refused to every caller', async () => {
    const up = new Upstream();
    const expiresAt = Date.now() - 1_000; // just expired: its replacement is counted down
    await store.acquireLease('sandbox', lease('writer:1'));
    await store.putToken(
      { ...record('corrupt', expiresAt, 'sandbox'), recheckMs: 1e12 },
      { holder: 'writer:1', version: 'v-writer:1' },
    );
    // BROKER_MEMORY_RECHECK_SECONDS=0: a countdown of one step, so the test runs in real time.
    const broker = fleetBroker(store, systemClock, up, { recheck: 0 });
    const answers = await Promise.allSettled(
      Array.from({ length: 3 }, () => broker.getToken('sandbox', { deadline: deadline(9_000) })),
    );
    expect(answers.map((a) => (a.status === 'rejected' ? String(a.reason) : 'served'))).toEqual([
      'served',
      'served',
      'served',
    ]);
    expect(up.n).toBe(1);
  });

  it('surfaces an unreachable table as an error for the broker to translate', async () => {
    const broken = new DynamoDBTokenStore(client, 'no-such-table');
    await expect(broken.read('sandbox')).rejects.toMatchObject({
      name: 'ResourceNotFoundException',
    });
  });
});
