/**
 * The cold-start measures alone, for comparing builds (issue 25): `node scripts/bench.mjs cold
 * [A=path/to/index.mjs …]` builds this branch's broker (B) and runs, `runs` times, three
 * measures of 15 rounds each, every round one cold start of each broker build and one of the
 * bare GetItem bundle, in turn (a shared machine's drift hits all alike):
 * - in one process (`cold-runner`: import, then the first invocation), as `measureCold`, and
 *   its import (init) alone;
 * - in an emulated execution environment with the extension registering, as
 *   `measureColdInEnvironment`;
 * - outside the bench's harness: a plain `node` process (`cold-outside.mjs`, not bundled)
 *   timing import to the first token, wall and CPU.
 * - on request only (`instructions` in COLD_MEASURES): the same outside cold start under
 *   valgrind's callgrind, counting the CPU instructions it runs in user space, millions. About
 *   60 times slower, but the count hardly moves with the machine's load (±1 % between runs where
 *   wall time moves ±5 %): it tells apart two builds a few hundred microseconds apart on a shared
 *   machine. It misses what is not an instruction of the process (file reads, cache misses),
 *   so it ranks changes; the times above are the figures.
 * Each run's figure is a build's median over the bare bundle's median; the line per build gives
 * the median of the runs' ratios, then the runs'. Environment: COLD_RUNS (3), COLD_ROUNDS (15),
 * COLD_MEASURES (`process,environment,outside`: which to run; `instructions` too, if valgrind is
 * installed). COLD_PROFILE_DIR=<dir>: each
 * outside cold start also writes a V8 CPU profile there (`--cpu-prof`, 100 µs samples; with
 * BUILD_MINIFY=0 its functions keep their names), to find where init spends its time.
 * COLD_KMS=1: the stack seals stored tokens with a key of the loopback KMS
 * (`BROKER_KMS_KEY_ID`, what deployed stages set), so each broker cold start also loads the KMS
 * client and makes one `Decrypt` call; the bare bundle still reads the item only.
 */
import { execFile } from 'node:child_process';
import { resolve } from 'node:path';
import { promisify } from 'node:util';
import { startStack } from '../local/stack.js';
import { coldInEnvironment, coldOnce } from './costs.js';
import { percentile } from './measures.js';

const [buildDir = '.bench', ...named] = process.argv.slice(2);
const builds = [
  ...named.map((arg) => {
    const at = arg.indexOf('=');
    return { name: arg.slice(0, at), bundle: resolve(arg.slice(at + 1)) };
  }),
  { name: 'this', bundle: resolve(buildDir, 'dist/broker/index.mjs') },
];
const bare = resolve(buildDir, 'bare-getitem.mjs');
const runner = resolve(buildDir, 'cold-runner.mjs');
const bootstrap = resolve(buildDir, 'dist/local/lambda-env/bootstrap.mjs');
const outside = resolve('bench/cold-outside.mjs');
const runs = Number(process.env.COLD_RUNS ?? 3);
const rounds = Number(process.env.COLD_ROUNDS ?? 15);
const chosen = new Set((process.env.COLD_MEASURES ?? 'process,environment,outside').split(','));

const run = promisify(execFile);
const outsideOnce = async (
  bundle: string,
  event: unknown,
  env: Record<string, string>,
  { counted = false } = {},
) => {
  const profile = process.env.COLD_PROFILE_DIR
    ? [
        '--cpu-prof',
        '--cpu-prof-interval',
        '100',
        '--cpu-prof-dir',
        resolve(process.env.COLD_PROFILE_DIR),
      ]
    : [];
  const command = counted
    ? ['valgrind', '--tool=callgrind', '--callgrind-out-file=/dev/null', process.execPath]
    : [process.execPath];
  const { stdout, stderr } = await run(
    command[0] ?? process.execPath,
    [...command.slice(1), ...profile, outside, bundle, JSON.stringify(event)],
    {
      env: { PATH: process.env.PATH ?? '', ...env },
      encoding: 'utf8',
    },
  );
  const result = JSON.parse(stdout.trim().split('\n').pop() ?? '{}') as {
    wallMs: number;
    cpuMs: number;
  };
  // callgrind's summary on stderr: "==pid== I   refs:      655,371,512".
  const refs = /I\s+refs:\s+([\d,]+)/.exec(stderr)?.[1]?.replaceAll(',', '');
  return { ...result, instructions: refs === undefined ? Number.NaN : Number(refs) / 1e6 };
};

type Measure =
  | 'process'
  | 'process init'
  | 'environment'
  | 'outside wall'
  | 'outside cpu'
  | 'instructions';
