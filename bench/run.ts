/**
 * `npm run bench`: the fleet simulation (broker and baseline, same settings, one run), the hot
 * key, the client's cache, the warm/cold cost ratios, and Lambda's execution model (issue 17:
 * cold starts in an execution environment, mostly idle containers frozen between invocations,
 * the billed time after the response). Prints a table and writes
 * bench/results/{fleet.json,fleet.svg,results.md}. Every figure comes from this run.
 */
import { readFileSync, writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { dirname, join, resolve } from 'node:path';
import { THREE_REGIONS } from '../chaos/regions.js';
import { startStack } from '../local/stack.js';
import { fleetChart } from './chart.js';
import { type ClientCacheResult, measureClientCache } from './client-cache.js';
import {
  type ColdCost,
  type EnvironmentColdCost,
  measureCold,
  measureColdInEnvironment,
  measureWarm,
  type WarmCost,
} from './costs.js';
import {
  ARCHITECTURE,
  afterResponseCost,
  executionModelMarkdown,
  type IdleRun,
  MEMORY_MB,
  PRICE_PER_GB_SECOND_USD,
  runIdleFleets,
} from './execution-model.js';
import { type FleetResult, runFleet } from './fleet.js';
import {
  brokerEnv,
  fleetSettings,
  lifetimeSeconds,
  quick,
  runRegionalFleet,
  upstreamLatencyMs,
} from './fleet-regions.js';
import { type HotKeyResult, hotKeyEnv, hotKeySettingsFor, measureHotKey } from './hot-key.js';

const [buildDir = '.bench', resultsDir = 'bench/results'] = process.argv.slice(2);
// Absolute: an execution environment's runtime runs in its bundle's directory, as Lambda's does.
const paths = {
  broker: resolve(buildDir, 'dist/broker/index.mjs'),
  container: resolve(buildDir, 'dist/local/container.mjs'),
  baseline: resolve(buildDir, 'baseline.mjs'),
  bare: resolve(buildDir, 'bare-getitem.mjs'),
  coldRunner: resolve(buildDir, 'cold-runner.mjs'),
  bootstrap: resolve(buildDir, 'dist/local/lambda-env/bootstrap.mjs'),
};

/**
 * Bytes a cold start loads: the entry, what it imports (its own dynamic import is init's:
 * functions/broker/index.ts), and their static imports, transitively. Dynamic imports inside
 * chunks are loaded on first use, not counted.
 */
const initBytes = (entry: string, seen = new Set<string>(), top = true): number => {
  if (seen.has(entry)) return 0;
  seen.add(entry);
  const text = readFileSync(entry, 'utf8');
  let bytes = Buffer.byteLength(text);
  const imports = [
    ...text.matchAll(/\b(?:import|export)\s*(?:[^"'();]*?\bfrom\s*)?["'](\.\.?\/[^"']+)["']/g),
    ...(top ? text.matchAll(/\bimport\(\s*["'](\.\.?\/[^"']+)["']\s*\)/g) : []),
  ];
  for (const [, path] of imports)
    bytes += initBytes(join(dirname(entry), String(path)), seen, false);
  return bytes;
};

const log = (line = '') => process.stdout.write(`${line}\n`);
const began = performance.now();
/** A progress line, with the seconds since the start (the whole bench should stay under 12 minutes). */
const step = (line: string) =>
  log(`[${((performance.now() - began) / 1000).toFixed(0)} s] ${line}`);

const fleets: FleetResult[] = [];
for (const mode of ['broker', 'baseline'] as const) {
  // One connection: the warm-up keeps every configured connection warm, and the figures are
  // per connection.
  const stack = await startStack(
    { expiresIn: lifetimeSeconds, latencyMs: upstreamLatencyMs, revokeOnReissue: true },
    ['sandbox'],
  );
  try {
    step(`fleet: ${mode} for ${fleetSettings.durationMs / 1000}s …`);
    fleets.push(
      await runFleet(stack, {
        mode,
        bundle: mode === 'broker' ? paths.broker : paths.baseline,
        runner: paths.container,
        env: { ...stack.env, ...brokerEnv },
        ...fleetSettings,
      }),
    );
  } finally {
    await stack.close();
  }
}

// The broker in three regions (issue 26; `bench/fleet-regions.ts`).
step(`fleet: broker in three regions for ${fleetSettings.durationMs / 1000}s …`);
const regional = await runRegionalFleet(paths);

// The hot key, in production's proportions (`bench/hot-key.ts`).
const hotKeySettings = hotKeySettingsFor(quick);
/** Read copies of the token item in the hot-key run (`npm run bench -- hot-key --copies K`: any). */
const HOT_KEY_COPIES = 5;
let hotKey: HotKeyResult;
{
  const stack = await startStack(
    {
      expiresIn: hotKeySettings.lifetimeSeconds,
      latencyMs: upstreamLatencyMs,
      revokeOnReissue: true,
    },
    ['sandbox'],
  );
  try {
    step(
      `hot key: ${hotKeySettings.containers} busy containers for ${hotKeySettings.durationMs / 1000}s …`,
    );
    hotKey = await measureHotKey(stack, {
      bundle: paths.broker,
      runner: paths.container,
      bootstrap: paths.bootstrap,
      env: { ...stack.env, ...hotKeyEnv(hotKeySettings.windowSeconds) },
      execution: 'always-running',
      pauseMs: { min: 5, max: 5 },
      // Issue 25's goal is per item: its reads spread over 5 read copies (ADR 0024).
      copies: HOT_KEY_COPIES,
      ...hotKeySettings,
    });
  } finally {
    await stack.close();
  }
}

// Issue 17: the same measurement on mostly idle containers (a request every 0.3–1.5 s each),
// always running, and frozen between invocations with the extension and without it. Tokens
// as in the hot key above; quick mode shortens them so that its short runs still refresh.
const idleSettings = {
  containers: hotKeySettings.containers,
  durationMs: quick ? 24_000 : 90_000,
  lifetimeSeconds: quick ? 20 : hotKeySettings.lifetimeSeconds,
  windowSeconds: quick ? 10 : hotKeySettings.windowSeconds,
  pauseMs: { min: 300, max: 1_500 },
};
const idle: IdleRun[] = await runIdleFleets(
  () =>
    startStack(
      {
        expiresIn: idleSettings.lifetimeSeconds,
        latencyMs: upstreamLatencyMs,
        revokeOnReissue: true,
      },
      ['sandbox'],
    ),
  { bundle: paths.broker, runner: paths.container, bootstrap: paths.bootstrap },
  hotKeyEnv(idleSettings.windowSeconds),
  idleSettings,
  step,
);

// Where the token is used: a service process with the client's default options (a 60 s margin,
// so tokens live 180 s here: the broker's default window, clamped to 90 s, outlasts the margin
// as production's 600 s window does), the warm-up every 5 s, and another caller forcing a
// replacement every 20 s. Before and after run side by side, each on a stack of its own.
const clientCacheSettings = {
  durationMs: quick ? 30_000 : 90_000,
  loops: 4,
  thinkMs: 50,
  warmUpEveryMs: 5_000,
  forceEveryMs: 20_000,
  forceMinValidity: 175,
  lifetimeSeconds: 180,
};
step(`client cache: 0.4.0's policy and today's, ${clientCacheSettings.durationMs / 1000}s each …`);
const clientCache: ClientCacheResult[] = await Promise.all(
  (['before', 'after'] as const).map(async (mode) => {
    const stack = await startStack(
      {
        expiresIn: clientCacheSettings.lifetimeSeconds,
        latencyMs: upstreamLatencyMs,
        revokeOnReissue: true,
      },
      ['sandbox'],
    );
    try {
      return await measureClientCache(stack, {
        mode,
        bundle: paths.broker,
        runner: paths.container,
        env: { ...stack.env, POWERTOOLS_LOG_LEVEL: 'WARN' },
        ...clientCacheSettings,
      });
    } finally {
      await stack.close();
    }
  }),
);

let warm: WarmCost;
let cold: ColdCost;
let environmentCold: EnvironmentColdCost;
{
  const stack = await startStack();
  try {
    step('warm path: memory hits vs loopback GetItem …');
    warm = await measureWarm(
      stack,
      paths.broker,
      quick ? { memoryHits: 2_000, getItems: 200 } : {},
    );
    step('cold start: broker vs bare GetItem bundle …');
    cold = await measureCold(
      stack,
      {
        runner: paths.coldRunner,
        broker: paths.broker,
        bare: paths.bare,
        brokerBytes: initBytes(paths.broker),
        // The bare bundle's own dynamic imports are the SDK's, loaded on first use.
        bareBytes: initBytes(paths.bare, new Set(), false),
      },
      quick ? 5 : 15,
    );
    step('cold start in an execution environment: broker with its extension, without, bare …');
    environmentCold = await measureColdInEnvironment(
      stack,
      { bootstrap: paths.bootstrap, broker: paths.broker, bare: paths.bare },
      quick ? 5 : 15,
    );
  } finally {
    await stack.close();
  }
}

const [broker, baseline] = fleets as [FleetResult, FleetResult];
const ideal = lifetimeSeconds / (lifetimeSeconds - Number(brokerEnv.BROKER_REFRESH_WINDOW_SECONDS));
const pct = (n: number, of: number) => (of === 0 ? '0' : ((100 * n) / of).toFixed(2));
const rows: [string, string, string][] = [
  ['upstream issuances', String(broker.issuances), String(baseline.issuances)],
  [
    `issuances per token lifetime (${lifetimeSeconds}s; ideal with refresh-ahead ${ideal.toFixed(2)})`,
    broker.issuancesPerLifetime.toFixed(2),
    baseline.issuancesPerLifetime.toFixed(2),
  ],
  ['tokens served', String(broker.served), String(baseline.served)],
  [
    'callers that received an already-revoked token',
    `${broker.revokedReceived} (${pct(broker.revokedReceived, broker.served)}%)`,
    `${baseline.revokedReceived} (${pct(baseline.revokedReceived, baseline.served)}%)`,
  ],
  ['caller latency p50 (ms)', broker.latencyMs.p50.toFixed(1), baseline.latencyMs.p50.toFixed(1)],
  ['caller latency p99 (ms)', broker.latencyMs.p99.toFixed(1), baseline.latencyMs.p99.toFixed(1)],
  [
    'DynamoDB requests per served token',
    broker.dynamodbRequestsPerServedToken.toFixed(3),
    baseline.dynamodbRequestsPerServedToken.toFixed(3),
  ],
  ['requests lost to killed containers', String(broker.errors), String(baseline.errors)],
  [
    'containers started / killed',
    `${broker.containersStarted} / ${broker.containersKilled}`,
    `${baseline.containersStarted} / ${baseline.containersKilled}`,
  ],
];
const three = regional.result;
const regionRows: [string, string, string][] = [
  [
    'issuances per token lifetime',
    broker.issuancesPerLifetime.toFixed(2),
    three.issuancesPerLifetime.toFixed(2),
  ],
  ['tokens served', String(broker.served), String(three.served)],
  [
    'callers that received an already-revoked token',
    String(broker.revokedReceived),
    String(three.revokedReceived),
  ],
  ['caller latency p50 (ms)', broker.latencyMs.p50.toFixed(1), three.latencyMs.p50.toFixed(1)],
  ['caller latency p99 (ms)', broker.latencyMs.p99.toFixed(1), three.latencyMs.p99.toFixed(1)],
  [
    'slowest caller at a cut-over (ms)',
    broker.cutoverChaos.slowestMs.toFixed(0),
    three.cutoverChaos.slowestMs.toFixed(0),
  ],
  [
    'refreshes after their token expired',
    String(broker.refreshesAfterExpiry),
    String(three.refreshesAfterExpiry),
  ],
  [
    'DynamoDB requests per served token',
    broker.dynamodbRequestsPerServedToken.toFixed(3),
    three.dynamodbRequestsPerServedToken.toFixed(3),
  ],
  ['replicated write conflicts answered', '—', String(regional.conflicts)],
  ['requests lost to killed containers', String(broker.errors), String(three.errors)],
];
const costRows: [string, string, string][] = [
  [
    'warm: memory hit through the handler vs one loopback GetItem',
    `${warm.memoryHitMeanUs.toFixed(1)} µs vs ${warm.getItemMeanUs.toFixed(1)} µs`,
    `${warm.ratio.toFixed(3)}× (target ≤ 0.1×)`,
  ],
  [
    'cold: import + first token from DynamoDB vs bare GetItem bundle (median)',
    `${cold.brokerMedianMs.toFixed(1)} ms vs ${cold.bareMedianMs.toFixed(1)} ms`,
    `${cold.ratio.toFixed(2)}× (target ≤ 1.15×, issue 25)`,
  ],
  [
    'cold: with the source map loaded (--enable-source-maps, as deployed) vs without (median)',
    `${cold.sourceMapsMedianMs.toFixed(1)} ms vs ${cold.brokerMedianMs.toFixed(1)} ms`,
    `${(cold.sourceMapsMedianMs / cold.brokerMedianMs).toFixed(2)}×`,
  ],
  [
    'cold: init (import) alone, median',
    `${cold.brokerInitMedianMs.toFixed(1)} ms vs ${cold.bareInitMedianMs.toFixed(1)} ms`,
    `${(cold.brokerInitMedianMs / cold.bareInitMedianMs).toFixed(2)}×`,
  ],
  [
    'code loaded at init (index.mjs and the chunks it imports; chunks loaded on first use aside)',
    `${(cold.brokerBundleBytes / 1024).toFixed(0)} KiB vs ${(cold.bareBundleBytes / 1024).toFixed(0)} KiB`,
    `${(cold.brokerBundleBytes / cold.bareBundleBytes).toFixed(2)}×`,
  ],
];

const hotKeyRows: [string, string, string, string][] = (
  ['outside', 'inside', 'cutover'] as const
).map((phase) => [
  {
    outside: 'before the refresh window',
    inside: 'inside the window (a cut-over announced)',
    cutover: 'cut-over (±1 s around an issuance)',
  }[phase],
  `${hotKey.phases[phase].perItemReadsPerContainerSecond.toFixed(2)} (busiest in the run ${hotKey.phases[phase].busiestItemReadsPerContainerSecond.toFixed(2)}; all ${hotKey.phases[phase].itemsRead} items ${hotKey.phases[phase].readsPerContainerSecond.toFixed(2)})`,
  hotKey.phases[phase].writesPerSecond.toFixed(2),
  hotKey.phases[phase].seconds.toFixed(1),
]);
hotKeyRows.push([
  `the cold start, once per fleet (${hotKey.coldStart.seconds.toFixed(1)} s): reads per container in all`,
  hotKey.coldStart.readsPerContainer.toFixed(1),
  '',
  '',
]);
hotKeyRows.push([
  'busy containers at which one item reaches 3,000 reads/s (busiest phase, cold start aside)',
  hotKey.containersToSaturate.toFixed(0),
  '',
  '',
]);
const cutoverRows: [string, string, string][] = [
  [
    `callers arriving at a cut-over (1 s before an issuance to 200 ms after): ${hotKey.cutover.callers}`,
    hotKey.cutover.p99Ms.toFixed(0),
    hotKey.cutover.maxMs.toFixed(0),
  ],
  [
    'every caller of the hot-key run',
    hotKey.latencyMs.p99.toFixed(1),
    hotKey.latencyMs.max.toFixed(0),
  ],
];

const clientRows: string[][] = [
  [
    'upstream issuances (each revoked its predecessor)',
    ...clientCache.map((r) => String(r.issuances)),
  ],
  ['token uses (pings of the Open API)', ...clientCache.map((r) => String(r.uses))],
  [
    'uses refused by the upstream, per 1,000',
    ...clientCache.map((r) => `${r.refusedPerThousand.toFixed(1)} (${r.refused})`),
  ],
  [
    'broker calls per minute, one process',
    ...clientCache.map((r) => r.brokerCallsPerMinute.toFixed(1)),
  ],
  [
    'getToken calls answered from the client cache',
    ...clientCache.map((r) => `${(100 * r.cacheHitShare).toFixed(1)} %`),
  ],
  ['calls that failed', ...clientCache.map((r) => String(r.errors))],
];

const minutes = (ms: number) =>
  `${Math.floor(ms / 60_000)} min ${Math.round((ms % 60_000) / 1000)} s`;
const machine = `${cpus().length} cores, Node ${process.versions.node}`;
const settingsLine = `${fleetSettings.durationMs / 1000}s per mode, ≤${fleetSettings.maxContainers} containers, ${fleetSettings.callers} callers, a container killed at random instants, on average every ${fleetSettings.killEveryMs / 1000}s, upstream latency ${upstreamLatencyMs} ms per request, token lifetime ${lifetimeSeconds}s, old tokens revoked on re-issue, warm-up every ${fleetSettings.scheduleEveryMs / 1000}s (broker)`;
const table = (head: string[], body: string[][]) =>
  [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');
const markdown = [
  '# Benchmark results',
  '',
  `Generated by \`npm run bench\` on ${new Date().toISOString().slice(0, 10)} (${machine}${quick ? ', quick mode' : ''}; the measurements took ${minutes(performance.now() - began)}). Every figure below comes from that one run.`,
  '',
  `Fleet: ${settingsLine}.`,
  '',
  table(['', 'broker', 'baseline (each container for itself)'], rows),
  '',
  '![Issuances and latency over time](fleet.svg)',
  '',
  'The broker in three regions: the same fleet, its containers in turn in one of three regions reaching the one table through the chaos suite’s region proxy (25, 70 and 95 ms to every write and strong read, a conflict on racing writes), `BROKER_STORE_ROUND_TRIP_MS=150`:',
  '',
  table(['', 'broker, one region', 'broker, three regions'], regionRows),
  '',
  table(['cost', 'measured', 'ratio'], costRows),
  '',
  `Hot key: ${hotKey.containers} busy containers on one item with ${hotKey.copies} read copies (ADR 0024) for ${hotKeySettings.durationMs / 1000}s, tokens living ${hotKeySettings.lifetimeSeconds}s, refresh window ${hotKeySettings.windowSeconds}s, memory re-check 5 s (the default), refresh ahead on demand.`,
  '',
  table(
    [
      'phase of the token’s life',
      'DynamoDB reads per busy container-second, one item at scale (busiest in the run; all items)',
      'writes per second (the lease holder’s)',
      'seconds measured',
    ],
    hotKeyRows,
  ),
  '',
  `Caller wait at the cut-over in the same run (the upstream takes ${upstreamLatencyMs} ms per request):`,
  '',
  table(['callers', 'p99 (ms)', 'max (ms)'], cutoverRows),
  '',
  `Client cache: one service process with the client's default options, ${clientCacheSettings.loops} loops each using a token every ${clientCacheSettings.thinkMs} ms through \`provider()\` for ${clientCacheSettings.durationMs / 1000}s; tokens living ${clientCacheSettings.lifetimeSeconds}s, the broker's defaults, the warm-up every ${clientCacheSettings.warmUpEveryMs / 1000}s, another caller asking for minValidity ${clientCacheSettings.forceMinValidity} every ${clientCacheSettings.forceEveryMs / 1000}s. Before: 0.4.0's cache (a token kept until its margin before expiry); after: the broker's maxAgeMs obeyed.`,
  '',
  table(['', 'before (0.4.0)', 'after'], clientRows),
  '',
  executionModelMarkdown({
    cold,
    environmentCold,
    fleet: broker,
    busy: hotKey,
    idle,
    idleSettings,
    upstreamLatencyMs,
  }),
].join('\n');

log();
log(markdown);
writeFileSync(
  join(resultsDir, 'fleet.json'),
  `${JSON.stringify(
    {
      settings: {
        ...fleetSettings,
        upstreamLatencyMs,
        brokerEnv,
        machine,
        hotKey: hotKeySettings,
        clientCache: clientCacheSettings,
        idle: idleSettings,
        threeRegions: { regions: THREE_REGIONS, conflicts: regional.conflicts },
        pricePerGbSecondUsd: PRICE_PER_GB_SECOND_USD,
        memoryMb: MEMORY_MB,
        architecture: ARCHITECTURE,
      },
      fleets,
      threeRegions: regional.result,
      warm,
      cold,
      environmentCold,
      hotKey,
      idle: idle.map((run) => ({
        ...run,
        afterResponse: run.execution === 'frozen' ? afterResponseCost(run.result) : undefined,
      })),
      clientCache,
    },
    null,
    2,
  )}\n`,
);
writeFileSync(join(resultsDir, 'fleet.svg'), `${fleetChart(fleets, settingsLine)}\n`);
writeFileSync(join(resultsDir, 'results.md'), markdown);
step(`written: ${resultsDir}/fleet.json, fleet.svg, results.md`);
process.exit(0);
