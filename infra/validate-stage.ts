/**
 * `npm run validate -- --stage <stage> [--region <region>]`: refuses, before `serverless package`, a stage that
 * would only fail at its first cold start in AWS: a stage serverless.yml does not declare, a
 * `connections` value the broker's configuration refuses, a secret the function may not read.
 * Resolves the stage with `serverless print` (offline, as packaging does), for `--region` when
 * given (a stage on a global table is deployed, and checked, once per region). Exit 0: it may
 * be packaged; 1: the problems are listed, one line each; 2: wrong usage.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { checkStage, type PrintedConfig } from './stage-check.js';

const { values } = parseArgs({
  options: { stage: { type: 'string' }, region: { type: 'string' } },
  strict: true,
});
if (!values.stage) {
  process.stderr.write('usage: npm run validate -- --stage <stage> [--region <region>]\n');
  process.exit(2);
}
const printed = JSON.parse(
  execFileSync(
    join('node_modules', '.bin', 'serverless'),
    [
      'print',
      '--stage',
      values.stage,
      ...(values.region ? ['--region', values.region] : []),
      '--format',
      'json',
    ],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 16 * 1024 * 1024 },
  ),
) as PrintedConfig;
const problems = checkStage(values.stage, printed);
if (problems.length > 0) {
  for (const problem of problems) process.stderr.write(`${problem}\n`);
  process.exit(1);
}
process.stdout.write(
  `Stage '${values.stage}'${values.region ? ` in ${values.region}` : ''} may be packaged.\n`,
);
