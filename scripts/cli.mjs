// `npm run cli -- <command> …`: the client package's CLI (token-broker) from this repository.
// It is built on demand: `npm start` builds only the broker and the local runtime, so right
// after a fresh clone's `npm start` there is no dist/client yet, and after a change to
// client/src the built one is stale. Then it is built first (a few seconds, said on stderr).
import { execFileSync } from 'node:child_process';
import { existsSync, readdirSync, statSync } from 'node:fs';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const cli = join('dist', 'client', 'esm', 'cli.js');
const sources = readdirSync(join('client', 'src')).map((name) => join('client', 'src', name));
const stale =
  !existsSync(cli) || sources.some((source) => statSync(source).mtimeMs > statSync(cli).mtimeMs);
if (stale) {
  process.stderr.write('Building the CLI (dist/client) first …\n');
  execFileSync(process.execPath, ['scripts/build.mjs', 'client'], {
    stdio: ['ignore', process.stderr, 'inherit'],
    env: { ...process.env, BUILD_OUTDIR: 'dist' },
  });
}
// The CLI reads its arguments from process.argv[2…], which are this script's.
await import(pathToFileURL(cli).href);
