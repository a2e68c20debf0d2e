/**
 * The TokenStore contract, run against every implementation: the in-memory store that the
 * core's unit tests use, and the DynamoDB store on dynalite (what `npm start` runs) and on AWS's
 * own DynamoDB Local (the reference for conditional writes and for what a failed condition
 * returns). The core's tests are only as trustworthy as the fake is faithful: this suite is
 * what keeps it so.
 */
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { boundedClientConfig } from '../../lib/adapters/aws.js';
import { DynamoDBTokenStore } from '../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../lib/broker/index.js';
import type { Lease, LeaseRef, LeaseRequest, TokenRecord, TokenStore } from '../../lib/ports.js';
import { startAmazonDynamoDBLocal } from '../../local/amazon-dynamodb-local.js';
import { ensureTable, localDynamoDBClient, startDynalite } from '../../local/dynamodb-local.js';
import { startConflictingEndpoint } from '../support/conflicting-dynamodb.js';
import { InMemoryTokenStore } from '../support/fakes.js';
import { sweepExpired } from '../support/ttl-sweep.js';

interface StoreUnderTest {
  readonly store: TokenStore;
  /** DynamoDB's TTL, run now: deletes every item whose `ttl` is before `nowSeconds`. */
  sweep(nowSeconds: number): Promise<void>;
  close(): Promise<void>;
}

/** A DynamoDB store on a local endpoint, with its own table. */
const dynamoDBStore = async (endpoint: { url: string; close(): Promise<void> }) => {
  const client = localDynamoDBClient(endpoint.url);
  await ensureTable(client, 'token-store-contract');
  return {
    store: new DynamoDBTokenStore(client, 'token-store-contract'),
    sweep: (nowSeconds: number) => sweepExpired(client, 'token-store-contract', nowSeconds),
    close: async () => {
      client.destroy();
      await endpoint.close();
    },
  };
};

/**
 * The DynamoDB store on dynalite through a proxy that answers writes with replicated write
 * conflicts (MRSC, issue 26: two, one or none per write, in turn), with the production client's
 * limits (two attempts): the SDK's retry absorbs one conflict, the store's own retry the
 * second, and the contract must read exactly as without them. No added latency.
 */
const conflictingStore = async (): Promise<StoreUnderTest> => {
  const dynalite = await startDynalite();
  const endpoint = await startConflictingEndpoint(dynalite.url);
  const client = new DynamoDBClient({
    ...boundedClientConfig(1_000),
    endpoint: endpoint.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
  });
  await ensureTable(client, 'token-store-contract');
  const direct = localDynamoDBClient(dynalite.url);
  return {
    // The store's backoff shortened (the SDK's, 0-24 ms, stays): the same path, a quicker suite.
    store: new DynamoDBTokenStore(client, 'token-store-contract', undefined, {
      conflictRetry: { baseMs: 2, capMs: 4 },
    }),
    sweep: (nowSeconds: number) => sweepExpired(direct, 'token-store-contract', nowSeconds),
    close: async () => {
      // The proxy was in the path all along.
      expect(endpoint.conflicts()).toBeGreaterThan(20);
      client.destroy();
      direct.destroy();
      await endpoint.close();
      await dynalite.close();
    },
  };
};

const implementations: [string, () => Promise<StoreUnderTest>][] = [
  [
    'in memory (the unit tests’ fake)',
    async () => {
      const store = new InMemoryTokenStore();
      return {
        store,
        sweep: async (nowSeconds: number) => void store.sweepExpired(nowSeconds),
        close: async () => {},
      };
    },
  ],
  ['DynamoDB on dynalite', async () => dynamoDBStore(await startDynalite())],
  ['DynamoDB on DynamoDB Local', async () => dynamoDBStore(await startAmazonDynamoDBLocal())],
  ['DynamoDB on dynalite, writes conflicting (MRSC)', conflictingStore],
];

const record = (accessToken: string, expiresAt: number, connection: string): TokenRecord => ({
  connection,
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - 86_400_000,
  expiresAt,
});

