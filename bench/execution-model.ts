/**
 * Lambda's execution model (issue 17): the hot-key measurement again on mostly idle containers
 * (each invoked every 0.3–1.5 s), always running and frozen between invocations, with the
 * broker's after-response extension and without it; the billed time after the response that a
 * refresh costs; and the tables of results.md. The cold start in an execution environment is
 * measured with the other cold costs (costs.ts).
 */

import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import type { Stack } from '../local/stack.js';
import type { ColdCost, EnvironmentCold, EnvironmentColdCost } from './costs.js';
import type { FleetResult } from './fleet.js';
import { type HotKeyResult, measureHotKey } from './hot-key.js';

/**
 * Lambda's duration price per GB-second, us-east-1, first tier (x86: the first 6 billion
 * GB-seconds a month; arm64: the first 7.5 billion): an assumption, taken from the AWS Lambda
 * pricing page (aws.amazon.com/lambda/pricing) as of 2026, not checked against a bill. AWS's
 * "How AWS Pricing Works" rounds them to $0.00001667 and $0.00001333.
 */
export const LAMBDA_PRICE_PER_GB_SECOND_USD = {
  x86_64: 0.0000166667,
  arm64: 0.0000133334,
} as const;
export type Architecture = keyof typeof LAMBDA_PRICE_PER_GB_SECOND_USD;

/** What the stack deploys: the function's memory and architecture, as serverless.yml sets them. */
export interface DeployedFunction {
  readonly memoryMb: number;
  readonly architecture: Architecture;
}

/**
 * The `provider` block's `memorySize` and `architecture` (Lambda's defaults, 1024 MB and
 * x86_64, where it sets none), so that the cost is stated for what is deployed. A line match,
 * not a YAML parser: the file's CloudFormation tags (`!GetAtt`) need a schema of their own.
 */
export const deployedFunction = (serverlessYml: string): DeployedFunction => {
  const provider = /^provider:\n((?:[ \t]+.*\n|\n)*)/m.exec(serverlessYml)?.[1] ?? '';
  const memory = /^ {2}memorySize: *(\d+)\s*$/m.exec(provider)?.[1];
  const architecture = /^ {2}architecture: *(\S+)\s*$/m.exec(provider)?.[1] ?? 'x86_64';
  if (!(architecture in LAMBDA_PRICE_PER_GB_SECOND_USD)) {
    throw new Error(`serverless.yml: unknown architecture '${architecture}'`);
  }
  return { memoryMb: memory ? Number(memory) : 1024, architecture: architecture as Architecture };
};

const DEPLOYED = deployedFunction(
  readFileSync(fileURLToPath(new URL('../serverless.yml', import.meta.url)), 'utf8'),
);
/** The memory the cost is stated for: the deployed function's (serverless.yml). */
export const MEMORY_MB = DEPLOYED.memoryMb;
export const ARCHITECTURE = DEPLOYED.architecture;
export const PRICE_PER_GB_SECOND_USD = LAMBDA_PRICE_PER_GB_SECOND_USD[ARCHITECTURE];

export interface IdleRunSpec {
  readonly name: 'idle-always-running' | 'idle-frozen' | 'idle-frozen-no-extension';
  readonly label: string;
  readonly execution: HotKeyResult['execution'];
  readonly env: Record<string, string>;
}

export const IDLE_RUNS: readonly IdleRunSpec[] = [
  {
    name: 'idle-always-running',
    label: 'always running, mostly idle',
    execution: 'always-running',
    env: {},
  },
  { name: 'idle-frozen', label: 'frozen, mostly idle', execution: 'frozen', env: {} },
  {
    name: 'idle-frozen-no-extension',
    label: 'frozen, mostly idle, BROKER_LAMBDA_EXTENSION=off',
    execution: 'frozen',
    env: { BROKER_LAMBDA_EXTENSION: 'off' },
  },
];

export interface IdleSettings {
  readonly containers: number;
  readonly durationMs: number;
  readonly lifetimeSeconds: number;
  readonly windowSeconds: number;
  readonly pauseMs: { readonly min: number; readonly max: number };
}

/** The work after the response, summed over a frozen run and divided among its refreshes. */
export interface AfterResponseCost {
  readonly invocations: number;
  readonly billedMs: number;
  readonly durationMs: number;
  /** Billed minus response duration, over every invocation of the run (ms). */
  readonly afterResponseMs: number;
  readonly keptThawed: number;
  readonly refreshes: number;
  /** ms of billed time after the response per refresh; null with no refresh in the run. */
  readonly perRefreshMs: number | null;
  /** The same at {@link PRICE_PER_GB_SECOND_USD} for {@link MEMORY_MB} MB (USD). */
  readonly perRefreshUsd: number | null;
}

