/**
 * Three regions on one multi-Region strongly consistent table (issue 26): six frozen
 * containers, two per region, each region reaching the table through its own proxy
 * (`chaos/regions.ts`: 25, 70 and 95 ms on every write and strong read) and running its own
 * warm-up. The goals are the issue's "done when" figures, judged per run (`Scenario.goals`).
 *
 * Imported by `scenarios.ts` (the suite's order); it uses that module's helpers only inside the
 * scenarios' functions, so the import cycle is harmless.
 */
import type { ChaosPaths, RunResult, RunSettings, Scenario } from './harness.js';
import { THREE_REGIONS } from './regions.js';
import { onCountdownStep } from './scenarios.js';

/**
 * 20 s tokens and the 9 s window as in the rest of the suite, a warm-up every 4 s per region
 * (out of step: a third of that apart), callers mostly idle (a request every 0.45–1.35 s per
 * container): 45 s is the cold start and two refreshes.
 */
export const REGION_FLEET: Partial<RunSettings> = {
  containers: 6,
  regions: THREE_REGIONS,
  thinkMs: 900,
  warmUpEveryMs: 4_000,
  durationMs: 45_000,
};

/** What a global table's stage sets (serverless.yml): its writes and strong reads cross regions. */
const regionEnv = () => ({ BROKER_STORE_ROUND_TRIP_MS: '150' });

/**
 * Each region's clock off by its own amount (the first region's right, the second's 2 s ahead,
 * the third's 1.5 s behind), as the issue asks of the timing: nothing of the protocol compares
 * two containers' clocks, and a region's containers share theirs (one host's NTP, roughly).
 */
export const REGION_SKEWS_MS: readonly number[] = [0, 2_000, -1_500];

const skewedRegionEnv = (index: number, paths: ChaosPaths): Record<string, string> => {
  const skewMs = REGION_SKEWS_MS[index % THREE_REGIONS.length] ?? 0;
  return {
    ...regionEnv(),
    ...(skewMs === 0
      ? {}
      : { NODE_OPTIONS: `--import=${paths.clockSkew}`, CHAOS_CLOCK_SKEW_MS: String(skewMs) }),
  };
};

/** How long a region is cut off in `regions-isolated-holder`. */
export const ISOLATION_MS = 20_000;
/** The issue's bound on how long the other regions' callers may be held. */
export const HELD_AT_MOST_MS = 1_500;

const errorsOf = (result: RunResult): number =>
  Object.values(result.tally.errors).reduce((a, b) => a + b, 0) + result.tally.unanswered;

/** Three regions with conflicts: at most the lifetimes elapsed plus one issuance, ≤ 1 % errors. */
export const fleetGoals = (result: RunResult): string[] => {
  const lifetimes = result.durationMs / (result.settings.lifetimeSeconds * 1000);
  return [
    ...(result.issuances > Math.floor(lifetimes) + 1
      ? [
          `${result.issuances} issuances in ${lifetimes.toFixed(2)} lifetimes (at most ${Math.floor(lifetimes) + 1})`,
        ]
      : []),
    ...errorGoals(result),
  ];
};

/** At most 1 % of calls answered with an error or not at all. */
const errorGoals = (result: RunResult): string[] => {
  const errors = errorsOf(result);
  return errors > 0.01 * result.tally.requests
    ? [
        `${errors} of ${result.tally.requests} calls answered with an error or not at all (over 1 %)`,
      ]
    : [];
};

/**
 * A fleet that refreshes ahead: no two issuances for one refresh (none within half a lifetime of
 * the one before), at most 1 % errors, every refresh before its token expired.
 */
export const refreshGoals = (result: RunResult): string[] => [
  ...(result.duplicateIssuances > 0
    ? [`${result.duplicateIssuances} issuances less than half a lifetime after the one before`]
    : []),
  ...errorGoals(result),
  ...(result.refreshesAfterExpiry > 0
    ? [`${result.refreshesAfterExpiry} refreshes after the token they replaced had expired`]
    : []),
];

/** A region isolated: the others held at most 1.5 s, every refresh before its token expired. */
export const isolationGoals = (result: RunResult): string[] => [
  ...(result.maxWaitOutsideFaultMs > HELD_AT_MOST_MS
    ? [
        `the other regions' callers held up to ${(result.maxWaitOutsideFaultMs / 1000).toFixed(2)} s (at most ${HELD_AT_MOST_MS / 1000} s)`,
      ]
    : []),
  ...(result.refreshesAfterExpiry > 0
    ? [`${result.refreshesAfterExpiry} refreshes after the token they replaced had expired`]
    : []),
];

