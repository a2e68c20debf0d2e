import { describe, expect, it } from 'vitest';
import type { Issue } from '../../../lib/broker/credential-rotation.js';
import {
  LEASE_HEARTBEAT_MS,
  LEASE_MS,
  LeasedIssuance,
} from '../../../lib/broker/leased-issuance.js';
import { DRAIN_MS } from '../../../lib/broker/refresh-policy.js';
import { TokenMemory } from '../../../lib/broker/token-memory.js';
import { tokenDigest } from '../../../lib/broker/types.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import { StoreUnavailableError } from '../../../lib/errors.js';
import type { TokenRecord } from '../../../lib/ports.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  InMemoryTokenStore,
  ManualClock,
} from '../../support/fakes.js';

const T0 = 1_795_262_400_000;
const HOUR = 3_600_000;

const record = (accessToken: string, expiresAt: number): TokenRecord => ({
  connection: 'sandbox',
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt: expiresAt - HOUR,
  expiresAt,
});

/** One container's leased issuance over a shared store, with a controllable upstream. */
const container = (
  store: InMemoryTokenStore,
  clock: ManualClock,
  issue: Issue = async () => ({
    accessToken: 'issued',
    expiresIn: 3600,
    upstreamTimestamp: undefined,
    requestedAt: clock.now(),
  }),
) => {
  const memory = new TokenMemory();
  const calls: number[] = [];
  const issuance = new LeasedIssuance({
    store,
    clock,
    issue: async (c, deadline) => {
      calls.push(clock.now());
      return issue(c, deadline);
    },
    memory,
    settings: { refreshWindowMs: 600_000, memoryRecheckMs: 5_000 },
    logger: captureLogger(),
    metrics: new CountingMetrics(),
  });
  return { issuance, memory, calls };
};

const sandbox: ConnectionConfig = connection();

describe('Class: LeasedIssuance', () => {
  it('loses its lease while issuing, drops its own token and serves the new holder’s', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    let release: (() => void) | undefined;
    const slow = container(store, clock, async () => {
      // Paused past the lease; meanwhile another container takes over and writes its token.
      await new Promise<void>((resolve) => {
        release = resolve;
      });
      return {
        accessToken: 'stale',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    store.renewLease = async () => false; // its heartbeats no longer land
    const pending = slow.issuance.obtain(sandbox, 60_000, T0 + 60_000, false);
    await clock.advance(LEASE_MS + 1);
    const fast = container(store, clock);
    const theirs = await fast.issuance.obtain(sandbox, 60_000, T0 + 60_000, false);
    expect(theirs).toMatchObject({ source: 'upstream', record: { accessToken: 'issued' } });
    release?.();
    const served = await pending;
    expect(served).toMatchObject({ source: 'dynamodb', record: { accessToken: 'issued' } });
    expect(slow.memory.get('sandbox')?.record.accessToken).toBe('issued');
    expect(store.token('sandbox')?.accessToken).toBe('issued');
  });

  it('renews its lease by heartbeats while the flow runs, and stops them when it ends', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const renewals: number[] = [];
    const renew = store.renewLease.bind(store);
    store.renewLease = async (name, holder, until) => {
      renewals.push(until);
      return renew(name, holder, until);
    };
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(2 * LEASE_HEARTBEAT_MS + 10);
      return {
        accessToken: 'slow',
        expiresIn: 3600,
        upstreamTimestamp: undefined,
        requestedAt: T0,
      };
    });
    await issuance.obtain(sandbox, 60_000, T0 + 60_000, false);
    expect(renewals).toEqual([
      T0 + LEASE_HEARTBEAT_MS + LEASE_MS,
      T0 + 2 * LEASE_HEARTBEAT_MS + LEASE_MS,
    ]);
    expect(clock.pending()).toBe(0);
  });

  it('never renews its lease past the caller’s deadline', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const renewals: number[] = [];
    store.renewLease = async (_name, _holder, until) => {
      renewals.push(until);
      return true;
    };
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(LEASE_HEARTBEAT_MS);
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    await issuance.obtain(sandbox, 60_000, T0 + 1_500, false);
    expect(renewals).toEqual([T0 + 1_500]);
  });

  it('drains before replacing a valid token of a revoking upstream, and only then', async () => {
    for (const revokesOnReissue of [true, false]) {
      const clock = new ManualClock(T0);
      const store = new InMemoryTokenStore();
      store.setToken(record('current', T0 + 200_000));
      const { issuance, calls } = container(store, clock);
      const refreshed = await issuance.refresh(
        connection({ revokesOnReissue }),
        record('current', T0 + 200_000),
        T0 + 5_000,
      );
      expect(refreshed?.record.accessToken).toBe('issued');
      expect(calls).toEqual([revokesOnReissue ? T0 + DRAIN_MS : T0]);
    }
  });

  it('gives up a refresh at once when the lease went elsewhere', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.items.set('sandbox', {
      token: record('current', T0 + 200_000),
      lease: { holder: 'other:1', expiresAt: T0 + LEASE_MS },
    });
    const { issuance, calls } = container(store, clock);
    expect(await issuance.refresh(sandbox, record('current', T0 + 200_000), T0 + 5_000)).toBe(
      undefined,
    );
    expect(calls).toEqual([]);
  });

  it('does not replace a token another container wrote after the one it meant to refresh', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.setToken(record('newer', T0 + HOUR));
    const { issuance, calls } = container(store, clock);
    expect(await issuance.refresh(sandbox, record('older', T0 + 200_000), T0 + 5_000)).toBe(
      undefined,
    );
    expect(calls).toEqual([]);
  });

  it('serves the token it issued from memory when the store write fails', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    store.putToken = async () => {
      throw new Error('store down');
    };
    const { issuance, memory } = container(store, clock);
    const served = await issuance.obtain(sandbox, 60_000, T0 + 5_000, false);
    expect(served).toMatchObject({ source: 'upstream', record: { accessToken: 'issued' } });
    expect(memory.get('sandbox')?.record.accessToken).toBe('issued');
  });

  it('falls back to memory when the store is unreadable, unless told not to (the warm-up)', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance, memory } = container(store, clock);
    memory.set(record('remembered', T0 + HOUR), T0 - 10_000);
    store.failing = true;
    await expect(issuance.obtain(sandbox, 60_000, T0 + 5_000, false)).resolves.toMatchObject({
      source: 'memory',
      record: { accessToken: 'remembered' },
    });
    await expect(issuance.obtain(sandbox, 60_000, T0 + 5_000, true)).rejects.toBeInstanceOf(
      StoreUnavailableError,
    );
  });

  it('measures each issuance for XFetch, with a default before the first', async () => {
    const clock = new ManualClock(T0);
    const store = new InMemoryTokenStore();
    const { issuance } = container(store, clock, async () => {
      await clock.sleep(420);
      return { accessToken: 'x', expiresIn: 3600, upstreamTimestamp: undefined, requestedAt: T0 };
    });
    expect(issuance.issuanceMs('sandbox')).toBe(300);
    await issuance.obtain(sandbox, 60_000, T0 + 5_000, false);
    expect(issuance.issuanceMs('sandbox')).toBe(420);
  });
});
