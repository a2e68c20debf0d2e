// What `npm run check:deploy`, `npm run validate` and `npm run smoke` share: an infra/ tool in
// TypeScript, bundled into .build-tools/<name>.mjs (its packages stay in node_modules), then
// run with this process's arguments; its exit status is this process's.
import { execFileSync } from 'node:child_process';
import { build } from 'esbuild';

/** `entry`: esbuild's `entryPoints` or `stdin`, what the tool is built from. */
export const runInfraTool = async (name, entry) => {
  const outfile = `.build-tools/${name}.mjs`;
  await build({
    ...entry,
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
};
