// `npm run check:deploy`: builds infra/check-deploy.ts (the stacks checked offline as AWS would
// judge them: IAM against the Service Authorization Reference, cfn-lint, cfn-guard) into
// .build-tools/ and runs it with the arguments.
import { execFileSync } from 'node:child_process';
import { build } from 'esbuild';

const outfile = '.build-tools/check-deploy.mjs';
await build({
  entryPoints: ['infra/check-deploy.ts'],
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
