/**
 * Replicated write conflicts (MRSC, issue 26): `ReplicatedWriteConflictException` means "not
 * applied". The SDK retries it within its own `maxAttempts` (2 in production: one retry); the
 * store retries what the SDK gave up on, within the call's bound, and never reports a conflict
 * as an unknown outcome, a lost lease or an unavailable store. The conflicts are answered by the
 * chaos proxy in front of dynalite, in DynamoDB's own JSON error shape, so the SDK's deserialiser
 * and retry strategy run as they would against AWS.
 */
import { DynamoDBClient, ReplicatedWriteConflictException } from '@aws-sdk/client-dynamodb';
import { afterAll, afterEach, beforeAll, describe, expect, it } from 'vitest';
import { type FaultProxy, type ProxiedRequest, startFaultProxy } from '../../../chaos/proxy.js';
import { classifyRequest, conflictAnswer } from '../../../chaos/regions.js';
import { boundedClientConfig } from '../../../lib/adapters/aws.js';
import {
  DEFAULT_CONFLICT_RETRY,
  isReplicatedWriteConflict,
  retryConflicts,
} from '../../../lib/adapters/dynamodb-conflicts.js';
import { DynamoDBTokenStore } from '../../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../../lib/broker/index.js';
import { type Clock, Deadline, systemClock } from '../../../lib/clock.js';
import type { LeaseRequest } from '../../../lib/ports.js';
import { ensureTable, type LocalDynamoDB, startDynalite } from '../../../local/dynamodb-local.js';

const conflict = () => new ReplicatedWriteConflictException({ message: 'raced', $metadata: {} });

/** A clock whose sleeps pass at once and are recorded. */
const stepClock = (draws: number[] = []) => {
  let now = 0;
  const sleeps: number[] = [];
  const clock: Pick<Clock, 'monotonic' | 'random' | 'sleep'> = {
    monotonic: () => now,
    random: () => draws.shift() ?? 0.999,
    sleep: async (ms) => {
      sleeps.push(ms);
      now += ms;
    },
  };
  return { clock, sleeps };
};

describe('Function: retryConflicts', () => {
  it('retries a conflict with full jitter, doubling up to the cap, until the write answers', async () => {
    const { clock, sleeps } = stepClock([0.5, 0.5, 0.5, 0.5, 0.5, 0.5]);
    let calls = 0;
    const answer = await retryConflicts(
      async () => {
        calls += 1;
        if (calls <= 5) throw conflict();
        return 'landed';
      },
      clock,
      { baseMs: 25, capMs: 200, budgetMs: 2_000 },
      10_000,
    );
    expect(answer).toBe('landed');
    // Half of 25, 50, 100, 200, 200 (capped).
    expect(sleeps).toEqual([12, 25, 50, 100, 100]);
  });

  it('throws the last conflict (not applied) once no retry can start before the bound', async () => {
    const { clock, sleeps } = stepClock();
    const error = await retryConflicts(
      async () => {
        throw conflict();
      },
      clock,
      DEFAULT_CONFLICT_RETRY,
      300,
    ).catch((e: unknown) => e);
    expect(isReplicatedWriteConflict(error)).toBe(true);
    expect(sleeps.reduce((a, b) => a + b, 0)).toBeLessThanOrEqual(300);
  });

  it('passes any other error on at once', async () => {
    const { clock, sleeps } = stepClock();
    const error = new Error('throttled');
    await expect(
      retryConflicts(
        async () => {
          throw error;
        },
        clock,
        DEFAULT_CONFLICT_RETRY,
        10_000,
      ),
    ).rejects.toBe(error);
    expect(sleeps).toEqual([]);
  });

  it('recognises the conflict by name too (an error from another copy of the SDK)', () => {
    expect(isReplicatedWriteConflict({ name: 'ReplicatedWriteConflictException' })).toBe(true);
    expect(isReplicatedWriteConflict(new Error('x'))).toBe(false);
    expect(isReplicatedWriteConflict(undefined)).toBe(false);
  });
});

