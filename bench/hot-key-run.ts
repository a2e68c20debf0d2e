/**
 * `npm run bench -- hot-key [--seconds S] [--rounds R] [--cold-containers C] [--stores LIST]`:
 * the hot key of `npm run bench` alone (bench/hot-key.ts), a few minutes instead of nine: the
 * busy run (its phases' reads, the saturation figure, the callers' wait at a cut-over) and the
 * fleet's cold start repeated, with every container's first request at once and spread over a
 * second. Each runs on every store of `--stores` (`dynalite,dynamodb-local` by default): dynalite,
 * and AWS's DynamoDB Local behind a counting proxy (bench/counted-dynamodb.ts), which returns the
 * item on a failed conditional write as DynamoDB does, where dynalite makes the adapter read it.
 * Prints the figures, the cold starts side by side, and writes bench/results/hot-key.json.
 */
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startStack } from '../local/stack.js';
import {
  STORE_KINDS,
  STORE_NAMES,
  type StoreKind,
  sharedDynamoDBLocal,
} from './counted-dynamodb.js';
import {
  type ColdStartResult,
  type HotKeyResult,
  hotKeyEnv,
  hotKeySettingsFor,
  ITEM_READS_PER_SECOND,
  measureColdStarts,
  measureHotKey,
} from './hot-key.js';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    seconds: { type: 'string', default: '60' },
    rounds: { type: 'string', default: '5' },
    'cold-containers': { type: 'string', default: '8' },
    stores: { type: 'string', default: STORE_KINDS.join(',') },
    // Read copies of the token item (ADR 0024), set by the operator's action before each run.
    copies: { type: 'string', default: '5' },
  },
});
const [buildDir = '.bench', resultsDir = 'bench/results'] = positionals;
const stores = values.stores.split(',').map((name) => {
  if (!(STORE_KINDS as readonly string[]).includes(name)) {
    throw new Error(`Unknown store '${name}': ${STORE_KINDS.join(' or ')}`);
  }
  return name as StoreKind;
});
const paths = {
  broker: resolve(buildDir, 'dist/broker/index.mjs'),
  container: resolve(buildDir, 'dist/local/container.mjs'),
  bootstrap: resolve(buildDir, 'dist/local/lambda-env/bootstrap.mjs'),
};
const upstreamLatencyMs = 100;
const copies = Number(values.copies);
if (!Number.isInteger(copies) || copies < 0 || copies > 8) {
  throw new Error(`--copies must be a whole number from 0 to 8, not '${values.copies}'`);
}
const settings = hotKeySettingsFor(false, Number(values.seconds) * 1000);
const log = (line = '') => process.stdout.write(`${line}\n`);
const began = performance.now();
const step = (line: string) =>
  log(`[${((performance.now() - began) / 1000).toFixed(0)} s] ${line}`);

const dynamodbLocal = sharedDynamoDBLocal();
const stackFor = (store: StoreKind) => (lifetimeSeconds: number, latencyMs: number) =>
  startStack(
    { expiresIn: lifetimeSeconds, latencyMs, revokeOnReissue: true },
    ['sandbox'],
    store === 'dynamodb-local' ? { dynamodb: dynamodbLocal.endpoint } : {},
  );

interface StoreRun {
  readonly store: StoreKind;
  readonly busy: HotKeyResult | undefined;
  readonly coldStarts: ColdStartResult[];
}

const runOn = async (store: StoreKind): Promise<StoreRun> => {
  const name = STORE_NAMES[store];
  const busy =
    settings.durationMs > 0
      ? await (async () => {
          const stack = await stackFor(store)(settings.lifetimeSeconds, upstreamLatencyMs);
          try {
            step(
              `${name}: hot key: ${settings.containers} busy containers for ${settings.durationMs / 1000}s …`,
            );
            return await measureHotKey(stack, {
              bundle: paths.broker,
              runner: paths.container,
              bootstrap: paths.bootstrap,
              env: { ...stack.env, ...hotKeyEnv(settings.windowSeconds) },
              execution: 'always-running',
              pauseMs: { min: 5, max: 5 },
              copies,
              ...settings,
            });
          } finally {
            await stack.close();
          }
        })()
      : undefined;
  const coldStarts: ColdStartResult[] = [];
  for (const spreadMs of [0, 1_000]) {
    const rounds = Number(values.rounds);
    const containers = Number(values['cold-containers']);
    if (rounds <= 0) break;
    step(
      `${name}: cold starts: ${rounds} rounds of ${containers} containers, arriving within ${spreadMs} ms …`,
    );
    coldStarts.push(
      await measureColdStarts(stackFor(store), {
        bundle: paths.broker,
        runner: paths.container,
        bootstrap: paths.bootstrap,
        env: hotKeyEnv(settings.windowSeconds),
        containers,
        rounds,
        spreadMs,
        lifetimeSeconds: settings.lifetimeSeconds,
        upstreamLatencyMs,
        copies,
      }),
    );
  }
  return { store, busy, coldStarts };
};

