import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { TokenBroker, tokenDigest } from '../../../lib/broker/index.js';
import { systemClock } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import {
  BadRequestError,
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  UnknownConnectionError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../../../lib/errors.js';
import { caught, unexpected } from '../../support/errors.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  FakeIssuer,
  FakeSecretSource,
  InMemoryTokenStore,
} from '../../support/fakes.js';

const T0 = new Date('2026-11-21T12:00:00Z').getTime();

interface SetupOptions {
  connections?: ConnectionConfig[];
  recheck?: number;
  window?: number;
  /** Share a store between brokers: each broker is one container. */
  store?: InMemoryTokenStore;
  issuer?: FakeIssuer;
  random?: () => number;
  sleep?: (ms: number) => Promise<void>;
  /** BROKER_INVALIDATE_MIN_AGE_SECONDS; off unless a test is about it. */
  invalidateFloor?: number;
}

const setup = (overrides: SetupOptions = {}) => {
  const connections = overrides.connections ?? [
    connection(),
    connection({ name: 'legacy', variant: 'legacy' }),
  ];
  const store = overrides.store ?? new InMemoryTokenStore();
  const secrets = new FakeSecretSource();
  const issuer = overrides.issuer ?? new FakeIssuer();
  const logger = captureLogger();
  const metrics = new CountingMetrics();
  const broker = new TokenBroker({
    config: {
      connections: new Map(connections.map((c) => [c.name, c])),
      defaultMinValiditySeconds: 60,
      refreshWindowSeconds: overrides.window ?? 600,
      memoryRecheckSeconds: overrides.recheck ?? 5,
      maxTokenLifetimeSeconds: 30 * 86_400,
      upstreamTimeoutMs: 2_000,
      invalidateMinAgeSeconds: overrides.invalidateFloor ?? 0,
    },
    store,
    secrets,
    issuer,
    logger,
    metrics,
    clock: {
      ...systemClock,
      // XFetch off unless a test turns it on: -log(1 - 0) = 0 means no earliness.
      random: overrides.random ?? (() => 0),
      // Waits advance the fake clock, so drains and backoff cost no real time.
      sleep:
        overrides.sleep ??
        (async (ms: number) => {
          await vi.advanceTimersByTimeAsync(ms);
        }),
    },
  });
  return { broker, store, secrets, issuer, logger, metrics };
};

const deadline = () => Date.now() + 10_000;

