/**
 * `npm run validate -- --stage <stage> [--region <region>] [--allow-placeholders]`: refuses, before `serverless package`, a stage that
 * would only fail at its first cold start in AWS: a stage serverless.yml does not declare, a
 * `connections` value the broker's configuration refuses, a secret the function may not read.
 * Resolves the stage with `serverless print` (offline, as packaging does), for `--region` when
 * given (a stage on a global table is deployed, and checked, once per region: `--region` is
 * required for it). Exit 0: it may be packaged, in the region named; 1: the problems are listed,
 * one line each (or serverless could not resolve the stage); 2: wrong usage. Outside dev, the
 * example stages' placeholders (accounts, example.com, sample IDs) are refused;
 * `--allow-placeholders`, for serverless.yml's own examples (CI), lists them as notes instead.
 */
import { execFileSync } from 'node:child_process';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { checkStage, type PrintedConfig, stagePlaceholders } from './stage-check.js';

const USAGE =
  'usage: npm run validate -- --stage <stage> [--region <region>] [--allow-placeholders]';
let values: { stage?: string; region?: string; 'allow-placeholders'?: boolean };
try {
  ({ values } = parseArgs({
    options: {
      stage: { type: 'string' },
      region: { type: 'string' },
      'allow-placeholders': { type: 'boolean' },
    },
    strict: true,
  }));
} catch (error) {
  process.stderr.write(`${(error as Error).message}\n${USAGE}\n`);
  process.exit(2);
}
if (!values.stage) {
  process.stderr.write(`${USAGE}\n`);
  process.exit(2);
}
let output: string;
try {
  output = execFileSync(
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
  );
} catch (error) {
  // osls prints why on stdout ("Configuration error at 'functions.broker.events.0.schedule
  // .rate.0': unsupported string format"), which is captured here for the JSON: it is repeated
  // on stderr, after what it said there (inherited). No stack trace of this script after it.
  const said = String((error as { stdout?: unknown }).stdout ?? '').trim();
  if (said) process.stderr.write(`${said}\n\n`);
  process.stderr.write(
    `Stage '${values.stage}' could not be resolved: serverless print failed${said ? ', for the reason above' : ' (its output is above)'}. It runs offline unless a setting reads AWS (\${cf:…}, \${ssm:…}): then it needs credentials for the stage's account.\n`,
  );
  process.exit(1);
}
const printed = JSON.parse(output) as PrintedConfig;
const region = printed.provider?.region;
const params = (name: string) =>
  (printed.params?.[name] as Record<string, unknown> | undefined)?.table;
if (!values.region && (params(values.stage) ?? params('default')) === 'global') {
  // Each region's stack is its own deployment: a check of serverless.yml's default region says
  // nothing of the others.
  process.stderr.write(
    `Stage '${values.stage}' is on a global table and deployed once per region: give --region (each of its regions in turn).\n`,
  );
  process.exit(2);
}
const allowPlaceholders = values['allow-placeholders'] === true;
if (allowPlaceholders) {
  // serverless.yml's example stages (CI): their placeholders are said, not refused.
  for (const note of stagePlaceholders(values.stage, printed)) {
    process.stderr.write(`Note (--allow-placeholders): ${note}\n`);
  }
}
const problems = checkStage(values.stage, printed, { allowPlaceholders });
if (problems.length > 0) {
  for (const problem of problems) process.stderr.write(`${problem}\n`);
  process.exit(1);
}
const allowed = allowPlaceholders && stagePlaceholders(values.stage, printed).length > 0;
process.stdout.write(
  `Stage '${values.stage}'${region ? ` in ${region}` : ''} may be packaged${allowed ? ', its placeholders allowed (--allow-placeholders)' : ''}.\n`,
);
