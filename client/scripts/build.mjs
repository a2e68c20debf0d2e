// Builds the package into dist/ (or the directory given as the first argument):
//   dist/esm/*.js  ES modules          dist/cjs/*.js  CommonJS (dist/cjs/package.json says so)
//   dist/{esm,cjs}/*.d.ts  type declarations for each
// Each source file becomes one module (no bundling): the middleware and the CLI import the same
// `index.js` as the caller, so the error classes are one set per module system. Dependencies
// stay the caller's own (its AWS SDK); no source maps ship.
import { execFileSync } from 'node:child_process';
import { chmod, copyFile, mkdir, readdir, rm, writeFile } from 'node:fs/promises';
import { createRequire } from 'node:module';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';
import { build } from 'esbuild';

const here = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const outdir = resolve(here, process.argv[2] ?? 'dist');
const sources = (await readdir(join(here, 'src')))
  .filter((name) => name.endsWith('.ts'))
  .map((name) => join(here, 'src', name));

await rm(outdir, { recursive: true, force: true });
const common = {
  entryPoints: sources,
  bundle: false,
  platform: 'node',
  target: 'node20',
  logLevel: 'warning',
};
await build({ ...common, format: 'esm', outdir: join(outdir, 'esm') });
await build({ ...common, format: 'cjs', outdir: join(outdir, 'cjs') });
await writeFile(join(outdir, 'cjs/package.json'), '{ "type": "commonjs" }\n');

const tsc = join(
  dirname(createRequire(import.meta.url).resolve('typescript/package.json')),
  'bin/tsc',
);
execFileSync(
  process.execPath,
  [tsc, '-p', join(here, 'tsconfig.json'), '--outDir', join(outdir, 'esm')],
  { stdio: 'inherit' },
);
// The same declarations describe the CommonJS files: relative `.js` imports resolve there too.
await mkdir(join(outdir, 'cjs'), { recursive: true });
for (const name of await readdir(join(outdir, 'esm'))) {
  if (name === 'cli.d.ts') await rm(join(outdir, 'esm', name));
  else if (name.endsWith('.d.ts'))
    await copyFile(join(outdir, 'esm', name), join(outdir, 'cjs', name));
}
await rm(join(outdir, 'cjs/cli.js'));
await chmod(join(outdir, 'esm/cli.js'), 0o755);