export const afterResponseCost = (run: HotKeyResult): AfterResponseCost => {
  const { invocations, billedMs, durationMs, keptThawed } = run.billing;
  const afterResponseMs = billedMs - durationMs;
  const perRefreshMs = run.refreshes === 0 ? null : afterResponseMs / run.refreshes;
  return {
    invocations,
    billedMs,
    durationMs,
    afterResponseMs,
    keptThawed,
    refreshes: run.refreshes,
    perRefreshMs,
    perRefreshUsd:
      perRefreshMs === null
        ? null
        : (perRefreshMs / 1000) * (MEMORY_MB / 1024) * PRICE_PER_GB_SECOND_USD,
  };
};

export interface IdleRun extends IdleRunSpec {
  readonly result: HotKeyResult;
}

/** Each run on a stack of its own, one after the other (a shared machine: no overlap). */
export const runIdleFleets = async (
  startStack: () => Promise<Stack>,
  paths: { bundle: string; runner: string; bootstrap: string },
  env: Record<string, string>,
  settings: IdleSettings,
  log: (line: string) => void,
): Promise<IdleRun[]> => {
  const runs: IdleRun[] = [];
  for (const spec of IDLE_RUNS) {
    const stack = await startStack();
    try {
      log(
        `hot key: ${settings.containers} containers, ${spec.label}, ${settings.durationMs / 1000}s …`,
      );
      const result = await measureHotKey(stack, {
        ...paths,
        env: { ...stack.env, ...env, ...spec.env },
        execution: spec.execution,
        ...settings,
      });
      runs.push({ ...spec, result });
    } finally {
      await stack.close();
    }
  }
  return runs;
};

const ms = (value: number, digits = 0) => value.toFixed(digits);
const table = (head: string[], body: string[][]) =>
  [
    `| ${head.join(' | ')} |`,
    `|${head.map(() => '---').join('|')}|`,
    ...body.map((r) => `| ${r.join(' | ')} |`),
  ].join('\n');

