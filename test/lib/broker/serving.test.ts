/**
 * Serving a token: from this container's memory, from the store (a token another container
 * wrote), or from the upstream; what a caller may ask; loads shared in a container; what a
 * caller gets when a part fails; and how long a caller may reuse what it was given. The
 * guarantees behind these paths have files of their own in guarantees/.
 *
 * Issuance counts are exact: each issuance beyond one per lifetime revokes a token (I1).
 */
import { describe, expect, it, vi } from 'vitest';
import { tokenDigest } from '../../../lib/broker/index.js';
import {
  BadRequestError,
  MinValidityUnsatisfiableError,
  StoreUnavailableError,
  UnknownConnectionError,
  UpstreamRejectedError,
} from '../../../lib/errors.js';
import { caught, unexpected } from '../../support/errors.js';
import { deadline, setup, storeToken, T0, useFakeTime } from './setup.js';

describe('Serving a token', () => {
  useFakeTime();

  describe('from memory, the store or the upstream', () => {
    it('issues once, then serves from memory without touching the store or the upstream', async () => {
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
        staleIfErrorMs: first.staleIfErrorMs,
      });
      // Efficiency: memory serves without a read.
      expect(store.calls.read).toBeLessThanOrEqual(reads);
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
      expect(served).toEqual({
        record,
        source: 'dynamodb',
        reusableUntil: expect.any(Number),
        staleIfErrorMs: expect.any(Number),
      });
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

    it('reads the store again once the memory re-check interval has passed, and only once', async () => {
      const { broker, store } = setup({ recheck: 5 });
      await broker.getToken('sandbox', { deadline: deadline() });
      const reads = store.calls.read;
      vi.advanceTimersByTime(4_000);
      expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('memory');
      vi.advanceTimersByTime(1_001);
      expect((await broker.getToken('sandbox', { deadline: deadline() })).source).toBe('dynamodb');
      // At least one read: what the last one proved has run out (I2). At most one: efficiency.
      expect(store.calls.read).toBeGreaterThan(reads);
      expect(store.calls.read).toBeLessThanOrEqual(reads + 1);
    });

    it('keeps serving a valid token from memory while the store is unreadable', async () => {
      const { broker, store } = setup({ recheck: 0 });
      await broker.getToken('sandbox', { deadline: deadline() });
      store.failing = true;
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served).toMatchObject({ source: 'memory', record: { accessToken: 'token-1' } });
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

  describe('what a caller may ask', () => {
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
  });

  describe('loads shared in a container', () => {
    it('does not hand a joiner the shared issuance when it needs more validity than it gives', async () => {
      const { broker, issuer } = setup();
      issuer.expiresIn = 100;
      vi.useRealTimers();
      issuer.delayMs = 20;
      const leader = broker.getToken('sandbox', {
        minValiditySeconds: 10,
        deadline: deadline(5000),
      });
      const joiner = broker.getToken('sandbox', {
        minValiditySeconds: 200,
        deadline: deadline(5000),
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
      const leader = broker.getToken('sandbox', {
        minValiditySeconds: 60,
        deadline: deadline(5000),
      });
      // Replacing a valid token counts down first (over the 5 s re-check): a longer deadline.
      const joiner = broker.getToken('sandbox', {
        minValiditySeconds: 300,
        deadline: deadline(9000),
      });
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
  });

  describe('when a part fails', () => {
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

    it('fails with STORE_UNAVAILABLE when the store is unreadable and nothing is in memory', async () => {
      const { broker, store, issuer } = setup();
      store.failing = true;
      const error = await broker
        .getToken('sandbox', { deadline: deadline() })
        .then(unexpected, caught);
      expect(error).toBeInstanceOf(StoreUnavailableError);
      expect(issuer.issued).toBe(0);
    });
  });

  describe('reuse time: how long a caller may keep a token without asking again', () => {
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
  });
  describe('stale-if-error: how long a caller that cannot reach the broker may still use it', () => {
    it('runs after the reuse time up to the expiry less a minute, on every path', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      const read = await broker.getToken('sandbox', { deadline: deadline() });
      expect(read.staleIfErrorMs).toBe(T0 + 3000_000 - 60_000 - read.reusableUntil);
      await vi.advanceTimersByTimeAsync(3_000);
      const memory = await broker.getToken('sandbox', { deadline: deadline() });
      expect(memory.source).toBe('memory');
      expect(memory.reusableUntil + memory.staleIfErrorMs).toBe(T0 + 3000_000 - 60_000);
    });

    it('is 0 for a token under an announced replacement (a lease counting down on it)', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      const item = store.items.get('sandbox');
      store.items.set('sandbox', {
        ...item,
        lease: {
          holder: 'other',
          version: 'v1',
          expiresAt: T0 + 3_000,
          durationMs: 3_000,
          countdown: 21,
        },
      });
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.accessToken).toBe('current');
      expect(served.reusableUntil).toBeGreaterThan(Date.now());
      expect(served.staleIfErrorMs).toBe(0);
    });

    it('is 0 for a token a caller reported (kept for later: still served)', async () => {
      const { broker, store } = setup({ recheck: 5 });
      storeToken(store, 3000_000);
      const item = store.items.get('sandbox');
      store.items.set('sandbox', { ...item, reportedDigest: tokenDigest('current') });
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.accessToken).toBe('current');
      expect(served.staleIfErrorMs).toBe(0);
    });

    it('is 0 for the last good token served after a failure (unconfirmed)', async () => {
      const { broker, store, issuer } = setup({ recheck: 5 });
      await broker.getToken('sandbox', { deadline: deadline() });
      // 50 s left, below the 60 s default validity: a refresh is needed, and fails.
      await vi.advanceTimersByTimeAsync(3550_000);
      issuer.failWith = new UpstreamRejectedError('refused');
      const served = await broker.getToken('sandbox', { deadline: deadline() });
      expect(served.record.accessToken).toBe('token-1');
      expect(served.staleIfErrorMs).toBe(0);
      expect(store.token('sandbox')?.accessToken).toBe('token-1');
    });
  });
});
