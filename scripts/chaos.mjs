// `npm run chaos`: builds the broker and the chaos harness into .chaos/, then runs the fault
// scenarios (all, or those named: `npm run chaos -- pause-after-authorize`).
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { build } from 'esbuild';
import { NODE_ESM } from './esbuild-node.mjs';

const out = '.chaos';
mkdirSync(out, { recursive: true });
// The broker and the local runtime (not the client package, which chaos does not run).
execFileSync(process.execPath, ['scripts/build.mjs', 'broker', 'local'], {
  stdio: 'inherit',
  env: { ...process.env, BUILD_OUTDIR: `${out}/dist` },
});
await build({
  entryPoints: ['chaos/run.ts', 'chaos/clock-skew.ts'],
  outdir: out,
  outExtension: { '.js': '.mjs' },
  ...NODE_ESM,
  external: ['dynalite'],
  logLevel: 'warning',
});
try {
  execFileSync(
    process.execPath,
    [`${out}/run.mjs`, out, 'chaos/results', ...process.argv.slice(2)],
    { stdio: 'inherit' },
  );
} catch (error) {
  process.exit(typeof error.status === 'number' ? error.status : 1);
}