describe.each(implementations)('Contract: TokenStore, %s', (_name, start) => {
  let subject: StoreUnderTest;
  let store: TokenStore;
  const now = Date.now();
  /** A request for the lease as `holder`, first version `v-<holder>`, replacing no token. */
  const lease = (
    holder: string,
    {
      expiresAt = now + 10_000,
      replaces,
      takeOver,
      countdown = 0,
    }: { expiresAt?: number; replaces?: string; takeOver?: Lease; countdown?: number } = {},
  ): LeaseRequest => ({
    holder,
    version: `v-${holder}`,
    leaseExpiresAt: expiresAt,
    durationMs: 10_000,
    countdown,
    takeOver,
    replacesDigest: replaces === undefined ? undefined : tokenDigest(replaces),
  });
  /** The lease a read shows after `lease(holder)` (or a renewal to `version`). */
  const written = (holder: string, expiresAt = now + 10_000, version = `v-${holder}`): Lease => ({
    holder,
    version,
    expiresAt,
    durationMs: 10_000,
    countdown: 0,
  });
  const ref = (holder: string, version = `v-${holder}`): LeaseRef => ({ holder, version });
  const next = (
    version: string,
    leaseExpiresAt: number,
    durationMs: number,
    countdown: number,
  ) => ({
    version,
    leaseExpiresAt,
    durationMs,
    countdown,
  });

  beforeAll(async () => {
    subject = await start();
    store = subject.store;
  });
  afterAll(async () => {
    await subject?.close();
  });

  it('reads nothing for a connection that never had a token', async () => {
    expect(await store.read('nothing-here')).toEqual({ token: undefined, lease: undefined });
  });

  it('writes the token under the lease, and the write releases the lease', async () => {
    expect(await store.acquireLease('roundtrip', lease('a:1'))).toEqual({ acquired: true });
    expect(await store.read('roundtrip')).toEqual({
      token: undefined,
      lease: written('a:1'),
    });
    const token = record('tok-a', now + 86_400_000, 'roundtrip');
    expect(await store.putToken(token, ref('a:1'))).toBe(true);
    expect(await store.read('roundtrip')).toEqual({ token, lease: undefined });
  });

  it('I1: grants the lease to one holder at a time, however many race for it', async () => {
    const results = await Promise.all(
      Array.from({ length: 12 }, (_, i) => store.acquireLease('race', lease(`c${i}:1`))),
    );
    expect(results.filter((r) => r.acquired)).toHaveLength(1);
  });

  it('refuses a live lease and answers with the state that won', async () => {
    await store.acquireLease('contended', lease('first:1'));
    const attempt = await store.acquireLease('contended', lease('second:1'));
    expect(attempt).toEqual({
      acquired: false,
      state: { token: undefined, lease: written('first:1') },
    });
  });

  it('I1: lets a lease be taken over only in the exact version the taker saw go stale', async () => {
    await store.acquireLease('takeover', lease('dead:1', { expiresAt: now - 60_000 }));
    // Its expiry long past is no licence: without naming the version, no takeover.
    expect((await store.acquireLease('takeover', lease('early:1'))).acquired).toBe(false);
    // A version the holder has since renewed is not the one seen stale, even with the same
    // expiry (no "+1 ms": the version tells two writes apart).
    await store.renewLease('takeover', ref('dead:1'), next('v2', now - 60_000, 10_000, 0));
    expect(
      (
        await store.acquireLease(
          'takeover',
          lease('late:1', { takeOver: written('dead:1', now - 60_000) }),
        )
      ).acquired,
    ).toBe(false);
    expect(
      await store.acquireLease(
        'takeover',
        lease('alive:1', { takeOver: written('dead:1', now - 60_000, 'v2') }),
      ),
    ).toEqual({ acquired: true });
    expect((await store.read('takeover')).lease).toEqual(written('alive:1'));
  });

  it('I2: grants the lease only while the item holds exactly the token the taker read', async () => {
    await store.acquireLease('fresh', lease('a:1'));
    const fresh = record('fresh-token', now + 3_600_000, 'fresh');
    await store.putToken(fresh, ref('a:1'));
    // Read before that token was written (no token seen): refused, with the token.
    const attempt = await store.acquireLease('fresh', lease('b:1'));
    expect(attempt).toEqual({ acquired: false, state: { token: fresh, lease: undefined } });
    // Read another token (an older one): refused.
    expect((await store.acquireLease('fresh', lease('b:2', { replaces: 'older' }))).acquired).toBe(
      false,
    );
    // Read this very token: granted.
    expect(await store.acquireLease('fresh', lease('b:3', { replaces: 'fresh-token' }))).toEqual({
      acquired: true,
    });
  });

  it('I1: refuses a write from a holder whose lease was taken over', async () => {
    await store.acquireLease('overrun', lease('slow:1', { expiresAt: now - 1 }));
    await store.acquireLease('overrun', lease('fast:1', { takeOver: written('slow:1', now - 1) }));
    expect(await store.putToken(record('late', now + 3_600_000, 'overrun'), ref('slow:1'))).toBe(
      false,
    );
    expect(await store.putToken(record('current', now + 3_600_000, 'overrun'), ref('fast:1'))).toBe(
      true,
    );
    expect((await store.read('overrun')).token?.accessToken).toBe('current');
  });

  it('I1: refuses every write without the lease, or under an earlier version of it', async () => {
    await store.acquireLease('unleased', lease('a:1'));
    await store.putToken(record('long', now + 7_200_000, 'unleased'), ref('a:1'));
    expect(await store.putToken(record('longer', now + 9_000_000, 'unleased'), ref('a:1'))).toBe(
      false,
    );
    expect(await store.putToken(record('longer', now + 9_000_000, 'unleased'), ref('gone:1'))).toBe(
      false,
    );
    expect(await store.putToken(record('first', now + 9_000_000, 'never-leased'), ref('x:1'))).toBe(
      false,
    );
    expect((await store.read('unleased')).token?.accessToken).toBe('long');
    expect(await store.read('never-leased')).toEqual({ token: undefined, lease: undefined });
    // The holder's own earlier version: it has written a later one since.
    await store.acquireLease('versioned', lease('a:1'));
    await store.renewLease('versioned', ref('a:1'), next('v2', now + 10_000, 10_000, 0));
    expect(await store.putToken(record('t', now + 3_600_000, 'versioned'), ref('a:1'))).toBe(false);
    expect(await store.putToken(record('t', now + 3_600_000, 'versioned'), ref('a:1', 'v2'))).toBe(
      true,
    );
  });

  it('I2: renews only from the version last written, so a late retry never raises a countdown', async () => {
    await store.acquireLease('forward', lease('a:1', { countdown: 5 }));
    expect(await store.renewLease('forward', ref('a:1'), next('v2', now + 12_000, 3_000, 3))).toBe(
      true,
    );
    // An attempt of that first write, applied late: names a version that has gone.
    expect(await store.renewLease('forward', ref('a:1'), next('v2b', now + 11_000, 3_000, 4))).toBe(
      false,
    );
    // Another holder's write naming the version now stored as its own next (a retry landing
    // on a lease taken over by an older release, which keeps the version attribute): refused.
    expect(
      await store.renewLease('forward', ref('b:1', 'gone'), next('v2', now + 12_000, 3_000, 15)),
    ).toBe(false);
    // The same write twice (its first answer lost): accepted, nothing changes.
    expect(await store.renewLease('forward', ref('a:1'), next('v2', now + 12_000, 3_000, 3))).toBe(
      true,
    );
    expect((await store.read('forward')).lease).toEqual({
      holder: 'a:1',
      version: 'v2',
      expiresAt: now + 12_000,
      durationMs: 3_000,
      countdown: 3,
    });
  });

  it('renews a lease only for its holder', async () => {
    await store.acquireLease('renew', lease('a:1', { countdown: 5 }));
    expect(await store.renewLease('renew', ref('b:1'), next('x', now + 99_000, 99_000, 0))).toBe(
      false,
    );
    expect(await store.renewLease('renew', ref('a:1'), next('v2', now + 20_000, 7_000, 4))).toBe(
      true,
    );
    expect((await store.read('renew')).lease).toEqual({
      holder: 'a:1',
      version: 'v2',
      expiresAt: now + 20_000,
      durationMs: 7_000,
      countdown: 4,
    });
    expect(
      await store.renewLease('never-leased', ref('a:1'), next('v2', now + 20_000, 7_000, 0)),
    ).toBe(false);
  });

  it('releases a lease only for its holder, and keeps the token', async () => {
    await store.acquireLease('release', lease('a:1'));
    const token = record('kept', now + 3_600_000, 'release');
    await store.putToken(token, ref('a:1'));
    await store.acquireLease('release', lease('b:1', { replaces: 'kept' }));
    expect(await store.releaseLease('release', ref('a:1'))).toBe(false);
    expect((await store.read('release')).lease?.holder).toBe('b:1');
    expect(await store.releaseLease('release', ref('b:1', 'other-version'))).toBe(false);
    expect(await store.releaseLease('release', ref('b:1'))).toBe(true);
    expect(await store.read('release')).toEqual({ token, lease: undefined });
    expect(await store.releaseLease('never-leased', ref('b:1'))).toBe(false);
  });

  it('releases the holder’s write whose answer never came, and no other holder’s', async () => {
    await store.acquireLease('unanswered', lease('a:1'));
    // The confirmation landed; its answer was lost, so the holder knows only its earlier version.
    await store.renewLease('unanswered', ref('a:1'), next('v2', now + 10_000, 10_000, 0));
    expect(await store.releaseLease('unanswered', ref('a:1'))).toBe(false);
    expect(
      await store.releaseLease('unanswered', { ...ref('b:1', 'other'), unanswered: 'v2' }),
    ).toBe(false);
    expect(await store.releaseLease('unanswered', { ...ref('a:1'), unanswered: 'v2' })).toBe(true);
    expect((await store.read('unanswered')).lease).toBeUndefined();
  });

  it('deletes the token only when the digest matches, and leaves a lease in progress alone', async () => {
    await store.acquireLease('cad', lease('a:1'));
    await store.putToken(record('current', now + 3_600_000, 'cad'), ref('a:1'));
    expect(await store.deleteIfMatches('cad', tokenDigest('older'))).toBe(false);
    expect((await store.read('cad')).token?.accessToken).toBe('current');
    await store.acquireLease('cad', lease('b:1', { replaces: 'current' }));
    expect(
      await store.deleteIfMatches('cad', tokenDigest('current'), { reportedAt: now + 5 }),
    ).toBe(true);
    // The report's time stays, to tell why the token is missing (the next issuance's cause).
    expect(await store.read('cad')).toEqual({
      token: undefined,
      lease: written('b:1'),
      invalidatedAt: now + 5,
    });
    expect(await store.deleteIfMatches('cad', tokenDigest('current'))).toBe(false);
    expect(await store.deleteIfMatches('never-stored', tokenDigest('current'))).toBe(false);
  });

  it('I4: compares no clock on delete: a token is removed on its digest alone, however young', async () => {
    await store.acquireLease('floor', lease('a:1'));
    // Issued "in the future" on the writer's clock: a reporter's clock is not compared with it.
    const young = { ...record('young', now + 3_600_000, 'floor'), issuedAt: now + 60_000 };
    await store.putToken(young, ref('a:1'));
    expect(await store.deleteIfMatches('floor', tokenDigest('young'))).toBe(true);
    expect((await store.read('floor')).token).toBeUndefined();
  });

  // Found as R1 by the review of the countdown: a takeover granted on an empty lease.
  it('I2: lands a takeover only on the version it names, never on a lease that has gone', async () => {
    await store.acquireLease('r1', lease('a:1'));
    const stale = written('a:1');
    await store.releaseLease('r1', ref('a:1'));
    // Released meanwhile: a reader may have read the token with no lease since.
    const attempt = await store.acquireLease('r1', lease('b:1', { takeOver: stale }));
    expect(attempt.acquired).toBe(false);
    expect((await store.read('r1')).lease).toBeUndefined();
    // Still there: taken over.
    await store.acquireLease('r1', lease('c:1'));
    expect(
      (await store.acquireLease('r1', lease('d:1', { takeOver: written('c:1') }))).acquired,
    ).toBe(true);
  });

  it('keeps a lease’s forced mark through its renewals, and not past it', async () => {
    await store.acquireLease('forced-lease', { ...lease('a:1'), forced: true });
    expect((await store.read('forced-lease')).lease?.forced).toBe(true);
    await store.renewLease('forced-lease', ref('a:1'), next('v2', now + 20_000, 10_000, 0));
    expect((await store.read('forced-lease')).lease).toEqual({
      ...written('a:1', now + 20_000, 'v2'),
      forced: true,
    });
    await store.releaseLease('forced-lease', ref('a:1', 'v2'));
    await store.acquireLease('forced-lease', lease('b:1'));
    expect((await store.read('forced-lease')).lease).toEqual(written('b:1'));
  });

  it('keeps a report about the stored token until the next token is written', async () => {
    await store.acquireLease('kept', lease('a:1'));
    const first = record('first', now + 3_600_000, 'kept');
    await store.putToken(first, ref('a:1'));
    // About another token: nothing kept.
    expect(await store.markReported('kept', tokenDigest('other'))).toBe(false);
    expect((await store.read('kept')).reported).toBeUndefined();
    expect(await store.markReported('kept', tokenDigest('first'))).toBe(true);
    expect(await store.read('kept')).toEqual({ token: first, lease: undefined, reported: true });
    // A lease taken to replace it keeps the report; the successor's write clears it.
    await store.acquireLease('kept', lease('b:1', { replaces: 'first' }));
    expect((await store.read('kept')).reported).toBe(true);
    const next = { ...record('second', now + 3_600_000, 'kept'), forced: true, recheckMs: 2_000 };
    await store.putToken(next, ref('b:1'));
    expect(await store.read('kept')).toEqual({ token: next, lease: undefined });
    expect(await store.markReported('never-stored', tokenDigest('first'))).toBe(false);
  });

  it('forgets the invalidate report once a new token is written', async () => {
    await store.acquireLease('reported', lease('a:1'));
    await store.putToken(record('first', now + 3_600_000, 'reported'), ref('a:1'));
    await store.deleteIfMatches('reported', tokenDigest('first'), { reportedAt: now });
    expect((await store.read('reported')).invalidatedAt).toBe(now);
    await store.acquireLease('reported', lease('b:1'));
    // A lease write keeps it: the token is still missing.
    expect((await store.read('reported')).invalidatedAt).toBe(now);
    const next = record('second', now + 3_600_000, 'reported');
    await store.putToken(next, ref('b:1'));
    expect(await store.read('reported')).toEqual({ token: next, lease: undefined });
  });

  describe('TTL deletes nothing the protocol still needs (clean-up only)', () => {
    /** Epoch seconds `ms` from now: TTL may run at any instant. */
    const at = (ms: number) => Math.floor((now + ms) / 1000);
    const DAY = 86_400_000;

    // Found in issue 24: the ttl was the token's expiry, and lease writes left it in the past.
    it('I1, I2: a lease that replaces a token expired overnight keeps the item through every sweep, its renewals and the fence included, until the token write', async () => {
      await store.acquireLease('overnight', lease('a:1'));
      const old = record('expired', now - DAY / 2, 'overnight');
      await store.putToken(old, ref('a:1'));
      await store.acquireLease('overnight', lease('b:1', { replaces: 'expired' }));
      await subject.sweep(at(0));
      await subject.sweep(at(9_000));
      expect((await store.read('overnight')).lease?.holder).toBe('b:1');
      await store.renewLease('overnight', ref('b:1'), next('v-b:2', now + 20_000, 20_000, 0));
      await subject.sweep(at(19_000));
      expect(await store.read('overnight')).toMatchObject({
        token: old,
        lease: { version: 'v-b:2' },
      });
      // The token write restores a ttl: the item may go once the new token has expired too.
      const fresh = record('fresh', now + 3_600_000, 'overnight');
      expect(await store.putToken(fresh, ref('b:1', 'v-b:2'))).toBe(true);
      await subject.sweep(at(3_600_000));
      expect(await store.read('overnight')).toEqual({ token: fresh, lease: undefined });
      await subject.sweep(at(3_600_000 + 62_000));
      expect(await store.read('overnight')).toEqual({ token: undefined, lease: undefined });
    });

    it('I2: a token is not swept until a minute after its expiry, when no clock within the skew allowed still serves it', async () => {
      await store.acquireLease('expiring', lease('a:1'));
      const token = record('expiring', now + 1_000, 'expiring');
      await store.putToken(token, ref('a:1'));
      await subject.sweep(at(1_000 + 10_000));
      expect((await store.read('expiring')).token).toEqual(token);
    });

    it('keeps an invalidate report through every sweep, and a lease taken after it', async () => {
      await store.acquireLease('report-kept', lease('a:1'));
      await store.putToken(record('dropped', now - DAY, 'report-kept'), ref('a:1'));
      await store.deleteIfMatches('report-kept', tokenDigest('dropped'), { reportedAt: now });
      await subject.sweep(at(DAY));
      expect((await store.read('report-kept')).invalidatedAt).toBe(now);
    });

    it('leaves a released lease’s item in place (no ttl until the next token)', async () => {
      await store.acquireLease('released', lease('a:1'));
      await store.putToken(record('old', now - DAY, 'released'), ref('a:1'));
      await store.acquireLease('released', lease('b:1', { replaces: 'old' }));
      expect(await store.releaseLease('released', ref('b:1'))).toBe(true);
      await subject.sweep(at(DAY));
      expect((await store.read('released')).token?.accessToken).toBe('old');
    });
  });

  it('keeps connections apart', async () => {
    await store.acquireLease('left', lease('a:1'));
    await store.putToken(record('left-token', now + 3_600_000, 'left'), ref('a:1'));
    expect(await store.read('right')).toEqual({ token: undefined, lease: undefined });
    expect(await store.acquireLease('right', lease('b:1'))).toEqual({ acquired: true });
  });
});
