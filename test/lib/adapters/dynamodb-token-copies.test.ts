/**
 * Read copies of the token item (ADR 0024, issue 25's hot key), on dynalite, on AWS's DynamoDB
 * Local (which returns the item with a refusal, as DynamoDB does) and on dynalite behind MRSC's
 * replicated write conflicts. Every store reaches its table through a recording proxy: which
 * requests went to which item, and a copy's writes made to fail or to wait. What the copies must
 * give the protocol (docs/protocol.md, "Read copies"): a write is answered only once every copy
 * holds it; a copy that lags shows only writes never answered, and the next refused write brings
 * it forward; the operator's count is the item's, and readers follow it.
 */
import {
  DeleteItemCommand,
  type DynamoDBClient,
  GetItemCommand,
  UpdateItemCommand,
} from '@aws-sdk/client-dynamodb';
import { afterAll, beforeAll, beforeEach, describe, expect, it } from 'vitest';
import { startFaultProxy } from '../../../chaos/proxy.js';
import { CopiesUnwrittenError } from '../../../lib/adapters/dynamodb-token-copies.js';
import type { Item } from '../../../lib/adapters/dynamodb-token-item.js';
import {
  copyKey,
  DynamoDBTokenStore,
  tokenKey,
} from '../../../lib/adapters/dynamodb-token-store.js';
import { tokenDigest } from '../../../lib/broker/index.js';
import { Deadline, systemClock } from '../../../lib/clock.js';
import type { LeaseRef, LeaseRequest, TokenRecord } from '../../../lib/ports.js';
import { startAmazonDynamoDBLocal } from '../../../local/amazon-dynamodb-local.js';
import { ensureTable, localDynamoDBClient, startDynalite } from '../../../local/dynamodb-local.js';
import { startConflictingEndpoint } from '../../support/conflicting-dynamodb.js';

const TABLE = 'token-copies';

interface Request {
  readonly operation: string;
  readonly pk: string;
}

/** A DynamoDB endpoint and a recording proxy in front of it. */
interface Backend {
  /** The proxy's URL: what every store under test is given. */
  readonly url: string;
  /** A client straight to the table (no proxy): the test's own reads and raw writes. */
  readonly direct: DynamoDBClient;
  /** Requests through the proxy since the last `reset`. */
  requests(): readonly Request[];
  reset(): void;
  /** Copy writes (PutItem) to keys starting with `prefix` fail (500) while set. */
  failPuts(prefix: string | undefined): void;
  /** Copy writes (PutItem) to keys starting with `prefix` wait `ms` while set. */
  delayPuts(prefix: string | undefined, ms: number): void;
  close(): Promise<void>;
}

const failure = () => ({
  status: 500,
  headers: { 'content-type': 'application/x-amz-json-1.0' },
  body: Buffer.from(
    JSON.stringify({
      __type: 'com.amazonaws.dynamodb.v20120810#InternalServerError',
      message: 'copy unwritable (test proxy)',
    }),
  ),
});

const recorded = async (
  target: string,
  direct: DynamoDBClient,
  close: () => Promise<void>,
): Promise<Backend> => {
  let requests: Request[] = [];
  let failing: string | undefined;
  let delaying: { prefix: string; ms: number } | undefined;
  const proxy = await startFaultProxy({
    target,
    label: 'recorded-dynamodb',
    hooks: {
      onRequest: async ({ headers, body }) => {
        const target = String(headers['x-amz-target'] ?? '');
        const operation = target.slice(target.indexOf('.') + 1);
        const parsed = JSON.parse(body.toString('utf8') || '{}') as {
          Key?: { pk?: { S?: string } };
          Item?: { pk?: { S?: string } };
        };
        const pk = parsed.Key?.pk?.S ?? parsed.Item?.pk?.S ?? '';
        requests.push({ operation, pk });
        if (operation !== 'PutItem') return undefined;
        if (failing !== undefined && pk.startsWith(failing)) {
          return { kind: 'answer', response: failure() };
        }
        if (delaying && pk.startsWith(delaying.prefix)) {
          await new Promise((resolve) => setTimeout(resolve, delaying?.ms));
        }
        return undefined;
      },
    },
  });
  return {
    url: proxy.url,
    direct,
    requests: () => requests,
    reset: () => {
      requests = [];
    },
    failPuts: (prefix) => {
      failing = prefix;
    },
    delayPuts: (prefix, ms) => {
      delaying = prefix === undefined ? undefined : { prefix, ms };
    },
    close: async () => {
      await proxy.close();
      await close();
    },
  };
};

