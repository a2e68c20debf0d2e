/**
 * `npm run bench -- fleet-regions [--runs N]`: the broker in three regions alone
 * (`bench/fleet-regions.ts`), N runs, each printed with its late refreshes and the gaps between
 * issuances. With BENCH_LOG_DIR (and BENCH_LOG_LEVEL=DEBUG) every container's log is kept, a
 * directory per run, to trace a late one. Writes nothing to bench/results.
 */
import { resolve } from 'node:path';
import { fleetSettings, runRegionalFleet } from './fleet-regions.js';

const args = process.argv.slice(2);
const runsAt = args.indexOf('--runs');
const runs = runsAt >= 0 ? Number(args[runsAt + 1]) : 1;
const buildDir = args.find((a, i) => !a.startsWith('--') && args[i - 1] !== '--runs') ?? '.bench';
const paths = {
  broker: resolve(buildDir, 'dist/broker/index.mjs'),
  container: resolve(buildDir, 'dist/local/container.mjs'),
};
const logDir = process.env.BENCH_LOG_DIR;
const lifetimeMs = fleetSettings.lifetimeSeconds * 1000;

for (let run = 1; run <= runs; run += 1) {
  if (logDir) process.env.BENCH_LOG_DIR = resolve(logDir, `run-${run}`);
  const { result, conflicts, issuances } = await runRegionalFleet(paths);
  const gaps = issuances.slice(1).map((t, i) => t - (issuances[i] ?? t));
  process.stdout.write(
    `${JSON.stringify({
      run,
      refreshesAfterExpiry: result.refreshesAfterExpiry,
      slowestAtCutOverMs: Math.round(result.cutoverChaos.slowestMs),
      revokedReceived: result.revokedReceived,
      issuancesPerLifetime: Number(result.issuancesPerLifetime.toFixed(2)),
      conflicts,
      issuances: issuances.map((t) => new Date(t).toISOString()),
      gapsMs: gaps,
      late: gaps.filter((g) => g > lifetimeMs).length,
    })}\n`,
  );
}
