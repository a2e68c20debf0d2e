// `npm run validate -- --stage <stage>`: builds infra/validate-stage.ts (it uses the broker's
// own configuration code, lib/config.ts) into .build-tools/ and runs it with the arguments.
import { execFileSync } from 'node:child_process';
import { build } from 'esbuild';

const outfile = '.build-tools/validate-stage.mjs';
await build({
  entryPoints: ['infra/validate-stage.ts'],
  outfile,
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  packages: 'external',
  logLevel: 'warning',
});
try {
  execFileSync(process.execPath, [outfile, ...process.argv.slice(2)], { stdio: 'inherit' });
} catch (error) {
  process.exit(typeof error?.status === 'number' ? error.status : 1);
}
