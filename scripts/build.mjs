// Builds the Lambda bundle (dist/broker/index.mjs) and the local runtime (dist/local/start.mjs).
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

await rm('dist', { recursive: true, force: true });

await build({
  ...common,
  entryPoints: ['functions/broker/index.ts'],
  outfile: 'dist/broker/index.mjs',
  minify: true,
});
await build({
  ...common,
  entryPoints: ['local/start.ts'],
  outfile: 'dist/local/start.mjs',
  // dynalite loads its storage backends dynamically; it stays a regular dependency at run time.
  external: ['dynalite'],
});