const measures: Measure[] = [
  'process',
  'process init',
  'environment',
  'outside wall',
  'outside cpu',
  'instructions',
];
const UNIT: Partial<Record<Measure, string>> = { instructions: 'millions of instructions' };
const median = (values: number[]) => percentile(values, 50);
const event = { action: 'getToken', connection: 'sandbox' };
const bareEvent = { connection: 'sandbox' };
const log = (line: string) => process.stdout.write(`${line}\n`);

const stack = await startStack({}, ['sandbox', 'legacy'], {
  encrypt: process.env.COLD_KMS === '1',
});
const ratios = new Map<string, number[]>();
const times = new Map<string, number[]>();
try {
  // The token in the table first: every measured cold start serves it from DynamoDB.
  await coldOnce(runner, builds[0]?.bundle ?? '', event, stack.env);
  const issued = stack.simulator.stats().issuances;
  for (let r = 0; r < runs; r += 1) {
    const samples = new Map<string, number[]>();
    const add = (key: string, value: number) =>
      samples.set(key, [...(samples.get(key) ?? []), value]);
    for (let i = 0; i < (chosen.has('process') ? rounds : 0); i += 1) {
      for (const b of builds) {
        const { totalMs, initMs } = await coldOnce(runner, b.bundle, event, stack.env);
        add(`${b.name} process`, totalMs);
        add(`${b.name} process init`, initMs);
      }
      const { totalMs, initMs } = await coldOnce(runner, bare, bareEvent, stack.env);
      add('bare process', totalMs);
      add('bare process init', initMs);
    }
    for (let i = 0; i < (chosen.has('environment') ? rounds : 0); i += 1) {
      for (const b of builds) {
        const s = await coldInEnvironment(bootstrap, b.bundle, event, stack.env);
        if (s.extensions !== 1) throw new Error(`${b.name}: ${s.extensions} extensions registered`);
        add(`${b.name} environment`, s.initMs + s.durationMs);
      }
      const s = await coldInEnvironment(bootstrap, bare, bareEvent, stack.env);
      add('bare environment', s.initMs + s.durationMs);
    }
    for (let i = 0; i < (chosen.has('outside') ? rounds : 0); i += 1) {
      for (const b of [...builds, { name: 'bare', bundle: bare }]) {
        const o = await outsideOnce(b.bundle, b.name === 'bare' ? bareEvent : event, stack.env);
        add(`${b.name} outside wall`, o.wallMs);
        add(`${b.name} outside cpu`, o.cpuMs);
      }
    }
    for (let i = 0; i < (chosen.has('instructions') ? rounds : 0); i += 1) {
      for (const b of [...builds, { name: 'bare', bundle: bare }]) {
        const o = await outsideOnce(b.bundle, b.name === 'bare' ? bareEvent : event, stack.env, {
          counted: true,
        });
        add(`${b.name} instructions`, o.instructions);
      }
    }
    for (const m of measures.filter((m) => chosen.has(m.split(' ')[0] ?? ''))) {
      const reference = median(samples.get(`bare ${m}`) ?? []);
      times.set(`bare ${m}`, [...(times.get(`bare ${m}`) ?? []), reference]);
      for (const b of builds) {
        const ms = median(samples.get(`${b.name} ${m}`) ?? []);
        times.set(`${b.name} ${m}`, [...(times.get(`${b.name} ${m}`) ?? []), ms]);
        ratios.set(`${b.name} ${m}`, [...(ratios.get(`${b.name} ${m}`) ?? []), ms / reference]);
      }
    }
    log(`run ${r + 1} of ${runs} done`);
  }
  if (stack.simulator.stats().issuances !== issued) {
    throw new Error('a cold start reached the upstream: the table should have served it');
  }
} finally {
  await stack.close();
}
const fixed = (values: number[], digits: number) => values.map((v) => v.toFixed(digits)).join(', ');
for (const m of measures.filter((m) => chosen.has(m.split(' ')[0] ?? ''))) {
  const unit = UNIT[m] ?? 'ms';
  log(`${m} (${unit}, median of ${rounds}; bare: ${fixed(times.get(`bare ${m}`) ?? [], 1)})`);
  for (const b of builds) {
    const list = ratios.get(`${b.name} ${m}`) ?? [];
    log(
      `  ${b.name.padEnd(8)} ${median(list).toFixed(2)}× (${fixed(list, 2)})  ${unit === 'ms' ? 'ms' : 'M'}: ${fixed(times.get(`${b.name} ${m}`) ?? [], 1)}`,
    );
  }
}