export const REGION_SCENARIOS: readonly Scenario[] = [
  {
    name: 'regions-three',
    injects:
      'no fault: three regions (25, 70, 95 ms to every write and strong read), two frozen containers each, a warm-up per region every 4 s, request-started refreshes; no conflicts',
    settings: REGION_FLEET,
    env: regionEnv,
    // Not the issue's count (that is regions-conflicts'): this fleet refreshes every 14-15.5 s
    // (a 9 s window on 20 s tokens, the countdown across regions), so a fourth issuance may land
    // inside 45 s (at 44.9 s in one run of 2026-11-26: 1.0, 15.0, 29.8, 44.9 s; 0.7, 15.0, 30.5
    // in the CI runs before). What must not happen is two issuances for one refresh.
    goals: refreshGoals,
  },
  {
    name: 'regions-skewed',
    injects:
      'as regions-three, but the regions’ clocks differ: the first’s right, the second’s 2 s ahead, the third’s 1.5 s behind',
    settings: REGION_FLEET,
    env: skewedRegionEnv,
    // A region whose clock runs 2 s ahead sees the 9 s window open 2 s early and refreshes then,
    // as the skew allowed (10 s) lets it (a fourth issuance at 44.9 s in one run of 2026-11-25:
    // 1.3, 12.9, 28.9, 44.9 s). What skew must not cause is two issuances for one refresh.
    goals: refreshGoals,
  },
  {
    name: 'regions-isolated-holder',
    injects: `the region of the lease holder cut off for ${ISOLATION_MS / 1000} s the moment it sends a countdown step (3 or more left) at a refresh: its writes and strong reads hang`,
    settings: REGION_FLEET,
    env: regionEnv,
    goals: isolationGoals,
    // With 3 s lease versions the others were held up to 2.14 s (3 runs); with the counting
    // lease 1.04–1.60 s over four CI runs. What held them longest was no isolation but the
    // cut-over after it, read from afar: with the step the holder announces, 0.67–0.99 s in nine
    // runs (2026-11-25, three CI runs among them), a check again.
    install: (context) =>
      onCountdownStep(context, (node, countdown) => {
        const region = context.regions[node.region];
        if (!region) return;
        context.inject(
          `region ${region.name} isolated ${ISOLATION_MS} ms at countdown step ${countdown}`,
          node.index,
        );
        region.isolate('hang');
        const from = context.elapsed();
        for (const other of context.nodes) {
          if (other.region === node.region) context.faulted(other.index, from, from + ISOLATION_MS);
        }
        context.later(ISOLATION_MS, () => {
          region.heal();
          context.inject(`region ${region.name} healed`, node.index);
        });
      }),
  },
  {
    name: 'regions-conflicts',
    injects:
      'three regions as in regions-three but 70 ms each, their warm-ups in step (one clock for every region’s schedule), and every write that races one to the same item from another region is answered ReplicatedWriteConflictException (not applied)',
    // One latency for the three (70 ms): with staggered ones (25, 70, 95), the regions' reads
    // come back at different times and their writes for one lease rarely overlap; one run of
    // two saw no conflict at all.
    // 40 s, two lifetimes: the cold start and two refreshes, the count (at most the
    // lifetimes elapsed plus one: 3) with the fleet's refresh every 14-16 s. In 45 s (2.25
    // lifetimes, also at most 3) a third refresh could land by chance (regions-three: 44.9 s).
    settings: {
      ...REGION_FLEET,
      regions: THREE_REGIONS.map((region) => ({ ...region, latencyMs: 70 })),
      conflicts: true,
      warmUpsInStep: true,
      durationMs: 40_000,
    },
    // 3 of 267 calls answered StoreUnavailableError in one fresh-clone CI run of four (86
    // conflicts), a conflict outlasting the adapter's own 2 s budget; since every write carries
    // its caller's deadline, 0 errors in four runs under 64–168 conflicts (2026-11-25).
    // The conflicts are the fault (counted as fired): a run that saw none checked nothing.
    goals: (result) => [
      ...fleetGoals(result),
      ...(result.faultsInjected === 0 ? ['no write raced another: no conflict was answered'] : []),
    ],
  },
];