describe('Class: DynamoDBTokenStore, replicated write conflicts (dynalite behind a conflicting proxy)', () => {
  const TABLE = 'conflicts';
  let dynalite: LocalDynamoDB;
  let proxy: FaultProxy;
  let client: DynamoDBClient;
  let store: DynamoDBTokenStore;
  /** Writes seen by the proxy: operation, and the SDK's attempt header. */
  let writes: { attempt: string; conflicted: boolean }[] = [];
  /** What happens to each next write, in order: then pass (or conflict, with `always`). */
  let plan: ('conflict' | 'lose answer' | 'pass')[] = [];
  let always = false;
  const lost = new Set<number>();
  const conflicts = (n: number) => {
    plan = Array.from({ length: n }, () => 'conflict' as const);
  };
  const now = Date.now();
  const lease = (holder: string, replacesDigest?: string): LeaseRequest => ({
    holder,
    version: `v-${holder}`,
    leaseExpiresAt: now + 10_000,
    durationMs: 10_000,
    countdown: 3,
    replacesDigest,
  });
  const next = (version: string, countdown: number) => ({
    version,
    leaseExpiresAt: now + 10_000,
    durationMs: 10_000,
    countdown,
  });
  const isWrite = (request: ProxiedRequest) => classifyRequest(request).kind === 'write';

  beforeAll(async () => {
    dynalite = await startDynalite();
    proxy = await startFaultProxy({
      target: dynalite.url,
      hooks: {
        onRequest: (request) => {
          if (!isWrite(request)) return undefined;
          const step = plan.shift() ?? (always ? 'conflict' : 'pass');
          const conflicted = step === 'conflict';
          writes.push({ attempt: String(request.headers['amz-sdk-request']), conflicted });
          if (step === 'lose answer') lost.add(request.id);
          if (!conflicted) return undefined;
          return { kind: 'answer', response: conflictAnswer() };
        },
        onResponse: (request) => (lost.delete(request.id) ? { kind: 'reset' } : undefined),
      },
    });
    // Production's client limits: two attempts, so one SDK retry.
    client = new DynamoDBClient({
      ...boundedClientConfig(1_000),
      endpoint: proxy.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
    });
    await ensureTable(client, TABLE);
    store = new DynamoDBTokenStore(client, TABLE, undefined, {
      conflictRetry: { budgetMs: 1_000 },
    });
  });
  afterEach(() => {
    writes = [];
    plan = [];
    always = false;
  });
  afterAll(async () => {
    client.destroy();
    await proxy.close();
    await dynalite.close();
  });

  it('reads the proxy’s answer as the SDK’s ReplicatedWriteConflictException, retryable, HTTP 400', async () => {
    always = true;
    const plain = new DynamoDBClient({
      endpoint: proxy.url,
      region: 'us-east-1',
      credentials: { accessKeyId: 'local', secretAccessKey: 'local' },
      maxAttempts: 1,
    });
    try {
      const bare = new DynamoDBTokenStore(plain, TABLE, undefined, {
        conflictRetry: { budgetMs: 0 },
      });
      const error = await bare.acquireLease('shape', lease('s:1')).catch((e: unknown) => e);
      expect(error).toBeInstanceOf(ReplicatedWriteConflictException);
      expect(error).toMatchObject({
        $fault: 'client',
        $retryable: {},
        $metadata: { httpStatusCode: 400 },
      });
    } finally {
      plain.destroy();
    }
  });

  it('lets the SDK’s own retry absorb one conflict: the lease is taken, in one call of the store', async () => {
    conflicts(1);
    expect(await store.acquireLease('sdk-retry', lease('a:1'))).toEqual({ acquired: true });
    expect(writes.map((w) => w.attempt)).toEqual(['attempt=1; max=2', 'attempt=2; max=2']);
    expect((await store.read('sdk-retry')).lease?.holder).toBe('a:1');
  });

  it('takes the lease after the SDK gave up on two conflicts: a conflict is not a failed take', async () => {
    conflicts(2);
    expect(await store.acquireLease('take', lease('a:1'))).toEqual({ acquired: true });
    // The SDK's two attempts, then the store's own call.
    expect(writes.map((w) => w.attempt)).toEqual([
      'attempt=1; max=2',
      'attempt=2; max=2',
      'attempt=1; max=2',
    ]);
  });

  it('renews after conflicts (a countdown step is not a lost lease), and the fence too', async () => {
    expect(await store.acquireLease('renew', lease('a:1'))).toEqual({ acquired: true });
    conflicts(3);
    expect(
      await store.renewLease('renew', { holder: 'a:1', version: 'v-a:1' }, next('v2', 2)),
    ).toBe(true);
    conflicts(2);
    expect(await store.renewLease('renew', { holder: 'a:1', version: 'v2' }, next('v3', 0))).toBe(
      true,
    );
    expect((await store.read('renew')).lease).toMatchObject({ version: 'v3', countdown: 0 });
  });

  it('writes the token after conflicts, and a release that conflicts lands', async () => {
    expect(await store.acquireLease('put', lease('a:1'))).toEqual({ acquired: true });
    conflicts(2);
    const token = {
      connection: 'put',
      accessToken: 'tok-put',
      tokenDigest: tokenDigest('tok-put'),
      issuedAt: now,
      expiresAt: now + 60_000,
    };
    expect(await store.putToken(token, { holder: 'a:1', version: 'v-a:1' })).toBe(true);
    expect(await store.acquireLease('put', lease('b:1', token.tokenDigest))).toEqual({
      acquired: true,
    });
    conflicts(4);
    expect(await store.releaseLease('put', { holder: 'b:1', version: 'v-b:1' })).toBe(true);
    expect(await store.read('put')).toEqual({ token, lease: undefined });
  });

  it('retries a conflicting release until its lease lapses, past the budget of other calls', async () => {
    const quick = new DynamoDBTokenStore(client, TABLE, undefined, {
      conflictRetry: { baseMs: 5, capMs: 10, budgetMs: 50 },
    });
    expect(await quick.acquireLease('release', lease('a:1'))).toEqual({ acquired: true });
    // Far more conflicts than 50 ms of retries would outlast; the 10 s lease is the bound.
    conflicts(30);
    expect(await quick.releaseLease('release', { holder: 'a:1', version: 'v-a:1' })).toBe(true);
    expect((await quick.read('release')).lease).toBeUndefined();
  });

  it('still answers a refused condition after conflicts as a refusal (the lease was another’s)', async () => {
    expect(await store.acquireLease('refused', lease('a:1'))).toEqual({ acquired: true });
    conflicts(2);
    expect(
      await store.renewLease('refused', { holder: 'z:1', version: 'v-z:1' }, next('v9', 1)),
    ).toBe(false);
    conflicts(2);
    expect(await store.acquireLease('refused', lease('b:1'))).toMatchObject({
      acquired: false,
      state: { lease: { holder: 'a:1' } },
    });
  });

  it('answers a take that conflicted from a read, when another’s lease is there: no further write', async () => {
    expect(await store.acquireLease('raced', lease('a:1'))).toEqual({ acquired: true });
    writes = [];
    conflicts(2); // the SDK's two attempts
    expect(await store.acquireLease('raced', lease('b:1'))).toMatchObject({
      acquired: false,
      state: { lease: { holder: 'a:1' } },
    });
    expect(writes).toHaveLength(2);
  });

  it('takes the lease when a conflict followed an attempt that landed (its answer lost): its own lease, read, is a take', async () => {
    plan = ['lose answer', 'conflict'];
    expect(await store.acquireLease('take-landed', lease('c:1'))).toEqual({ acquired: true });
    expect(writes).toHaveLength(2);
    expect((await store.read('take-landed')).lease).toMatchObject({
      holder: 'c:1',
      version: 'v-c:1',
    });
  });

  it('reports a token write as written when its answer was lost, its SDK retry conflicted and the store’s retry found the lease gone', async () => {
    expect(await store.acquireLease('landed', lease('a:1'))).toEqual({ acquired: true });
    writes = [];
    // The first attempt lands, its answer is reset; the SDK's retry (attempt 2) conflicts; the
    // store's own attempt finds no lease.
    plan = ['lose answer', 'conflict'];
    const token = {
      connection: 'landed',
      accessToken: 'tok-landed',
      tokenDigest: tokenDigest('tok-landed'),
      issuedAt: now,
      expiresAt: now + 60_000,
    };
    expect(await store.putToken(token, { holder: 'a:1', version: 'v-a:1' })).toBe(true);
    expect(writes.map((w) => w.conflicted)).toEqual([false, true, false]);
  });

  it('retries no further than the caller’s deadline, when one is given', async () => {
    always = true;
    const passed = Deadline.in(systemClock, 0);
    const error = await store
      .acquireLease('deadline', lease('a:1'), { deadline: passed })
      .catch((e: unknown) => e);
    expect(isReplicatedWriteConflict(error)).toBe(true);
    // The SDK's two attempts, and none of the store's.
    expect(writes).toHaveLength(2);
  });

  it('gives up with the conflict (not applied) once the budget is spent', async () => {
    always = true;
    const error = await store.acquireLease('forever', lease('a:1')).catch((e: unknown) => e);
    expect(isReplicatedWriteConflict(error)).toBe(true);
    always = false;
    expect((await store.read('forever')).lease).toBeUndefined();
  });
});
