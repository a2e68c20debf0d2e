// `npm run smoke -- --stage <stage> [--region <region>]` or `-- --endpoint <url>`: builds
// infra/smoke.ts (it uses the project's own client, client/src) into .build-tools/ and runs it
// with the arguments. After a deploy: whether the stage works (docs/operations.md, Deploy).
import { execFileSync } from 'node:child_process';
import { build } from 'esbuild';

const outfile = '.build-tools/smoke.mjs';
await build({
  stdin: {
    contents:
      "import { main } from './infra/smoke.ts';\nprocess.exitCode = await main(process.argv.slice(2));\n",
    resolveDir: process.cwd(),
    sourcefile: 'smoke-entry.ts',
    loader: 'ts',
  },
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