const runs: StoreRun[] = [];
try {
  for (const store of stores) runs.push(await runOn(store));
} finally {
  await dynamodbLocal.close();
}

for (const { store, busy, coldStarts } of runs) {
  log(`— ${STORE_NAMES[store]}, ${copies} read copies of the token item`);
  if (busy) {
    for (const [phase, p] of Object.entries(busy.phases)) {
      log(
        `${phase.padEnd(8)} ${p.perItemReadsPerContainerSecond.toFixed(2)} reads per busy container-second per item at scale, ${p.busiestItemReadsPerContainerSecond.toFixed(2)} on this run's busiest (${p.readsPerContainerSecond.toFixed(2)} on all ${p.itemsRead}: ${Object.entries(
          p.byItem,
        )
          .map(
            ([item, rate]) =>
              `${item.split('#')[0] === 'copy' ? `copy ${item.split('#')[1]}` : 'main'} ${rate.toFixed(2)}`,
          )
          .join(', ')}), ${p.writesPerSecond.toFixed(2)} writes/s, ${p.seconds.toFixed(1)} s`,
      );
    }
    log(
      `fleet cold start (${busy.coldStart.seconds.toFixed(1)} s): ${busy.coldStart.readsPerContainer.toFixed(2)} reads per container`,
    );
    log(`containers one item serves (busiest phase): ${busy.containersToSaturate.toFixed(0)}`);
    log(
      `callers at a cut-over (1 s before to 200 ms after): ${busy.cutover.callers}, p99 ${busy.cutover.p99Ms.toFixed(0)} ms, max ${busy.cutover.maxMs.toFixed(0)} ms; slowest per container and cut-over (${busy.cutover.slowestPerContainer.count}): median ${busy.cutover.slowestPerContainer.p50Ms.toFixed(0)} ms; chaos window: ${busy.cutoverChaos.callers}, slowest ${busy.cutoverChaos.slowestMs.toFixed(0)} ms`,
    );
    log(
      `issuances ${busy.issuances}, errors ${busy.errors}, invalid served ${busy.invalidServed}, latency p99 ${busy.latencyMs.p99.toFixed(1)} ms`,
    );
  }
  for (const cold of coldStarts) {
    log(
      `cold starts within ${cold.spreadMs} ms (${cold.rounds} × ${cold.containers}): ${cold.readsPerColdStart.toFixed(2)} reads per cold start (worst round ${cold.readsPerColdStartMax.toFixed(2)}), ${cold.busiestItemReadsPerColdStart.toFixed(2)} on the busiest item; first token p50 ${cold.firstTokenMs.p50.toFixed(0)} ms, max ${cold.firstTokenMs.max.toFixed(0)} ms; errors ${cold.errors}; 1,000 such starts: ${(1_000 * cold.busiestItemReadsPerColdStart).toFixed(0)} reads on the busiest item against ${ITEM_READS_PER_SECOND}/s`,
    );
  }
}
if (runs.length > 1 && runs.every((run) => run.coldStarts.length > 0)) {
  log('— reads per cold start (worst round), side by side');
  for (const [i, cold] of (runs[0]?.coldStarts ?? []).entries()) {
    log(
      `within ${String(cold.spreadMs).padStart(4)} ms: ${runs
        .map(({ store, coldStarts }) => {
          const c = coldStarts[i];
          return `${STORE_NAMES[store]} ${c?.readsPerColdStart.toFixed(2)} (${c?.readsPerColdStartMax.toFixed(2)})`;
        })
        .join(', ')}`,
    );
  }
}
writeFileSync(
  join(resultsDir, 'hot-key.json'),
  `${JSON.stringify({ settings: { ...settings, upstreamLatencyMs, stores, copies }, runs }, null, 2)}\n`,
);
