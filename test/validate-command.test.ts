/**
 * `npm run validate -- --stage <stage>` as a user runs it, on a copy of serverless.yml with one
 * edit: the process's exit code and what it prints. (test/stage-check.test.ts checks the rules
 * themselves, on printed configurations.) The copy lives in a directory of its own, beside
 * links to infra/ and node_modules/, so that serverless resolves it as it resolves the real one.
 */
import { execFile } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { afterAll, describe, expect, it } from 'vitest';
import { root } from './support/build.js';

const run = promisify(execFile);
const dirs: string[] = [];
afterAll(() => {
  for (const dir of dirs) rmSync(dir, { recursive: true, force: true });
});

/** serverless.yml with `edit` applied, validated for `args`: exit code and stderr. */
const validate = async (edit: (yml: string) => string, ...args: string[]) => {
  const dir = mkdtempSync(join(tmpdir(), 'validate-stage-'));
  dirs.push(dir);
  for (const link of ['infra', 'node_modules']) symlinkSync(join(root, link), join(dir, link));
  const original = readFileSync(join(root, 'serverless.yml'), 'utf8');
  const edited = edit(original);
  expect(edited).not.toBe(original);
  writeFileSync(join(dir, 'serverless.yml'), edited);
  return run(process.execPath, [join(root, 'scripts/validate-stage.mjs'), ...args], {
    cwd: dir,
    env: { PATH: process.env.PATH ?? '', HOME: process.env.HOME ?? dir },
  }).then(
    ({ stderr }) => ({ code: 0, stderr }),
    (error: { code: number; stderr: string }) => ({ code: error.code, stderr: error.stderr }),
  );
};

/** A line added to the example prod stage's parameters (after its logRetentionInDays). */
const inProd = (line: string) => (yml: string) =>
  yml.replace(/(\n {2}prod:\n(?: {4}.*\n)*? {4}logRetentionInDays: 90\n)/, `$1    ${line}\n`);

describe('npm run validate, as a process', () => {
  // Issue 38: osls says why on stdout, which validate captured for the JSON and dropped.
  it('prints serverless’s own reason when it cannot resolve the stage', async () => {
    const { code, stderr } = await validate(
      inProd('warmupRate: rate(5 minute)'),
      '--stage',
      'prod',
    );
    expect(code).toBe(1);
    expect(stderr).toContain(
      "Configuration error at 'functions.broker.events.0.schedule.rate.0': unsupported string format",
    );
    expect(stderr).toContain("Stage 'prod' could not be resolved");
  }, 60_000);

  it('refuses a misspelt stage parameter, naming the one meant', async () => {
    const { code, stderr } = await validate(
      inProd("refreshWindowSecond: '300'"),
      '--stage',
      'prod',
    );
    expect(code).toBe(1);
    expect(stderr).toContain(
      "Stage 'prod': params.prod.refreshWindowSecond is not a stage parameter (did you mean refreshWindowSeconds?)",
    );
  }, 60_000);

  // Issue 38: the example prod stage validated cleanly, so one edited in place, or copied,
  // that kept a placeholder was never told.
  it('refuses the example prod stage for its placeholders, unless told they are allowed', async () => {
    // One edit that changes nothing the checks read: a comment.
    const unchanged = (yml: string) => `# a copy\n${yml}`;
    const refused = await validate(unchanged, '--stage', 'prod');
    expect(refused.code).toBe(1);
    for (const value of [
      '111122223333',
      'https://open-api.example.com',
      'subnet-0123456789abcdef0',
      'sg-0123456789abcdef0',
    ]) {
      expect(refused.stderr).toContain(value);
    }
    expect(refused.stderr).toContain('only dev may keep placeholders');
    const allowed = await validate(unchanged, '--stage', 'prod', '--allow-placeholders');
    expect(allowed.code).toBe(0);
    expect(allowed.stderr).toContain('Note (--allow-placeholders):');
    expect((await validate(unchanged, '--stage', 'dev')).code).toBe(0);
  }, 60_000);
});
