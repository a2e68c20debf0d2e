/**
 * `npm run validate -- --stage <stage>`: refuses, before `serverless package`, a stage that
 * would only fail at its first cold start in AWS: a stage serverless.yml does not declare, a
 * `connections` value the broker's configuration refuses, a secret the function may not read.
 * Resolves the stage with `serverless print` (offline, as packaging does). Exit 0: it may be
 * packaged; 1: the problems are listed, one line each; 2: wrong usage.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { checkStage, type PrintedConfig } from './stage-check.js';

const { values } = parseArgs({ options: { stage: { type: 'string' } }, strict: true });
if (!values.stage) {
  process.stderr.write('usage: npm run validate -- --stage <stage>\n');
  process.exit(2);
}
const printed = JSON.parse(
  execFileSync(
    join('node_modules', '.bin', 'serverless'),
    ['print', '--stage', values.stage, '--format', 'json'],
    { encoding: 'utf8', stdio: ['ignore', 'pipe', 'inherit'], maxBuffer: 16 * 1024 * 1024 },
  ),
) as PrintedConfig;
const problems = checkStage(values.stage, printed);
if (problems.length > 0) {
  for (const problem of problems) process.stderr.write(`${problem}\n`);
  process.exit(1);
}
process.stdout.write(`Stage '${values.stage}' may be packaged.\n`);