/** The section of results.md: cold starts, the side-by-side runs, the billed time per refresh. */
export const executionModelMarkdown = ({
  cold,
  environmentCold,
  fleet,
  busy,
  idle,
  idleSettings,
  upstreamLatencyMs,
}: {
  cold: ColdCost;
  environmentCold: EnvironmentColdCost;
  fleet: FleetResult;
  busy: HotKeyResult;
  idle: readonly IdleRun[];
  idleSettings: IdleSettings;
  upstreamLatencyMs: number;
}): string => {
  const e = environmentCold;
  const variants: [string, EnvironmentCold][] = [
    ['broker, its extension registering', e.broker],
    ['broker, BROKER_LAMBDA_EXTENSION=off', e.brokerNoExtension],
    ['bare GetItem bundle', e.bare],
  ];
  const coldRows = variants.map(([label, c]) => [
    label,
    ms(c.initMedianMs, 1),
    ms(c.durationMedianMs, 1),
    ms(c.totalMedianMs, 1),
    `${(c.totalMedianMs / e.bare.totalMedianMs).toFixed(2)}×`,
  ]);
  coldRows.push([
    'in one process, as before (import + first token; broker vs bare)',
    `${ms(cold.brokerInitMedianMs, 1)} vs ${ms(cold.bareInitMedianMs, 1)}`,
    '',
    `${ms(cold.brokerMedianMs, 1)} vs ${ms(cold.bareMedianMs, 1)}`,
    `${cold.ratio.toFixed(2)}×`,
  ]);

  const columns: { label: string; run: HotKeyResult | FleetResult }[] = [
    { label: 'fleet run (always running, busy, killed)', run: fleet },
    { label: `hot key: always running, busy`, run: busy },
    ...idle.map(({ label, result }) => ({ label: `hot key: ${label}`, run: result })),
  ];
  const cell = (f: (run: HotKeyResult | FleetResult) => string) => columns.map((c) => f(c.run));
  const isHotKey = (run: HotKeyResult | FleetResult): run is HotKeyResult => 'execution' in run;
  const sideRows = [
    ['caller latency p50 (ms)', ...cell((r) => ms(r.latencyMs.p50, 1))],
    ['caller latency p99 (ms)', ...cell((r) => ms(r.latencyMs.p99, 1))],
    ['caller latency max (ms)', ...cell((r) => ms(r.latencyMs.max))],
    [
      'slowest caller at a cut-over, 5 s before to 1 s after an issuance (ms; callers)',
      ...cell((r) => `${ms(r.cutoverChaos.slowestMs)} (${r.cutoverChaos.callers})`),
    ],
    [
      'callers 1 s before to 200 ms after an issuance: p99 / max (ms)',
      ...cell((r) => (isHotKey(r) ? `${ms(r.cutover.p99Ms)} / ${ms(r.cutover.maxMs)}` : '')),
    ],
    [
      'refreshes that landed after their token expired',
      ...cell((r) => String(r.refreshesAfterExpiry)),
    ],
    [
      'issuances per token lifetime (issuances)',
      ...cell((r) => `${r.issuancesPerLifetime.toFixed(2)} (${r.issuances})`),
    ],
    [
      'requests (failed)',
      ...cell((r) => (isHotKey(r) ? `${r.requests} (${r.errors})` : `${r.served} (${r.errors})`)),
    ],
    [
      'tokens the upstream no longer accepted at receipt',
      ...cell((r) => String(isHotKey(r) ? r.invalidServed : r.revokedReceived)),
    ],
  ];

  const frozen = idle.filter(({ execution }) => execution === 'frozen');
  const costs = frozen.map(({ result }) => afterResponseCost(result));
  const usd = (value: number | null) =>
    value === null ? 'no refresh' : `$${value.toExponential(2)}`;
  const billedRows = [
    ['invocations', ...costs.map((c) => String(c.invocations))],
    ['billed duration, in all (ms)', ...costs.map((c) => ms(c.billedMs))],
    ['response duration, in all (ms)', ...costs.map((c) => ms(c.durationMs))],
    [
      'billed duration per invocation, mean (ms): a refresh left to later invocations is billed in them',
      ...costs.map((c) => ms(c.invocations === 0 ? 0 : c.billedMs / c.invocations, 1)),
    ],
    [
      'billed after the response (billed − response), in all (ms)',
      ...costs.map((c) => ms(c.afterResponseMs)),
    ],
    [
      'invocations whose environment stayed thawed ≥ 100 ms after answering',
      ...costs.map((c) => String(c.keptThawed)),
    ],
    ['refreshes (issuances after the first)', ...costs.map((c) => String(c.refreshes))],
    [
      '**billed after the response, per refresh (ms)**',
      ...costs.map((c) => (c.perRefreshMs === null ? 'no refresh' : ms(c.perRefreshMs))),
    ],
    [
      `the same at ${MEMORY_MB} MB ${ARCHITECTURE}, $${PRICE_PER_GB_SECOND_USD} per GB-s (USD per refresh)`,
      ...costs.map((c) => usd(c.perRefreshUsd)),
    ],
    [
      'the same per million refreshes (USD)',
      ...costs.map((c) =>
        c.perRefreshUsd === null ? '' : `$${(c.perRefreshUsd * 1e6).toFixed(2)}`,
      ),
    ],
  ];

  return [
    "## Lambda's execution model (issue 17)",
    '',
    `**Cold start in an emulated execution environment** (\`local/lambda-env/\`): init (the runtime process spawned, the bundle imported, its extension registered, until every process waits on \`next\`) plus the first invocation through the Runtime API, the token served from DynamoDB; a fresh environment each time, the three bundles alternating, median of ${e.rounds}:`,
    '',
    table(
      ['', 'init (ms)', 'first invocation (ms)', 'init + first invocation (ms)', 'vs bare'],
      coldRows,
    ),
    '',
    `**Hot key and cut-over, frozen and mostly idle** (\`bench/hot-key.ts\`): ${idleSettings.containers} containers on one item for ${idleSettings.durationMs / 1000}s each run, tokens living ${idleSettings.lifetimeSeconds}s, refresh window ${idleSettings.windowSeconds}s, memory re-check 5 s, no warm-up (refreshes start from requests), upstream ${upstreamLatencyMs} ms per request; each container invoked every ${idleSettings.pauseMs.min / 1000}–${idleSettings.pauseMs.max / 1000} s (uniform). Frozen: one execution environment per container, and a second while the first finishes its work after an answer (an \`EnvironmentPool\` of up to two, \`local/lambda-container.ts\`), SIGSTOPped between invocations. Next to them, the busy hot-key run above (a request every 5 ms per container, ${(busy.durationMs / 1000).toFixed(0)}s) and the fleet run (10 s tokens, its own settings):`,
    '',
    table(['', ...columns.map((c) => c.label)], sideRows),
    '',
    `**Billed time after the response per refresh** (the frozen runs above): each invocation's billed duration (delivery to the freeze, rounded up to 1 ms) minus its response duration (delivery to the runtime's response), summed over the run and divided by its refreshes. Price: $${PRICE_PER_GB_SECOND_USD} per GB-second (${ARCHITECTURE}, us-east-1, first tier), an assumption from the AWS Lambda pricing page as of 2026, for the ${MEMORY_MB} MB ${ARCHITECTURE} function serverless.yml deploys:`,
    '',
    table(['', ...frozen.map(({ label }) => label)], billedRows),
    '',
  ].join('\n');
};