const backends: [string, boolean, () => Promise<Backend>][] = [
  [
    'dynalite',
    false,
    async () => {
      const dynalite = await startDynalite();
      const direct = localDynamoDBClient(dynalite.url);
      await ensureTable(direct, TABLE);
      return recorded(dynalite.url, direct, async () => {
        direct.destroy();
        await dynalite.close();
      });
    },
  ],
  [
    'DynamoDB Local',
    false,
    async () => {
      const local = await startAmazonDynamoDBLocal();
      const direct = localDynamoDBClient(local.url);
      await ensureTable(direct, TABLE);
      return recorded(local.url, direct, async () => {
        direct.destroy();
        await local.close();
      });
    },
  ],
  [
    'dynalite, writes conflicting (MRSC)',
    true,
    async () => {
      const dynalite = await startDynalite();
      const conflicting = await startConflictingEndpoint(dynalite.url);
      const direct = localDynamoDBClient(dynalite.url);
      await ensureTable(direct, TABLE);
      return recorded(conflicting.url, direct, async () => {
        // The copies' puts met conflicts too, and were retried.
        expect(conflicting.conflicts()).toBeGreaterThan(20);
        direct.destroy();
        await conflicting.close();
        await dynalite.close();
      });
    },
  ],
];

const now = Date.now();
const record = (accessToken: string, connection: string): TokenRecord => ({
  connection,
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: now,
  expiresAt: now + 3_600_000,
});
const lease = (
  holder: string,
  { replaces, countdown = 0 }: { replaces?: string; countdown?: number } = {},
): LeaseRequest => ({
  holder,
  version: `v-${holder}`,
  leaseExpiresAt: now + 10_000,
  durationMs: 10_000,
  countdown,
  replacesDigest: replaces === undefined ? undefined : tokenDigest(replaces),
});
const ref = (holder: string, version = `v-${holder}`): LeaseRef => ({ holder, version });
const terms = (version: string, countdown: number) => ({
  version,
  leaseExpiresAt: now + 10_000,
  durationMs: 10_000,
  countdown,
});

