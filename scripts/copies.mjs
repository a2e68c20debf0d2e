// `npm run copies -- --table T --connection C --copies K [--region R] [--endpoint URL]`: sets
// how many read copies a connection's token item has (ADR 0024; local/copies-command.ts).
// Built on demand into .copies/ (esbuild, a second or two), then run.
import { execFileSync } from 'node:child_process';
import { mkdirSync } from 'node:fs';
import { build } from 'esbuild';
import { NODE_ESM } from './esbuild-node.mjs';

const out = '.copies';
mkdirSync(out, { recursive: true });
await build({
  stdin: {
    contents:
      "import { main } from './local/copies-command.ts';\nprocess.exitCode = await main(process.argv.slice(2));\n",
    resolveDir: process.cwd(),
    sourcefile: 'copies-entry.ts',
    loader: 'ts',
  },
  outfile: `${out}/copies.mjs`,
  ...NODE_ESM,
  logLevel: 'warning',
});
try {
  execFileSync(process.execPath, [`${out}/copies.mjs`, ...process.argv.slice(2)], {
    stdio: 'inherit',
  });
} catch (error) {
  process.exit(typeof error.status === 'number' ? error.status : 1);
}
