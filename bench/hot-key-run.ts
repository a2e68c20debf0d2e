/**
 * `npm run bench -- hot-key [--seconds S] [--rounds R] [--cold-containers C]`: the hot key of
 * `npm run bench` alone (bench/hot-key.ts), a few minutes instead of nine: the busy run (its
 * phases' reads, the saturation figure, the callers' wait at a cut-over) and the fleet's cold
 * start repeated, with every container's first request at once and spread over a second.
 * Prints the figures and writes bench/results/hot-key.json.
 */
import { writeFileSync } from 'node:fs';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { startStack } from '../local/stack.js';
import {
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
  },
});
const [buildDir = '.bench', resultsDir = 'bench/results'] = positionals;
const paths = {
  broker: resolve(buildDir, 'dist/broker/index.mjs'),
  container: resolve(buildDir, 'dist/local/container.mjs'),
  bootstrap: resolve(buildDir, 'dist/local/lambda-env/bootstrap.mjs'),
};
const upstreamLatencyMs = 100;
const settings = hotKeySettingsFor(false, Number(values.seconds) * 1000);
const log = (line = '') => process.stdout.write(`${line}\n`);
const began = performance.now();
const step = (line: string) =>
  log(`[${((performance.now() - began) / 1000).toFixed(0)} s] ${line}`);

const stackFor = (lifetimeSeconds: number, latencyMs: number) =>
  startStack({ expiresIn: lifetimeSeconds, latencyMs, revokeOnReissue: true }, ['sandbox']);

const busy =
  settings.durationMs > 0
    ? await (async () => {
        const stack = await stackFor(settings.lifetimeSeconds, upstreamLatencyMs);
        try {
          step(
            `hot key: ${settings.containers} busy containers for ${settings.durationMs / 1000}s …`,
          );
          return await measureHotKey(stack, {
            bundle: paths.broker,
            runner: paths.container,
            bootstrap: paths.bootstrap,
            env: { ...stack.env, ...hotKeyEnv(settings.windowSeconds) },
            execution: 'always-running',
            pauseMs: { min: 5, max: 5 },
            ...settings,
          });
        } finally {
          await stack.close();
        }
      })()
    : undefined;

const coldStarts = [];
for (const spreadMs of [0, 1_000]) {
  const rounds = Number(values.rounds);
  const containers = Number(values['cold-containers']);
  if (rounds <= 0) break;
  step(
    `cold starts: ${rounds} rounds of ${containers} containers, arriving within ${spreadMs} ms …`,
  );
  coldStarts.push(
    await measureColdStarts(stackFor, {
      bundle: paths.broker,
      runner: paths.container,
      bootstrap: paths.bootstrap,
      env: hotKeyEnv(settings.windowSeconds),
      containers,
      rounds,
      spreadMs,
      lifetimeSeconds: settings.lifetimeSeconds,
      upstreamLatencyMs,
    }),
  );
}

if (busy) {
  for (const [phase, p] of Object.entries(busy.phases)) {
    log(
      `${phase.padEnd(8)} ${p.readsPerContainerSecond.toFixed(2)} reads per busy container-second, ${p.writesPerSecond.toFixed(2)} writes/s, ${p.seconds.toFixed(1)} s`,
    );
  }
  log(
    `fleet cold start (${busy.coldStart.seconds.toFixed(1)} s): ${busy.coldStart.readsPerContainer.toFixed(2)} reads per container`,
  );
  log(`containers one item serves (busiest phase): ${busy.containersToSaturate.toFixed(0)}`);
  log(
    `callers at a cut-over (1 s before to 200 ms after): ${busy.cutover.callers}, p99 ${busy.cutover.p99Ms.toFixed(0)} ms, max ${busy.cutover.maxMs.toFixed(0)} ms; chaos window: ${busy.cutoverChaos.callers}, slowest ${busy.cutoverChaos.slowestMs.toFixed(0)} ms`,
  );
  log(
    `issuances ${busy.issuances}, errors ${busy.errors}, invalid served ${busy.invalidServed}, latency p99 ${busy.latencyMs.p99.toFixed(1)} ms`,
  );
}
for (const cold of coldStarts) {
  log(
    `cold starts within ${cold.spreadMs} ms (${cold.rounds} × ${cold.containers}): ${cold.readsPerColdStart.toFixed(2)} reads per cold start (worst round ${cold.readsPerColdStartMax.toFixed(2)}); first token p50 ${cold.firstTokenMs.p50.toFixed(0)} ms, max ${cold.firstTokenMs.max.toFixed(0)} ms; errors ${cold.errors}; 1,000 such starts: ${(1_000 * cold.readsPerColdStart).toFixed(0)} reads on the item against ${ITEM_READS_PER_SECOND}/s`,
  );
}
writeFileSync(
  join(resultsDir, 'hot-key.json'),
  `${JSON.stringify({ settings: { ...settings, upstreamLatencyMs }, busy, coldStarts }, null, 2)}\n`,
);
