// Builds the Lambda bundle (dist/broker/index.mjs), the local runtime (dist/local/), the caller
// client (dist/client/, ESM + type declarations) and the operator CLI (dist/cli/index.mjs).
import { execFileSync } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { build } from 'esbuild';

// An ESM bundle that inlines CommonJS code (the AWS SDK) calls `require` for Node built-ins;
// ESM has no `require`, so one is made from import.meta.url.
const banner = {
  js: "import { createRequire as __createRequire } from 'node:module'; const require = __createRequire(import.meta.url);",
};

const common = {
  bundle: true,
  platform: 'node',
  target: 'node24',
  format: 'esm',
  banner,
  sourcemap: 'linked',
  legalComments: 'none',
  logLevel: 'warning',
};

// BUILD_OUTDIR lets tests build a private copy without racing the one in dist/.
const outdir = process.env.BUILD_OUTDIR ?? 'dist';
await rm(outdir, { recursive: true, force: true });

await build({
  ...common,
  entryPoints: ['functions/broker/index.ts'],
  outfile: `${outdir}/broker/index.mjs`,
  minify: true,
});
await build({
  ...common,
  entryPoints: ['local/start.ts', 'local/container.ts'],
  outdir: `${outdir}/local`,
  outExtension: { '.js': '.mjs' },
  // dynalite loads its storage backends dynamically; it stays a regular dependency at run time.
  external: ['dynalite'],
});

// The client and the CLI are libraries of the package: their dependencies stay external, so a
// service that imports the client uses its own AWS SDK.
const library = {
  bundle: true,
  platform: 'node',
  target: 'node22',
  format: 'esm',
  packages: 'external',
  logLevel: 'warning',
};
await build({
  ...library,
  entryPoints: ['client/index.ts'],
  outfile: `${outdir}/client/index.mjs`,
});
await build({
  ...library,
  entryPoints: ['cli/index.ts'],
  outfile: `${outdir}/cli/index.mjs`,
  banner: { js: '#!/usr/bin/env node' },
});
execFileSync(
  process.execPath,
  ['node_modules/typescript/bin/tsc', '-p', 'tsconfig.client.json', '--outDir', `${outdir}/client`],
  {
    stdio: 'inherit',
  },
);
