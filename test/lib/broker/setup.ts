/**
 * Shared setup of the broker's unit tests, in two shapes:
 *
 * - one container: the facade over in-memory ports, on vitest's fake timers (`setup`);
 * - a fleet: containers over one store on manual or simulated clocks, an upstream that revokes
 *   every earlier token on each issuance (test/support/fleet-model.ts), and callers whose token
 *   is judged the moment it is served (`ask`, `simAsk`).
 *
 * How counts are asserted: issuances exactly where the count is the guarantee (one per
 * lifetime, I1); store reads and writes as upper bounds where they show efficiency, and as
 * "at least" where safety needs the call.
 */
import { afterEach, beforeEach, vi } from 'vitest';
import { LeasedIssuance } from '../../../lib/broker/fleet/leased-issuance.js';
import { TokenBroker, tokenDigest } from '../../../lib/broker/index.js';
import type { Issue } from '../../../lib/broker/issuance/issue-flow.js';
import { DEFAULT_TIMING } from '../../../lib/broker/timing/index.js';
import { type Clock, Deadline, systemClock } from '../../../lib/clock.js';
import type { ConnectionConfig } from '../../../lib/config.js';
import type { TokenProbe, TokenRecord, TokenStore } from '../../../lib/ports.js';
import {
  CountingMetrics,
  captureLogger,
  connection,
  FakeIssuer,
  FakeSecretSource,
  InMemoryTokenStore,
  type ManualClock,
} from '../../support/fakes.js';
import {
  type FleetBrokerOptions,
  fleetBroker,
  issuerFor,
  type Upstream,
} from '../../support/fleet-model.js';
import type { Sim } from '../../support/sim.js';

/** 2026-11-21T12:00:00Z: where every clock of these tests starts. */
export const T0 = 1_795_262_400_000;

// One container, on fake timers.

/** Fake timers at `at` around every test of the enclosing `describe`. */
export const useFakeTime = (at = T0) => {
  beforeEach(() => {
    vi.useFakeTimers().setSystemTime(at);
  });
  afterEach(() => {
    vi.useRealTimers();
  });
};

export interface SetupOptions {
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
  /** Checks reports on connections with a `probe`. */
  probe?: TokenProbe;
}

/** One container: the facade over in-memory ports, on the fake timers of `useFakeTime`. */
export const setup = (overrides: SetupOptions = {}) => {
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
    timing: DEFAULT_TIMING,
    store,
    secrets,
    issuer,
    probe: overrides.probe,
    logger,
    metrics,
    clock: {
      ...systemClock,
      // XFetch off unless a test turns it on: -log(1 - 0) = 0 means no earliness.
      random: overrides.random ?? (() => 0),
      // Waits advance the fake clock, so countdowns and backoff cost no real time.
      // Work a test left running past its end (fake timers restored) waits real time, unref'd:
      // the worker's exit ends it, and nothing throws from a timer API that is gone.
      sleep:
        overrides.sleep ??
        (async (ms: number) => {
          if (vi.isFakeTimers()) await vi.advanceTimersByTimeAsync(ms);
          else await new Promise<void>((done) => setTimeout(done, ms).unref());
        }),
    },
  });
  return { broker, store, secrets, issuer, logger, metrics };
};

/** A caller's deadline: `ms` (10 s) from now, on the system clock (the fake timers' here). */
export const deadline = (ms = 10_000) => Deadline.in(systemClock, ms);

/** A `sandbox` token expiring at `expiresAt`, issued an hour before unless told otherwise. */
export const record = (
  accessToken: string,
  expiresAt: number,
  issuedAt = expiresAt - 3600_000,
): TokenRecord => ({
  connection: 'sandbox',
  accessToken,
  tokenDigest: tokenDigest(accessToken),
  issuedAt,
  expiresAt,
});

/** Stores an hour-long `sandbox` token with `remainingMs` left at T0. */
export const storeToken = (
  store: InMemoryTokenStore,
  remainingMs: number,
  accessToken = 'current',
) => store.setToken(record(accessToken, T0 + remainingMs));

// A fleet, on manual or simulated clocks.

/** One container's leased issuance alone (the loop under the facade), on `clock`. */
export const issuance = (
  store: TokenStore,
  clock: Clock,
  issue: Issue,
  o: { recheck?: number; window?: number; timeout?: number } = {},
) =>
  new LeasedIssuance({
    store,
    clock,
    issue,
    settings: {
      refreshWindowMs: (o.window ?? 60) * 1000,
      memoryRecheckMs: (o.recheck ?? 5) * 1000,
      upstreamTimeoutMs: o.timeout ?? 5_000,
      timing: DEFAULT_TIMING,
    },
    logger: captureLogger(),
    metrics: new CountingMetrics(),
  });

/** Asks `b` for a token and judges it the moment it is served. */
export const ask = async (
  b: TokenBroker,
  clock: ManualClock,
  up: Upstream,
  o: { budget?: number; minValiditySeconds?: number } = {},
) => {
  const started = clock.now();
  const served = await b.getToken('sandbox', {
    deadline: b.deadlineIn(o.budget ?? 9_500),
    minValiditySeconds: o.minValiditySeconds,
  });
  const token = served.record.accessToken;
  return {
    token,
    source: served.source,
    revoked: up.revoked.has(token),
    waited: clock.now() - started,
  };
};

/** One container on a simulated timeline, issuing from `up` unless told otherwise. */
export const simBroker = (
  store: TokenStore,
  clock: Clock,
  up: Upstream,
  o: FleetBrokerOptions = {},
) => fleetBroker(store, clock, up, { ...o, issuer: o.issuer ?? issuerFor(up, clock) });

/** Asks a container on the simulated timeline; judges the token the moment it is served. */
export const simAsk = async (
  sim: Sim,
  b: TokenBroker,
  up: Upstream,
  o: { budget?: number; minValiditySeconds?: number; step?: number } = {},
) => {
  const started = sim.now();
  const deadline = started + (o.budget ?? 9_500);
  let judged: { token: string; revoked: boolean; source: string } | undefined;
  const outcome = await sim.run(
    b
      .getToken('sandbox', {
        deadline: b.deadlineIn(o.budget ?? 9_500),
        minValiditySeconds: o.minValiditySeconds,
      })
      .then((s) => {
        judged = {
          token: s.record.accessToken,
          revoked: up.revoked.has(s.record.accessToken),
          source: s.source,
        };
        return s;
      }),
    60_000,
    o.step ?? 1,
  );
  return {
    ...judged,
    error: outcome.error,
    waited: outcome.at - started,
    late: outcome.at - deadline,
  };
};
