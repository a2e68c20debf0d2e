/**
 * The fleet's settings, and the broker in three regions (issue 26): the same fleet, its
 * containers in turn in one of three regions, each reaching the one table through the chaos
 * suite's region proxy (25, 70 and 95 ms to every write and strong read, conflicts on racing
 * writes), with a global stage's store bound. `bench/run.ts` runs it with the rest;
 * `npm run bench -- fleet-regions [--runs N]` runs it alone (`bench/fleet-regions-run.ts`).
 */
import { startRegionWorld, THREE_REGIONS } from '../chaos/regions.js';
import { startStack } from '../local/stack.js';
import { type FleetResult, runFleet } from './fleet.js';

export const quick = process.env.BENCH_QUICK === '1';
export const lifetimeSeconds = 10;
export const fleetSettings = {
  durationMs: quick ? 8_000 : 30_000,
  lifetimeSeconds,
  maxContainers: 6,
  callers: 12,
  thinkMs: 40,
  killEveryMs: 2_500,
  scheduleEveryMs: 1_000,
  bucketMs: 1_000,
};
// Compressed time: a 10 s token, refreshed in its last 3 s, served with at least 1 s left.
// (The cut-over is announced a re-check ahead: with a 3 s window, the re-check is 750 ms and
// the cut-over lands with about 1.5 s left, above the 1 s every caller needs.)
export const brokerEnv = {
  BROKER_REFRESH_WINDOW_SECONDS: '3',
  BROKER_DEFAULT_MIN_VALIDITY_SECONDS: '1',
  BROKER_MEMORY_RECHECK_SECONDS: '1',
  // BENCH_LOG_LEVEL (DEBUG: why each container read, waited or took the lease) with BENCH_LOG_DIR.
  POWERTOOLS_LOG_LEVEL: process.env.BENCH_LOG_DIR
    ? (process.env.BENCH_LOG_LEVEL ?? 'INFO')
    : 'WARN',
};
export const upstreamLatencyMs = 100;

export interface RegionalRun {
  readonly result: FleetResult;
  readonly conflicts: number;
  /** The upstream's issuance times (wall clock ms), for tracing a late one. */
  readonly issuances: readonly number[];
}

export const runRegionalFleet = async (paths: {
  readonly broker: string;
  readonly container: string;
}): Promise<RegionalRun> => {
  const stack = await startStack(
    { expiresIn: lifetimeSeconds, latencyMs: upstreamLatencyMs, revokeOnReissue: true },
    ['sandbox'],
  );
  const world = await startRegionWorld({
    target: stack.env.AWS_ENDPOINT_URL_DYNAMODB as string,
    regions: THREE_REGIONS,
    conflicts: true,
  });
  try {
    const result = await runFleet(stack, {
      mode: 'broker',
      bundle: paths.broker,
      runner: paths.container,
      env: { ...stack.env, ...brokerEnv, BROKER_STORE_ROUND_TRIP_MS: '150' },
      envFor: (n) => ({
        AWS_ENDPOINT_URL_DYNAMODB: world.regions[n % world.regions.length]?.url as string,
      }),
      ...fleetSettings,
    });
    return { result, conflicts: world.conflicts(), issuances: stack.simulator.issuanceTimes() };
  } finally {
    await world.close();
    await stack.close();
  }
};