describe('Class: TokenBroker', () => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(T0);
  });
  afterEach(() => {
    vi.useRealTimers();
  });

  describe('Method: getToken', () => {
    it('issues once, then serves from memory without touching the store or upstream', async () => {
      const { broker, store, issuer } = setup();
      const first = await broker.getToken('sandbox', { deadline: deadline() });
      expect(first.source).toBe('upstream');
      expect(first.record).toMatchObject({
        connection: 'sandbox',
        accessToken: 'token-1',
        issuedAt: T0,
        expiresAt: T0 + 3600_000,
        tokenDigest: tokenDigest('token-1'),
      });
      const reads = store.calls.read;
      const second = await broker.getToken('sandbox', { deadline: deadline() });
      expect(second).toEqual({
        record: first.record,
        source: 'memory',
        reusableUntil: first.reusableUntil,
      });
      expect(store.calls.read).toBe(reads);
      expect(issuer.issued).toBe(1);
    });

    it('serves a token another container stored, without calling the upstream', async () => {
      const { broker, store, issuer, secrets } = setup();
      const record = {
        connection: 'sandbox',
        accessToken: 'from-elsewhere',
        tokenDigest: tokenDigest('from-elsewhere'),
        issuedAt: T0 - 1000,
        expiresAt: T0 + 3600_000,
      };
      store.setToken(record);
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served).toEqual({ record, source: 'dynamodb', reusableUntil: expect.any(Number) });
      expect(issuer.issued).toBe(0);
      expect(secrets.calls).toBe(0);
    });

    it('checks expiry itself: a stored token past its expiry is never served', async () => {
      const { broker, store, issuer } = setup();
      store.setToken({
        connection: 'sandbox',
        accessToken: 'stale',
        tokenDigest: tokenDigest('stale'),
        issuedAt: T0 - 7200_000,
        expiresAt: T0 - 1,
      });
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.accessToken).toBe('token-1');
      expect(issuer.issued).toBe(1);
      expect(store.token('sandbox')?.accessToken).toBe('token-1');
    });

    it('re-reads the store once the memory re-check interval has passed', async () => {
      const { broker, store } = setup({ recheck: 5 });
      await broker.getToken('sandbox', { deadline: deadline() });
      const reads = store.calls.read;
      vi.advanceTimersByTime(4_000);
      expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('memory');
      vi.advanceTimersByTime(1_001);
      expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('dynamodb');
      expect(store.calls.read).toBe(reads + 1);
    });

    it('stops serving a token from memory within the re-check interval once it was dropped elsewhere', async () => {
      const { broker, store, issuer } = setup({ recheck: 5 });
      await broker.getToken('sandbox', { deadline: deadline() });
      store.items.delete('sandbox'); // another container invalidated it
      vi.advanceTimersByTime(5_001);
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.accessToken).toBe('token-2');
      expect(issuer.issued).toBe(2);
    });

    it('honours minValidity exactly', async () => {
      const { broker, issuer } = setup({ window: 60 });
      await broker.getToken('sandbox', { deadline: deadline() });
      vi.advanceTimersByTime(3000_000); // 600 s left
      expect(
        (await broker.getToken('sandbox', { minValiditySeconds: 599, deadline: deadline() })).record
          .accessToken,
      ).toBe('token-1');
      const fresh = await broker.getToken('sandbox', {
        minValiditySeconds: 600,
        deadline: deadline(),
      });
      expect(fresh.record.accessToken).toBe('token-2');
      expect(fresh.source).toBe('upstream');
      expect(issuer.issued).toBe(2);
    });

    it('answers a minValidity the upstream lifetime cannot satisfy with a clear error, not a loop', async () => {
      const { broker, issuer } = setup();
      const error = await broker
        .getToken('sandbox', { minValiditySeconds: 7200, deadline: deadline() })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(MinValidityUnsatisfiableError);
      expect(error.message).toBe(
        'The Open API issues tokens valid for 3600s, which cannot satisfy a validity of 7200s',
      );
      expect(issuer.issued).toBe(1);
    });

    it.each([-1, 1.5, 30 * 86_400])('rejects minValidity %s', async (minValiditySeconds) => {
      const { broker } = setup();
      await expect(
        broker.getToken('sandbox', { minValiditySeconds, deadline: deadline() }),
      ).rejects.toBeInstanceOf(BadRequestError);
    });

    it('rejects an unknown connection, including prototype member names', async () => {
      const { broker } = setup();
      for (const name of ['nope', '__proto__', 'constructor', 'toString']) {
        const error = await broker
          .getToken(name, { deadline: deadline() })
          .then(unexpected, caught);
        expect(error).toBeInstanceOf(UnknownConnectionError);
        expect(error.code).toBe('UNKNOWN_CONNECTION');
      }
    });

    it('shares one issuance between concurrent misses in a container', async () => {
      const { broker, issuer } = setup();
      vi.useRealTimers();
      issuer.delayMs = 20;
      const served = await Promise.all(
        Array.from({ length: 25 }, () => broker.getToken('sandbox', { deadline: deadline() })),
      );
      expect(issuer.issued).toBe(1);
      expect(new Set(served.map((s) => s.record.accessToken))).toEqual(new Set(['token-1']));
    });

    it('answers a caller who joined a slow issuance when its own deadline comes', async () => {
      const { broker, issuer } = setup();
      vi.useRealTimers();
      issuer.delayMs = 300;
      const leader = broker.getToken('sandbox', { deadline: Date.now() + 5000 });
      const follower = broker.getToken('sandbox', { deadline: Date.now() + 50 });
      await expect(follower).rejects.toBeInstanceOf(UpstreamUnavailableError);
      await expect(leader).resolves.toMatchObject({ source: 'upstream' });
    });

    it('does not hand a joiner the shared issuance when it needs more validity than it gives', async () => {
      const { broker, issuer } = setup();
      issuer.expiresIn = 100;
      vi.useRealTimers();
      issuer.delayMs = 20;
      const leader = broker.getToken('sandbox', {
        minValiditySeconds: 10,
        deadline: Date.now() + 5000,
      });
      const joiner = broker.getToken('sandbox', {
        minValiditySeconds: 200,
        deadline: Date.now() + 5000,
      });
      await expect(joiner).rejects.toBeInstanceOf(MinValidityUnsatisfiableError);
      await expect(leader).resolves.toMatchObject({ source: 'upstream' });
      expect(issuer.issued).toBe(1);
    });

    it('loads again for a joiner whose need the shared read of the store did not meet', async () => {
      // A 60 s window: the stored token (120 s left) is outside it, so no refresh ahead.
      const { broker, issuer, store } = setup({ window: 60 });
      store.setToken({
        connection: 'sandbox',
        accessToken: 'short',
        tokenDigest: tokenDigest('short'),
        issuedAt: T0 - 3_480_000,
        expiresAt: T0 + 120_000,
      });
      let release: (() => void) | undefined;
      const read = store.read.bind(store);
      store.read = async (name) => {
        if (!release)
          await new Promise<void>((resolve) => {
            release = resolve;
          });
        return read(name);
      };
      const leader = broker.getToken('sandbox', { minValiditySeconds: 60, deadline: T0 + 5000 });
      // Replacing a token outside its window drains the 5 s re-check first: a longer deadline.
      const joiner = broker.getToken('sandbox', { minValiditySeconds: 300, deadline: T0 + 9000 });
      await vi.advanceTimersByTimeAsync(0);
      release?.();
      await expect(leader).resolves.toMatchObject({
        source: 'dynamodb',
        record: { accessToken: 'short' },
      });
      await expect(joiner).resolves.toMatchObject({
        source: 'upstream',
        record: { accessToken: 'token-1' },
      });
      expect(issuer.issued).toBe(1);
    });

    it('caches nothing when the upstream fails, and says what it said', async () => {
      const { broker, issuer, store } = setup();
      issuer.failWith = new UpstreamRejectedError(
        'Open API rejected the authorize request: code 100001: invalid clientId',
        { upstreamCode: '100001', upstreamMessage: 'invalid clientId' },
      );
      await expect(broker.getToken('sandbox', { deadline: deadline() })).rejects.toThrow(
        'code 100001: invalid clientId',
      );
      expect(store.token('sandbox')).toBeUndefined();
      issuer.failWith = undefined;
      await expect(broker.getToken('sandbox', { deadline: deadline() })).resolves.toMatchObject({
        source: 'upstream',
      });
    });

    it('keeps serving a valid token from memory while the store is unreadable', async () => {
      const { broker, store } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: deadline() });
      store.failing = true;
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
    });

    it('fails with STORE_UNAVAILABLE when the store is unreadable and nothing is in memory', async () => {
      const { broker, store, issuer } = setup();
      store.failing = true;
      const error = await broker
        .getToken('sandbox', { deadline: deadline() })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(issuer.issued).toBe(0);
    });

    it('warns about upstream clock skew but counts expiry from the local clock', async () => {
      const { broker, issuer, logger } = setup();
      const requestToken = issuer.requestToken.bind(issuer);
      issuer.requestToken = async (...args) => ({
        ...(await requestToken(...args)),
        upstreamTimestamp: T0 / 1000 + 3600,
      });
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.expiresAt).toBe(T0 + 3600_000);
      expect(logger.lines).toContainEqual(
        expect.objectContaining({
          level: 'warn',
          attributes: [expect.objectContaining({ skewSeconds: 3600 })],
        }),
      );
    });
  });

  describe('Method: invalidate', () => {
    it('drops the cached token when it is the one reported, and the next call re-issues once', async () => {
      const { broker, store, issuer } = setup();
      await broker.getToken('sandbox', { deadline: deadline() });
      expect(await broker.invalidate('sandbox', 'token-1')).toEqual({ invalidated: true });
      expect(store.token('sandbox') !== undefined).toBe(false);
      const next = await broker.getToken('sandbox', { deadline: deadline() });
      expect(next).toMatchObject({ source: 'upstream', record: { accessToken: 'token-2' } });
      expect(issuer.issued).toBe(2);
    });

    it('does not drop a token younger than the floor, but keeps the report; the token it issues is not replaced on a report for a window', async () => {
      const { broker, issuer, store } = setup({ invalidateFloor: 10 });
      const first = await broker.getToken('sandbox', { deadline: deadline() });
      vi.advanceTimersByTime(5_000);
      expect(await broker.invalidate('sandbox', first.record.accessToken)).toEqual({
        invalidated: false,
        deferredSeconds: 5,
      });
      expect(store.token('sandbox')?.accessToken).toBe(first.record.accessToken);
      expect((await broker.getToken('sandbox', { deadline: deadline() })).record.accessToken).toBe(
        first.record.accessToken,
      );
      vi.advanceTimersByTime(5_001);
      expect(await broker.invalidate('sandbox', first.record.accessToken)).toEqual({
        invalidated: true,
      });
      const next = await broker.getToken('sandbox', { deadline: deadline() });
      expect(next.record).toMatchObject({ accessToken: 'token-2', forced: true });
      // Issued on a caller's word: reports of it wait a refresh window (600 s here).
      expect(await broker.invalidate('sandbox', next.record.accessToken)).toEqual({
        invalidated: false,
        deferredSeconds: 600,
      });
      expect(issuer.issued).toBe(2);
    });

    it('ignores a report about a token that is no longer the cached one', async () => {
      const { broker, store, issuer } = setup();
      await broker.getToken('sandbox', { deadline: deadline() });
      await broker.invalidate('sandbox', 'token-1');
      await broker.getToken('sandbox', { deadline: deadline() });
      expect(await broker.invalidate('sandbox', 'token-1')).toEqual({ invalidated: false });
      expect(store.token('sandbox')?.accessToken).toBe('token-2');
      expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('memory');
      expect(issuer.issued).toBe(2);
    });

    it('logs the digest of the reported token, never the token', async () => {
      const { broker, logger } = setup();
      await broker.getToken('sandbox', { deadline: deadline() });
      await broker.invalidate('sandbox', 'token-1');
      expect(JSON.stringify(logger.lines)).not.toContain('"token-1"');
      expect(JSON.stringify(logger.lines)).toContain(tokenDigest('token-1'));
    });
  });

  describe('Method: warmUp', () => {
    it('issues where a token is missing or inside the refresh window, and leaves fresh ones alone', async () => {
      const { broker, issuer, store } = setup({ window: 600 });
      store.setToken({
        connection: 'legacy',
        accessToken: 'still-fresh',
        tokenDigest: tokenDigest('still-fresh'),
        issuedAt: T0,
        expiresAt: T0 + 3600_000,
      });
      const first = await broker.warmUp(deadline());
      expect(first.connections).toEqual({
        sandbox: {
          status: 'issued',
          expiresAt: new Date(T0 + 3600_000).toISOString(),
          expiresIn: 3600,
        },
        legacy: {
          status: 'fresh',
          expiresAt: new Date(T0 + 3600_000).toISOString(),
          expiresIn: 3600,
        },
      });
      expect(issuer.issued).toBe(1);
      vi.advanceTimersByTime(3000_000); // both now have 600 s left: inside the window
      // At the window's edge each replacement drains the full 5 s re-check (a container whose
      // clock is behind may not see the window yet); the fake sleeps of both add up here.
      const second = await broker.warmUp(Date.now() + 30_000);
      expect(second.issued).toBe(2);
      expect(second.connections.sandbox?.status).toBe('issued');
      const third = await broker.warmUp(deadline());
      expect(third.issued).toBe(0);
    });

    it('reports a failing connection without stopping the others', async () => {
      const { broker, issuer } = setup();
      const authorize = issuer.authorize.bind(issuer);
      issuer.authorize = async (conn, creds, options) => {
        if (conn.name === 'legacy')
          throw new UpstreamUnavailableError('Open API authorize request failed: ECONNREFUSED', {
            retryAfterSeconds: 1,
          });
        return authorize(conn, creds, options);
      };
      const report = await broker.warmUp(deadline());
      expect(report.failed).toBe(1);
      expect(report.connections.sandbox?.status).toBe('issued');
      expect(report.connections.legacy).toEqual({
        status: 'failed',
        error: {
          code: 'UPSTREAM_UNAVAILABLE',
          message: 'Open API authorize request failed: ECONNREFUSED',
        },
      });
    });

    it('uses the window clamped to half the lifetime, like every other path: tokens shorter than the configured window are issued once, not forever', async () => {
      // Waits are timers here: both connections count down at once, in the same fake time.
      const { broker, issuer } = setup({
        window: 600,
        sleep: (ms) => new Promise((resolve) => setTimeout(resolve, ms)),
      });
      issuer.expiresIn = 300;
      expect((await broker.warmUp(deadline())).connections.sandbox).toMatchObject({
        status: 'issued',
      });
      // 300 s tokens have a 150 s window: 100 s later the token is still outside it.
      vi.advanceTimersByTime(100_000);
      expect((await broker.warmUp(deadline())).connections.sandbox).toMatchObject({
        status: 'fresh',
      });
      vi.advanceTimersByTime(60_000); // now inside the window (140 s left)
      const started = Date.now();
      const warming = broker.warmUp(deadline());
      await vi.advanceTimersByTimeAsync(6_000); // the countdown (21 steps of 250 ms) and the POST
      expect((await warming).connections.sandbox).toMatchObject({ status: 'issued' });
      expect(issuer.issued).toBe(4); // two rounds of issuance for the two connections
      expect(Date.now() - started).toBe(6_000);
    });
  });

  describe('Fleet: several containers sharing one store', () => {
    const record = (accessToken: string, expiresAt: number, issuedAt = expiresAt - 3600_000) => ({
      connection: 'sandbox',
      accessToken,
      tokenDigest: tokenDigest(accessToken),
      issuedAt,
      expiresAt,
    });

    it('lets only the lease holder issue; a container that finds a live lease waits for its token', async () => {
      const store = new InMemoryTokenStore();
      const issuer = new FakeIssuer();
      const holder = setup({ store, issuer });
      store.items.set('sandbox', {
        lease: {
          holder: 'other-container:1',
          expiresAt: T0 + 10_000,
          durationMs: 3_000,
          countdown: 0,
        },
      });
      let slept = 0;
      const waiter = setup({
        store,
        issuer,
        sleep: async (ms) => {
          slept += ms;
          // The other container finishes while we wait: its token replaces the lease.
          store.items.set('sandbox', { token: record('from-holder', T0 + 3600_000) });
        },
        random: () => 0.5,
      });
      const served = await waiter.broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'from-holder' } });
      expect(issuer.issued).toBe(0);
      expect(slept).toBeGreaterThan(0);
      expect(waiter.metrics.get('LeaseWaits')).toBe(1);
      expect(
        (await holder.broker.getToken('sandbox', { deadline: T0 + 5_000 })).record.accessToken,
      ).toBe('from-holder');
    });

    it('takes over a lease whose holder died once it expires, and issues exactly once', async () => {
      const store = new InMemoryTokenStore();
      const { broker, issuer } = setup({ store });
      store.items.set('sandbox', {
        lease: { holder: 'dead-container:1', expiresAt: T0 - 1, durationMs: 3_000, countdown: 0 },
      });
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served).toMatchObject({ source: 'upstream', record: { accessToken: 'token-1' } });
      expect(issuer.issued).toBe(1);
      expect(store.items.get('sandbox')).toEqual({ token: served.record });
    });

    it('answers 503 rather than wait past its own deadline for another holder', async () => {
      const store = new InMemoryTokenStore();
      store.items.set('sandbox', {
        lease: { holder: 'slow:1', expiresAt: T0 + 60_000, durationMs: 3_000, countdown: 0 },
      });
      const { broker, issuer } = setup({
        store,
        random: () => 0.99,
        sleep: async (ms) => {
          await vi.advanceTimersByTimeAsync(ms);
        },
      });
      const error = await broker
        .getToken('sandbox', { deadline: T0 + 2_000 })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(UpstreamUnavailableError);
      expect(error.message).toBe('Timed out waiting for another container to issue the token');
      expect(issuer.issued).toBe(0);
    });

    it('keeps its lease alive with heartbeats while a slow flow runs, and lets it lapse soon after dying', async () => {
      const { broker, issuer, store } = setup();
      issuer.delayMs = 5_000; // longer than the 3 s lease
      const pending = broker.getToken('sandbox', { deadline: T0 + 9_000 });
      await vi.advanceTimersByTimeAsync(4_000);
      const lease = store.items.get('sandbox')?.lease;
      expect(lease?.expiresAt).toBeGreaterThan(T0 + 4_000);
      expect(lease?.expiresAt).toBeLessThanOrEqual(T0 + 4_000 + 3_000);
      await vi.advanceTimersByTimeAsync(2_000);
      await expect(pending).resolves.toMatchObject({ source: 'upstream' });
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
    });

    it('frees the lease at once when the flow fails, so the next caller need not wait', async () => {
      const { broker, issuer, store } = setup();
      issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      await expect(broker.getToken('sandbox', { deadline: T0 + 5_000 })).rejects.toBeInstanceOf(
        UpstreamUnavailableError,
      );
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
    });

    it('drops its own token when its lease was taken over meanwhile, and serves the new holder’s', async () => {
      const store = new InMemoryTokenStore();
      const issuer = new FakeIssuer();
      const { broker } = setup({ store, issuer });
      const requestToken = issuer.requestToken.bind(issuer);
      issuer.requestToken = async (...args) => {
        const mine = await requestToken(...args);
        // We overran our lease; another container took it and wrote its token.
        store.items.set('sandbox', { token: record('new-holder', T0 + 3600_500) });
        return mine;
      };
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served.record.accessToken).toBe('new-holder');
    });

    it('invalidate leaves a lease in progress alone', async () => {
      const store = new InMemoryTokenStore();
      const { broker } = setup({ store });
      store.items.set('sandbox', {
        token: record('current', T0 + 3600_000),
        lease: { holder: 'refresher:1', expiresAt: T0 + 10_000, durationMs: 3_000, countdown: 0 },
      });
      expect(await broker.invalidate('sandbox', 'current')).toEqual({ invalidated: true });
      expect(store.items.get('sandbox')).toEqual({
        lease: { holder: 'refresher:1', expiresAt: T0 + 10_000, durationMs: 3_000, countdown: 0 },
        // When the report came: why the next token is issued.
        invalidatedAt: T0,
      });
    });
  });

  describe('Refresh ahead of expiry', () => {
    const inWindow = (store: InMemoryTokenStore, remainingMs: number) =>
      store.setToken({
        connection: 'sandbox',
        accessToken: 'current',
        tokenDigest: tokenDigest('current'),
        issuedAt: T0 + remainingMs - 3600_000,
        expiresAt: T0 + remainingMs,
      });

    it('does not refresh before the middle of the window without XFetch earliness', async () => {
      const { broker, store, issuer } = setup({ window: 600 });
      inWindow(store, 601_000);
      expect((await broker.getToken('sandbox', { deadline: T0 + 5_000 })).record.accessToken).toBe(
        'current',
      );
      expect(issuer.issued).toBe(0);
    });

    it('refreshes once inside the window, in the background of the request that wins the lease', async () => {
      const { broker, store, issuer } = setup({ window: 600 });
      inWindow(store, 299_000);
      // That caller is answered at once, with the current token: the countdown keeps it safe.
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'current' } });
      expect(Date.now()).toBe(T0);
      expect(store.items.get('sandbox')?.lease?.countdown).toBe(21);
      await broker.idle();
      expect(issuer.issued).toBe(1);
      const next = await broker.getToken('sandbox', { deadline: Date.now() + 5_000 });
      expect(next).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
      expect(issuer.issued).toBe(1);
    });

    it('waits for the successor while another container refreshes a token inside its window', async () => {
      const { broker, store, issuer } = setup({
        window: 600,
        random: () => 0.5,
        sleep: async (ms) => {
          await vi.advanceTimersByTimeAsync(ms);
          // The refresher finishes: its token replaces the item, lease included.
          store.items.set('sandbox', {
            token: {
              connection: 'sandbox',
              accessToken: 'successor',
              tokenDigest: tokenDigest('successor'),
              issuedAt: Date.now(),
              expiresAt: Date.now() + 3600_000,
            },
          });
        },
      });
      inWindow(store, 300_000);
      store.items.set('sandbox', {
        ...store.items.get('sandbox'),
        lease: { holder: 'refresher:1', expiresAt: T0 + 10_000, durationMs: 3_000, countdown: 0 },
      });
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'successor' } });
      expect(issuer.issued).toBe(0);
    });

    it('neither drains nor makes callers wait when the upstream does not revoke on re-issue', async () => {
      const { broker, store, issuer } = setup({
        window: 600,
        connections: [connection({ revokesOnReissue: false })],
        sleep: async () => {
          throw new Error('nothing should wait');
        },
      });
      inWindow(store, 299_000);
      store.items.set('sandbox', {
        ...store.items.get('sandbox'),
        lease: { holder: 'refresher:1', expiresAt: T0 + 10_000, durationMs: 3_000, countdown: 0 },
      });
      // A refresh elsewhere is in progress: the current token is served at once.
      expect((await broker.getToken('sandbox', { deadline: T0 + 5_000 })).record.accessToken).toBe(
        'current',
      );
      await broker.idle(); // this container's try lost to it
      store.items.set('sandbox', { token: store.token('sandbox') });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      await broker.idle();
      expect(issuer.issued).toBe(1);
      expect(Date.now()).toBe(T0); // no countdown, no wait
      const refreshed = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(refreshed.record.accessToken).toBe('token-1');
    });

    it('announces the cut-over: the token request leaves only after a countdown longer than any re-check', async () => {
      const { broker, store, issuer } = setup({ window: 600 });
      inWindow(store, 300_000);
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      await broker.idle();
      expect(issuer.issued).toBe(1);
      // 21 steps of 250 ms: more than the 5 s re-check and its 100 ms margin.
      expect(store.token('sandbox')?.issuedAt).toBe(T0 + 21 * 250);
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
    });

    it('keeps serving the current token when the refresh fails, and counts the failure', async () => {
      const { broker, store, issuer, metrics, logger } = setup({ window: 600 });
      inWindow(store, 300_000);
      issuer.failWith = new UpstreamUnavailableError(
        'Open API authorize request failed: ECONNREFUSED',
        { retryAfterSeconds: 1 },
      );
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served.record.accessToken).toBe('current');
      await broker.idle();
      expect(metrics.get('RefreshFailures')).toBe(1);
      expect(
        logger.lines.some(
          (l) => l.level === 'warn' && l.message.startsWith('Refresh ahead of expiry failed'),
        ),
      ).toBe(true);
      expect(store.items.get('sandbox')?.lease).toBeUndefined();
      expect(
        (await broker.getToken('sandbox', { deadline: Date.now() + 5_000 })).record.accessToken,
      ).toBe('current');
    });

    it('tries earlier with XFetch as expiry nears, with a probability that grows towards the window', async () => {
      // δ (last issuance) 0.3 s by default; earliness = -δ·ln(1 - u), aimed a countdown (21
      // steps, 5.25 s) before the middle of the window. At 1 s before that aim, u must exceed
      // 1 - e^(-1/0.3) ≈ 0.9643 for a request to try.
      const tries = async (u: number, remainingMs: number) => {
        const { broker, store, issuer } = setup({ window: 600, random: () => u });
        inWindow(store, remainingMs);
        await broker.getToken('sandbox', { deadline: T0 + 5_000 });
        await broker.idle();
        return issuer.issued;
      };
      expect(await tries(0.5, 306_250)).toBe(0);
      expect(await tries(0.95, 306_250)).toBe(0);
      expect(await tries(0.97, 306_250)).toBe(1);
    });

    it('never tries before the window starts, however the draw falls', async () => {
      const { broker, store, issuer } = setup({ window: 600, random: () => 1 - 1e-15 });
      inWindow(store, 601_000);
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(issuer.issued).toBe(0);
    });

    it('reads the store once per re-check inside the window too, and learns of a refresh elsewhere from its countdown', async () => {
      const { broker, store, issuer } = setup({ window: 600, recheck: 5 });
      inWindow(store, 400_000); // inside the window, before its middle: this one does not try
      const served = () =>
        broker
          .getToken('sandbox', { deadline: Date.now() + 5_000 })
          .then((s) => s.record.accessToken);
      expect(await served()).toBe('current');
      for (let i = 0; i < 49; i += 1) {
        vi.advanceTimersByTime(100);
        expect(await served()).toBe('current');
      }
      expect(store.calls.read).toBe(1); // 4.9 s of requests, one read
      // Another container takes the lease: its countdown announces 5 steps (1 s, less 100 ms).
      store.items.set('sandbox', {
        ...store.items.get('sandbox'),
        lease: {
          holder: 'other:1',
          expiresAt: Date.now() + 3_000,
          durationMs: 3_000,
          countdown: 5,
        },
      });
      vi.advanceTimersByTime(100);
      expect(await served()).toBe('current'); // read again at 5 s: still served
      expect(store.calls.read).toBe(2);
      vi.advanceTimersByTime(850);
      expect(await served()).toBe('current'); // from memory, inside what was announced
      expect(store.calls.read).toBe(2);
      // The countdown it read has run out: no longer served from memory; the store says the
      // replacement is out (countdown 0), and its token comes.
      store.items.set('sandbox', {
        ...store.items.get('sandbox'),
        lease: {
          holder: 'other:1',
          expiresAt: Date.now() + 5_000,
          durationMs: 5_000,
          countdown: 0,
        },
      });
      vi.advanceTimersByTime(100);
      const waiting = served();
      store.items.set('sandbox', {
        token: {
          connection: 'sandbox',
          accessToken: 'refreshed',
          tokenDigest: tokenDigest('refreshed'),
          issuedAt: Date.now(),
          expiresAt: Date.now() + 3600_000,
        },
      });
      expect(await waiting).toBe('refreshed');
      expect(issuer.issued).toBe(0);
    });

    it('clamps the window to half the token lifetime, so a short-lived token is not refreshed on every request', async () => {
      const issuer = new FakeIssuer();
      issuer.expiresIn = 300; // shorter than the 600 s window
      const { broker } = setup({ window: 600, issuer });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(100_000); // 200 s left: outside the clamped 150 s window
      await broker.getToken('sandbox', { deadline: Date.now() + 5_000 });
      await broker.idle();
      expect(issuer.issued).toBe(1);
      vi.advanceTimersByTime(130_000); // 70 s left: past the middle of that window
      await broker.getToken('sandbox', { deadline: Date.now() + 5_000 });
      await broker.idle();
      expect(issuer.issued).toBe(2);
    });
  });

  describe('Reuse time: how long a caller may keep a token without asking again', () => {
    const storeToken = (store: InMemoryTokenStore, remainingMs: number, accessToken = 'current') =>
      store.setToken({
        connection: 'sandbox',
        accessToken,
        tokenDigest: tokenDigest(accessToken),
        issuedAt: T0 + remainingMs - 3600_000,
        expiresAt: T0 + remainingMs,
      });

    it('lasts what the read that served the token proves, less the margin, counted from that read', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      const first = await broker.getToken('sandbox', { deadline: deadline() });
      expect(first.source).toBe('dynamodb');
      // The read proves the token safe for a re-check (5 s); the answer keeps 100 ms of it.
      expect(first.reusableUntil).toBe(T0 + 5_000 - 100);
      await vi.advanceTimersByTimeAsync(3_000);
      const later = await broker.getToken('sandbox', { deadline: deadline() });
      expect(later.source).toBe('memory');
      // From memory, the same proof: 3 s of it are gone.
      expect(later.reusableUntil).toBe(first.reusableUntil);
    });

    it('never runs past the validity the caller asked for', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      const served = await broker.getToken('sandbox', {
        deadline: deadline(),
        minValiditySeconds: 2998,
      });
      expect(served.reusableUntil).toBe(T0 + 3000_000 - 2998_000);
    });

    it('is over, not negative, when less than the margin of the proof is left', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      await broker.getToken('sandbox', { deadline: deadline() });
      await vi.advanceTimersByTimeAsync(4_950);
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      // Still served from memory (the re-check is 50 ms away), but not to be reused.
      expect(served.source).toBe('memory');
      expect(served.reusableUntil).toBeLessThanOrEqual(Date.now());
    });

    it('ends before the request that revokes the token leaves, on every container that served it (I: no revoked token served, at the caller)', async () => {
      // Container B serves callers while container A replaces the token with a countdown. Every
      // reuse B granted for the old token must end before A's access-token request leaves.
      const store = new InMemoryTokenStore();
      const issuer = new FakeIssuer();
      const b = setup({ store, issuer, window: 600 });
      const granted: { accessToken: string; at: number; reusableUntil: number }[] = [];
      const serveB = async () => {
        const answer = await b.broker.getToken('sandbox', { deadline: Date.now() + 5_000 });
        granted.push({
          accessToken: answer.record.accessToken,
          at: Date.now(),
          reusableUntil: answer.reusableUntil,
        });
      };
      const a = setup({
        store,
        issuer,
        window: 600,
        // Every wait of A's countdown lets B serve a caller in between, in 100 ms steps.
        sleep: async (ms) => {
          for (let left = ms; left > 0; left -= 100) {
            await vi.advanceTimersByTimeAsync(Math.min(100, left));
            await serveB();
          }
        },
      });
      storeToken(store, 299_000);
      // A's request takes the lease and starts the replacement; B only ever reads it.
      await a.broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(store.items.get('sandbox')?.lease?.countdown).toBeGreaterThan(1);
      await a.broker.idle();
      const successor = store.items.get('sandbox')?.token;
      expect(successor?.accessToken).toBe('token-1');
      const old = granted.filter((g) => g.accessToken === 'current');
      expect(old.length).toBeGreaterThan(10);
      const postedAt = successor?.issuedAt as number;
      const late = old.filter((g) => g.reusableUntil > postedAt);
      expect(late).toEqual([]);
      // And reuse is not withheld for nothing: B granted seconds of it early in the countdown.
      expect(Math.max(...old.map((g) => g.reusableUntil - g.at))).toBeGreaterThan(1_000);
    });
  });

  describe('Rotated credentials', () => {
    const rejected = () =>
      new UpstreamRejectedError(
        'Open API rejected the access-token request: HTTP 401, code invalid_client',
        {
          upstreamStatus: 401,
          upstreamCode: 'invalid_client',
          upstreamMessage: 'client authentication failed',
        },
      );

    it('re-reads the secret bypassing the cache when the upstream rejects the credentials, and retries once', async () => {
      const { broker, issuer, secrets } = setup();
      secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
      const requestToken = issuer.requestToken.bind(issuer);
      issuer.requestToken = async (conn, credentials, code, options) => {
        if (credentials.clientSecret !== 'rotated') throw rejected();
        return requestToken(conn, credentials, code, options);
      };
      const served = await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served.source).toBe('upstream');
      expect(secrets.forcedFetches).toBe(1);
    });

    it('does not retry when the secret did not change, and reports the rejection', async () => {
      const { broker, issuer, secrets } = setup();
      issuer.failWith = rejected();
      await expect(broker.getToken('sandbox', { deadline: T0 + 5_000 })).rejects.toBeInstanceOf(
        UpstreamRejectedError,
      );
      expect(secrets.forcedFetches).toBe(1);
      expect(issuer.issued).toBe(0);
    });

    it('re-reads the secret when a strict-mode signature is refused, and retries only if it changed', async () => {
      // The simulator's answer to a v3 signature made with an old secret: an envelope, HTTP 200.
      const signatureRefused = () =>
        new UpstreamRejectedError(
          'Open API rejected the signed access-token request (Strict Access Token Mode): code 100413: signature verification failed. …',
          { upstreamCode: '100413', upstreamMessage: 'signature verification failed' },
        );
      const unchanged = setup();
      unchanged.issuer.failWith = signatureRefused();
      const error = await unchanged.broker
        .getToken('sandbox', { deadline: T0 + 5_000 })
        .then(unexpected, caught);
      expect(error.upstreamCode).toBe('100413');
      expect(unchanged.secrets.forcedFetches).toBe(1);
      expect(unchanged.issuer.issued).toBe(0);

      const rotated = setup();
      rotated.secrets.stored = { clientId: 'client-1', clientSecret: 'rotated' };
      const requestToken = rotated.issuer.requestToken.bind(rotated.issuer);
      rotated.issuer.requestToken = async (conn, credentials, code, options) => {
        if (credentials.clientSecret !== 'rotated') throw signatureRefused();
        return requestToken(conn, credentials, code, options);
      };
      const served = await rotated.broker.getToken('sandbox', { deadline: T0 + 5_000 });
      expect(served.source).toBe('upstream');
      expect(rotated.secrets.forcedFetches).toBe(1);
    });

    it('does not re-read the secret for a refused timestamp (a clock problem, not a secret)', async () => {
      const { broker, issuer, secrets } = setup();
      issuer.failWith = new UpstreamRejectedError(
        'Open API rejected the signed access-token request (Strict Access Token Mode): code 100412: timestamp expired or invalid. …',
        { upstreamCode: '100412', upstreamMessage: 'timestamp expired or invalid' },
      );
      await expect(broker.getToken('sandbox', { deadline: T0 + 5_000 })).rejects.toBeInstanceOf(
        UpstreamRejectedError,
      );
      expect(secrets.forcedFetches).toBe(0);
    });

    it('does not re-read the secret for other rejections', async () => {
      const { broker, issuer, secrets } = setup();
      issuer.failWith = new UpstreamRejectedError('code 200001: rate limited', {
        upstreamCode: '200001',
        upstreamMessage: 'rate limited',
      });
      await expect(broker.getToken('sandbox', { deadline: T0 + 5_000 })).rejects.toBeInstanceOf(
        UpstreamRejectedError,
      );
      expect(secrets.forcedFetches).toBe(0);
    });
  });

  describe('Last good token', () => {
    it('is served when a newer token cannot be had and the caller gave no minValidity', async () => {
      const { broker, issuer, metrics } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3570_000); // 30 s left, below the 60 s default validity
      issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      const served = await broker.getToken('sandbox', { deadline: Date.now() + 10_000 });
      expect(served).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
      expect(metrics.get('LastGoodTokenServed')).toBe(1);
    });

    it('is served without a second upstream attempt in the same request', async () => {
      const { broker, issuer } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3570_000);
      let attempts = 0;
      issuer.authorize = async () => {
        attempts += 1;
        throw new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      };
      await broker.getToken('sandbox', { deadline: Date.now() + 10_000 });
      expect(attempts).toBe(1);
    });

    it('is not served while a refresh of a revoking upstream is in progress elsewhere: it may be revoked', async () => {
      const { broker, store } = setup({ window: 600, recheck: 0 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3_400_000); // 200 s left: inside the window
      store.items.set('sandbox', {
        ...store.items.get('sandbox'),
        lease: {
          holder: 'slow-refresher:1',
          expiresAt: Date.now() + 60_000,
          durationMs: 3_000,
          countdown: 0,
        },
      });
      const error = await broker
        .getToken('sandbox', { deadline: Date.now() + 2_000 })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(UpstreamUnavailableError);
    });

    it('is never served after a token request whose outcome is unknown: it may be revoked', async () => {
      const { broker, store, issuer, metrics } = setup({ window: 600 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3_400_000); // 200 s left: inside the window, a refresh is tried
      issuer.failWith = new UpstreamUnavailableError('access-token request timed out', {
        outcomeUnknown: true,
      });
      // Served before the request left (the countdown's point); then the request is lost.
      await broker.getToken('sandbox', { deadline: Date.now() + 5_000 });
      await broker.idle();
      const error = await broker
        .getToken('sandbox', { deadline: Date.now() + 1_000 })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(UpstreamUnavailableError);
      expect(store.token('sandbox')).toBeUndefined();
      expect(metrics.get('LastGoodTokenServed')).toBe(0);
      expect(metrics.get('UnknownOutcomes')).toBe(1);
    });

    it('is not served to a caller who asked for a validity it does not have', async () => {
      const { broker, issuer } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3570_000);
      issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      await expect(
        broker.getToken('sandbox', { minValiditySeconds: 60, deadline: Date.now() + 5_000 }),
      ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    });

    it('is never served once expired', async () => {
      const { broker, issuer } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: T0 + 5_000 });
      vi.advanceTimersByTime(3600_001);
      issuer.failWith = new UpstreamUnavailableError('down', { retryAfterSeconds: 1 });
      await expect(
        broker.getToken('sandbox', { deadline: Date.now() + 5_000 }),
      ).rejects.toBeInstanceOf(UpstreamUnavailableError);
    });
  });
});
