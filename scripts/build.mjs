// Builds the Lambda bundle (dist/broker/index.mjs), the local runtime (dist/local/) and the
// client package with its CLI (dist/client/). Arguments pick pieces: `node scripts/build.mjs
// broker local` is what `npm start` needs.
import { execFileSync } from 'node:child_process';
import { rm } from 'node:fs/promises';
import { resolve } from 'node:path';
import { build } from 'esbuild';
import { NODE_ESM } from './esbuild-node.mjs';

const common = {
  ...NODE_ESM,
  sourcemap: 'linked',
  legalComments: 'none',
  logLevel: 'warning',
};

/**
 * The broker's init (functions/broker/init.ts, a chunk in chunks/) imports
 * `lib/adapters/ssm-connections.js` only when it is needed; in the bundle that import stays an
 * import, of the file built beside index.mjs (docs/adr/0003), one directory up from the chunk.
 */
const besideTheBundle = {
  name: 'ssm-connections-beside-the-bundle',
  setup(build) {
    build.onResolve({ filter: /\/ssm-connections\.js$/ }, () => ({
      path: '../ssm-connections.mjs',
      external: true,
    }));
  },
};

// BUILD_OUTDIR lets tests build a private copy without racing the one in dist/.
const outdir = process.env.BUILD_OUTDIR ?? 'dist';
// BUILD_MINIFY=0: the broker unminified, for reading a CPU profile of its init by module.
const minify = process.env.BUILD_MINIFY !== '0';
const pieces = ['broker', 'local', 'client'];
const only = new Set(process.argv.length > 2 ? process.argv.slice(2) : pieces);
for (const piece of only) {
  if (!pieces.includes(piece)) throw new Error(`Unknown piece '${piece}': ${pieces.join(', ')}`);
}
for (const piece of only) await rm(`${outdir}/${piece}`, { recursive: true, force: true });

if (only.has('broker')) {
  // index.mjs and the chunks it imports (issue 25, docs/adr/0018): a cold start parses only what
  // serving a token from DynamoDB needs. What the broker imports dynamically (the KMS and
  // Secrets Manager clients, the upstream client and its resilience library) is a chunk of its
  // own in chunks/, loaded and parsed on first use only. Code that the entry shares with such a
  // chunk is in chunks too, imported by index.mjs.
  await build({
    ...common,
    entryPoints: { index: 'functions/broker/index.ts' },
    outdir: `${outdir}/broker`,
    outExtension: { '.js': '.mjs' },
    splitting: true,
    chunkNames: 'chunks/[name]-[hash]',
    minify,
    plugins: [...NODE_ESM.plugins, besideTheBundle],
  });
  // Read only with BROKER_CONNECTIONS_PARAMETER: a file of its own beside index.mjs, so that no
  // other cold start parses the SSM client (about 200 KiB).
  await build({
    ...common,
    entryPoints: ['lib/adapters/ssm-connections.ts'],
    outfile: `${outdir}/broker/ssm-connections.mjs`,
    minify: true,
  });
}
if (only.has('local')) {
  await build({
    ...common,
    // lambda-env/bootstrap.ts is the runtime process of an emulated execution environment
    // (local/lambda-env/): built to <outdir>/local/lambda-env/bootstrap.mjs.
    // lambda-env/managed-bootstrap.ts is Lambda Managed Instances' runtime (issue 37), beside it.
    entryPoints: [
      'local/start.ts',
      'local/container.ts',
      'local/lambda-env/bootstrap.ts',
      'local/lambda-env/managed-bootstrap.ts',
    ],
    outbase: 'local',
    outdir: `${outdir}/local`,
    outExtension: { '.js': '.mjs' },
    // dynalite loads its storage backends dynamically; it stays a regular dependency at run time.
    external: ['dynalite'],
  });
}

// The client package (client/): its own build, as `npm pack -w client` runs it, into
// <outdir>/client; the CLI is its `bin` (<outdir>/client/esm/cli.js).
if (only.has('client')) {
  execFileSync(process.execPath, ['client/scripts/build.mjs', resolve(outdir, 'client')], {
    stdio: 'inherit',
  });
}