describe.each(backends)('Read copies of the token item, on %s', (_name, conflicting, start) => {
  let backend: Backend;
  const clients: DynamoDBClient[] = [];
  /** A container's store: its own memory of each item's copies, as a container has. */
  const container = (random: () => number = Math.random, now = () => Date.now()) => {
    const client = localDynamoDBClient(backend.url);
    clients.push(client);
    return new DynamoDBTokenStore(client, TABLE, undefined, {
      clock: { ...systemClock, random, now },
      ...(conflicting ? { conflictRetry: { baseMs: 2, capMs: 4 } } : {}),
    });
  };

  const raw = async (key: Item): Promise<Item | undefined> =>
    (
      await backend.direct.send(
        new GetItemCommand({ TableName: TABLE, Key: key, ConsistentRead: true }),
      )
    ).Item;
  /** An item's attributes but its key: a copy holds the main item's. */
  const image = (item: Item | undefined) => {
    const { pk: _pk, ...rest } = item ?? {};
    return rest;
  };
  /** Whether every one of the first `k` copies holds exactly the main item. */
  const copiesHoldMain = async (connection: string, k: number) => {
    const main = image(await raw(tokenKey(connection)));
    for (let index = 0; index < k; index += 1) {
      expect(image(await raw(copyKey(connection, index))), `copy ${index}`).toEqual(main);
    }
  };
  /** A raw write of the main item, as a writer stopped before its copies leaves it. */
  const rawMainWrite = (connection: string, update: string, values: Item = {}) =>
    backend.direct.send(
      new UpdateItemCommand({
        TableName: TABLE,
        Key: tokenKey(connection),
        UpdateExpression: `${update} ADD seq :one`,
        ExpressionAttributeValues: { ...values, ':one': { N: '1' } },
      }),
    );
  const reads = (pk: string) =>
    backend.requests().filter((r) => r.operation === 'GetItem' && r.pk === pk).length;
  /**
   * A connection's requests (its main item and its copies) since the last reset. Scoped to
   * one connection, as each test has its own: a put a deadline cut goes on (ADR 0024) and may
   * land, or be retried after a conflict, while the next test runs.
   */
  const requestsOf = (connection: string) =>
    backend
      .requests()
      .filter((r) => r.pk === `token#${connection}` || r.pk.endsWith(`#token#${connection}`));
  const puts = (connection: string) =>
    requestsOf(connection).filter((r) => r.operation === 'PutItem');
  /** A connection's first token (`<connection>-1`) written under `holder`'s lease, then `copies` copies. */
  const tokenWithCopies = async (
    store: DynamoDBTokenStore,
    connection: string,
    copies: number,
    holder = 'a:1',
  ) => {
    await store.acquireLease(connection, lease(holder));
    await store.putToken(record(`${connection}-1`, connection), ref(holder));
    await store.setCopies(connection, copies);
  };

  beforeAll(async () => {
    backend = await start();
  });
  afterAll(async () => {
    for (const client of clients) client.destroy();
    await backend?.close();
  });
  beforeEach(() => {
    backend.failPuts(undefined);
    backend.delayPuts(undefined, 0);
    backend.reset();
  });

  it('names each copy apart from every main item: copy#<i>#token#<connection>', () => {
    expect(copyKey('a', 2)).toEqual({ pk: { S: 'copy#2#token#a' } });
    // A connection named like a copy keeps a main key of its own.
    expect(tokenKey('a#copy#2')).not.toEqual(copyKey('a', 2));
  });

  it('without copies: one GetItem of the main item per read, and no write beyond the main item', async () => {
    const store = container();
    await store.acquireLease('plain', lease('a:1'));
    await store.read('plain');
    await store.putToken(record('plain-token', 'plain'), ref('a:1'));
    expect((await store.read('plain')).token?.accessToken).toBe('plain-token');
    expect(reads('token#plain')).toBe(2);
    expect(requestsOf('plain').filter((r) => r.pk !== 'token#plain')).toEqual([]);
    expect(puts('plain')).toEqual([]);
  });

  it('reads a copy picked at random once the item says it has copies, and the main item until then', async () => {
    const operator = container();
    const writer = container();
    await writer.acquireLease('spread', lease('a:1'));
    await writer.putToken(record('spread-token', 'spread'), ref('a:1'));
    expect(await operator.setCopies('spread', 3)).toEqual({ previous: 0, copies: 3 });
    await copiesHoldMain('spread', 3);
    backend.reset();
    let draw = 0;
    const reader = container(() => ((draw++ % 3) + 0.5) / 3);
    for (let i = 0; i < 31; i += 1) {
      expect((await reader.read('spread')).token?.accessToken).toBe('spread-token');
    }
    // The first read learns the count from the main item; every later one reads a copy.
    expect(reads('token#spread')).toBe(1);
    expect([0, 1, 2].map((i) => reads(`copy#${i}#token#spread`))).toEqual([10, 10, 10]);
  });

  it('answers no write before every copy holds it, however slow a copy', async () => {
    const store = container();
    await store.setCopies('answered', 3);
    backend.delayPuts('copy#2#', 150);
    await store.acquireLease('answered', lease('a:1', { countdown: 3 }));
    await copiesHoldMain('answered', 3);
    await store.renewLease('answered', ref('a:1'), terms('v2', 2));
    await copiesHoldMain('answered', 3);
    await store.putToken(record('answered-1', 'answered'), ref('a:1', 'v2'));
    await copiesHoldMain('answered', 3);
    await store.markReported('answered', tokenDigest('answered-1'));
    await copiesHoldMain('answered', 3);
    await store.acquireLease('answered', lease('b:1', { replaces: 'answered-1' }));
    await store.releaseLease('answered', ref('b:1'));
    await copiesHoldMain('answered', 3);
    await store.deleteIfMatches('answered', tokenDigest('answered-1'), { reportedAt: now });
    await copiesHoldMain('answered', 3);
    // The token write removed the lease and kept the bookkeeping, as a whole-item write would.
    expect(Object.keys(image(await raw(copyKey('answered', 1)))).sort()).toEqual(
      ['connection', 'copies', 'epoch', 'invalidatedAt', 'seq'].sort(),
    );
  });

  it('I2: a copy left behind by a writer stopped before it shows only writes never answered, and the next refused write brings it forward', async () => {
    const store = container();
    await tokenWithCopies(store, 'lagging', 3);
    const reader = container();
    await reader.read('lagging'); // learns the copies from the main item
    // A holder counts down to its confirmation: each step answered, so on every copy.
    await store.acquireLease('lagging', lease('h:1', { replaces: 'lagging-1', countdown: 2 }));
    await store.renewLease('lagging', ref('h:1'), terms('h2', 0));
    // Its POST revoked lagging-1; it wrote lagging-2 on the main item and stopped there.
    await rawMainWrite(
      'lagging',
      'SET accessToken = :t, tokenDigest = :d REMOVE leaseHolder, leaseVersion',
      { ':t': { S: 'lagging-2' }, ':d': { S: tokenDigest('lagging-2') } },
    );
    for (let i = 0; i < 6; i += 1) {
      // Never lagging-1 without the confirmation that made it suspect: countdown 0.
      const state = await reader.read('lagging');
      expect(state.lease).toMatchObject({ holder: 'h:1', version: 'h2', countdown: 0 });
    }
    // A watcher takes the confirmation over once stale: refused, and the copies brought forward.
    const seen = (await reader.read('lagging')).lease;
    const attempt = await reader.acquireLease('lagging', {
      ...lease('w:1', { replaces: 'lagging-1' }),
      takeOver: seen,
    });
    expect(attempt).toMatchObject({ acquired: false, state: { lease: undefined } });
    expect(attempt.acquired === false && attempt.state.token?.tokenDigest).toBe(
      tokenDigest('lagging-2'),
    );
    await copiesHoldMain('lagging', 3);
    expect((await reader.read('lagging')).lease).toBeUndefined();
  });

  it('I2: a lease a taker landed on the main item alone is found by the next taker, and put on the copies', async () => {
    const store = container();
    await tokenWithCopies(store, 'early', 2);
    const reader = container();
    await reader.read('early');
    // A taker's lease on the main item; it stopped before the copies (never answered).
    await rawMainWrite('early', 'SET leaseHolder = :h, leaseVersion = :v, leaseExpiresAt = :e', {
      ':h': { S: 'dead:1' },
      ':v': { S: 'v-dead' },
      ':e': { N: String(now + 10_000) },
    });
    // The copies show the token with no lease: what they proved was answered.
    expect((await reader.read('early')).lease).toBeUndefined();
    const attempt = await reader.acquireLease('early', lease('b:1', { replaces: 'early-1' }));
    expect(attempt).toMatchObject({ acquired: false, state: { lease: { holder: 'dead:1' } } });
    await copiesHoldMain('early', 2);
    expect((await reader.read('early')).lease?.holder).toBe('dead:1');
  });

  it('a refused take on copies already up to date reads none of them back', async () => {
    // Every taker that loses puts the image it lost to on the copies (a heal); with the copies
    // current, each put is refused. Reading each refused copy back (to tell a copy of an
    // earlier item from a later image) cost K reads per lost take where the store sends no
    // image with a refusal (dynalite), nearly doubling the reads a busy fleet made inside the
    // refresh window (bench, 2026-11-26): a heal leaves that check to the next write.
    const store = container();
    await tokenWithCopies(store, 'healed', 3);
    await store.acquireLease('healed', lease('a:2', { replaces: 'healed-1' }));
    const taker = container();
    backend.reset();
    const attempt = await taker.acquireLease('healed', lease('b:1', { replaces: 'healed-1' }));
    expect(attempt).toMatchObject({ acquired: false, state: { lease: { holder: 'a:2' } } });
    const copyReads = [0, 1, 2].map((index) => reads(copyKey('healed', index).pk?.S ?? ''));
    expect(copyReads).toEqual([0, 0, 0]);
    await copiesHoldMain('healed', 3);
  });

  it('a copy that cannot be written makes the write an unknown outcome; sent again, it lands and reaches every copy', async () => {
    const store = container();
    await store.setCopies('unwritable', 3);
    await store.acquireLease('unwritable', lease('a:1', { countdown: 3 }));
    backend.failPuts('copy#1#');
    await expect(
      store.renewLease('unwritable', ref('a:1'), terms('v2', 2), {}),
    ).rejects.toBeInstanceOf(CopiesUnwrittenError);
    // It landed on the main item: the outcome the holder cannot know.
    expect((await raw(tokenKey('unwritable')))?.leaseVersion).toEqual({ S: 'v2' });
    backend.failPuts(undefined);
    // The same write again: its condition accepts itself, and the copies catch up.
    expect(await store.renewLease('unwritable', ref('a:1'), terms('v2', 2))).toBe(true);
    await copiesHoldMain('unwritable', 3);
    backend.failPuts('copy#0#');
    await expect(
      store.putToken(record('unwritable-1', 'unwritable'), ref('a:1', 'v2')),
    ).rejects.toBeInstanceOf(CopiesUnwrittenError);
    backend.failPuts(undefined);
  });

  it('a copy not written by the call’s deadline makes the write an unknown outcome too', async () => {
    const store = container();
    await store.setCopies('slow-copy', 2);
    await store.acquireLease('slow-copy', lease('a:1', { countdown: 3 }));
    backend.delayPuts('copy#1#', 400);
    await expect(
      store.renewLease('slow-copy', ref('a:1'), terms('v2', 2), {
        deadline: Deadline.in(systemClock, 150),
      }),
    ).rejects.toBeInstanceOf(CopiesUnwrittenError);
    expect((await raw(tokenKey('slow-copy')))?.leaseVersion).toEqual({ S: 'v2' });
    // Without a deadline it waits for the slow copy, and answers.
    expect(await store.renewLease('slow-copy', ref('a:1'), terms('v2', 2))).toBe(true);
    await copiesHoldMain('slow-copy', 2);
  });

  it('a refused write whose copies cannot be brought forward is still answered with the main item’s state', async () => {
    const store = container();
    await tokenWithCopies(store, 'refused', 2, 'seed');
    await store.acquireLease('refused', lease('a:1', { replaces: 'refused-1' }));
    const taker = container();
    // A copy that fails, then one that is slow past the call's deadline: the take that lost
    // changed nothing, and its answer is the lease that won (a read of the main item).
    backend.failPuts('copy#1#');
    expect(
      await taker.acquireLease('refused', lease('b:1', { replaces: 'refused-1' })),
    ).toMatchObject({ acquired: false, state: { lease: { holder: 'a:1' } } });
    backend.failPuts(undefined);
    backend.delayPuts('copy#1#', 400);
    expect(
      await taker.acquireLease('refused', lease('c:1', { replaces: 'refused-1' }), {
        deadline: Deadline.in(systemClock, 150),
      }),
    ).toMatchObject({ acquired: false, state: { lease: { holder: 'a:1' } } });
    // A report about a token no longer there, likewise.
    backend.delayPuts(undefined, 0);
    backend.failPuts('copy#0#');
    expect(await taker.deleteIfMatches('refused', tokenDigest('other'))).toBe(false);
    backend.failPuts(undefined);
    // Its copies caught up with the next write.
    expect(await store.releaseLease('refused', ref('a:1'))).toBe(true);
    await copiesHoldMain('refused', 2);
  });

  it('sets copies 3 → 0 → 3: readers follow the item, 0 is answered once every copy says 0, and writes with none touch no copy', async () => {
    const operator = container();
    const writer = container();
    await writer.acquireLease('switch', lease('a:1'));
    await writer.putToken(record('switch-1', 'switch'), ref('a:1'));
    await operator.setCopies('switch', 3);
    const reader = container();
    await reader.read('switch');
    expect(await operator.setCopies('switch', 0)).toEqual({ previous: 3, copies: 0 });
    for (let index = 0; index < 3; index += 1) {
      expect((await raw(copyKey('switch', index)))?.copies).toEqual({ N: '0' });
    }
    expect((await raw(tokenKey('switch')))?.copiesRetiring).toBeUndefined();
    backend.reset();
    // The reader knew 3: the copy it reads says 0, so it reads the main item, and from then on
    // only the main item.
    expect((await reader.read('switch')).token?.accessToken).toBe('switch-1');
    expect((await reader.read('switch')).token?.accessToken).toBe('switch-1');
    expect(reads('token#switch')).toBe(2);
    await writer.acquireLease('switch', lease('b:1', { replaces: 'switch-1' }));
    await writer.putToken(record('switch-2', 'switch'), ref('b:1'));
    expect(puts('switch')).toEqual([]);
    expect(await operator.setCopies('switch', 3)).toEqual({ previous: 0, copies: 3 });
    await copiesHoldMain('switch', 3);
    backend.reset();
    await reader.read('switch');
    expect((await reader.read('switch')).token?.accessToken).toBe('switch-2');
    expect(reads('token#switch')).toBe(1);
  });

  it('sets copies 3 → 1: the copies let go say so, and writes keep them until every one does', async () => {
    const operator = container();
    await operator.setCopies('fewer', 3);
    const reader = container(() => 0.99);
    await reader.read('fewer');
    await operator.setCopies('fewer', 1);
    for (const index of [1, 2]) {
      expect((await raw(copyKey('fewer', index)))?.copies).toEqual({ N: '1' });
    }
    backend.reset();
    // Reads copy 2 (it knew 3), which says 1: reads the main item, then copy 0 only.
    await reader.read('fewer');
    await reader.read('fewer');
    expect(reads('copy#2#token#fewer')).toBe(1);
    expect(reads('token#fewer')).toBe(1);
    expect(reads('copy#0#token#fewer')).toBe(1);
    // An operator stopped between its two writes leaves copiesRetiring: writers keep all three.
    await rawMainWrite('fewer', 'SET copiesRetiring = :three', { ':three': { N: '3' } });
    backend.reset();
    await operator.acquireLease('fewer', lease('a:1'));
    expect(new Set(puts('fewer').map((p) => p.pk))).toEqual(
      new Set([0, 1, 2].map((i) => `copy#${i}#token#fewer`)),
    );
    // Run again, the action finishes the reduction.
    expect(await operator.setCopies('fewer', 1)).toEqual({ previous: 1, copies: 1 });
    expect((await raw(tokenKey('fewer')))?.copiesRetiring).toBeUndefined();
  });

  it('an item deleted and written again starts a later epoch: its copies are overwritten, and an older copy never answers a reader that saw the new one', async () => {
    const first = container();
    await first.acquireLease('reborn', lease('a:1'));
    await first.putToken(record('reborn-1', 'reborn'), ref('a:1'));
    await first.setCopies('reborn', 2);
    await backend.direct.send(new DeleteItemCommand({ TableName: TABLE, Key: tokenKey('reborn') }));
    // Written again by a container whose clock is later (its epoch is its clock).
    const later = container(Math.random, () => Date.now() + 5_000);
    await later.acquireLease('reborn', lease('b:1'));
    await later.putToken(record('reborn-2', 'reborn'), ref('b:1'));
    // Its operator stopped after the main item's write, before the copies.
    await rawMainWrite('reborn', 'SET copies = :two', { ':two': { N: '2' } });
    const reader = container();
    await reader.read('reborn');
    // The copies hold the first epoch's token: older than the image this reader saw.
    for (let i = 0; i < 4; i += 1) {
      expect((await reader.read('reborn')).token?.accessToken).toBe('reborn-2');
    }
    await later.setCopies('reborn', 2);
    await copiesHoldMain('reborn', 2);
  });

  it('an item written again under an epoch earlier than its old copies’ (an operator’s clock ahead) still reaches them', async () => {
    // The operator sets copies before the connection's first token, from a clock an hour
    // ahead: its write creates the item, and starts its epoch.
    const ahead = container(Math.random, () => Date.now() + 3_600_000);
    await ahead.setCopies('skewed', 2);
    const fleet = container();
    await fleet.acquireLease('skewed', lease('a:1'));
    await fleet.putToken(record('skewed-1', 'skewed'), ref('a:1'));
    // TTL deletes the main item (its copies' deletions lag); a container writes it again.
    await backend.direct.send(new DeleteItemCommand({ TableName: TABLE, Key: tokenKey('skewed') }));
    const later = container();
    await later.acquireLease('skewed', lease('b:1'));
    await later.putToken(record('skewed-2', 'skewed'), ref('b:1'));
    // Set again, by an operator whose clock is right: answered once every copy holds the item.
    expect(await container().setCopies('skewed', 2)).toEqual({ previous: 0, copies: 2 });
    await copiesHoldMain('skewed', 2);
    const reader = container();
    for (let i = 0; i < 6; i += 1) {
      expect((await reader.read('skewed')).token?.accessToken).toBe('skewed-2');
    }
    // Later writes reach them as usual.
    await later.acquireLease('skewed', lease('c:1', { replaces: 'skewed-2' }));
    await copiesHoldMain('skewed', 2);
  });

  it('keeps every copy equal to the main item when containers race their writes', async () => {
    const operator = container();
    await operator.setCopies('race', 3);
    const racers = Array.from({ length: 6 }, () => container());
    await Promise.all(racers.map((store, i) => store.acquireLease('race', lease(`r${i}:1`))));
    const winner = (await operator.read('race')).lease?.holder ?? '';
    await Promise.all(
      racers.map((store, i) =>
        store.putToken(record(`race-${i}`, 'race'), ref(`r${i}:1`)).catch(() => false),
      ),
    );
    await copiesHoldMain('race', 3);
    expect((await operator.read('race')).token?.accessToken).toBe(
      `race-${winner.slice(1, winner.indexOf(':'))}`,
    );
  });

  it('refuses a count of copies out of range', async () => {
    const store = container();
    for (const bad of [-1, 9, 1.5, Number.NaN]) {
      await expect(store.setCopies('range', bad)).rejects.toBeInstanceOf(RangeError);
    }
  });
});
