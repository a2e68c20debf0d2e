/** The chaos table: one markdown row per scenario, summed over its runs. */
import type { RunResult } from './harness.js';
import { marginCells, tightest } from './margins.js';

export interface ScenarioSummary {
  readonly scenario: string;
  readonly runs: readonly RunResult[];
  /** Set when the harness broke on this scenario (then the figures are incomplete). */
  readonly harnessError?: string;
}

const sum = (runs: readonly RunResult[], pick: (run: RunResult) => number) =>
  runs.reduce((total, run) => total + pick(run), 0);

const fmt = (value: number, digits = 2) =>
  Number.isInteger(value) ? String(value) : value.toFixed(digits);

export const HEADER = [
  'fault',
  'runs',
  'fired',
  'answers',
  'issuances (per lifetime)',
  'duplicate issuances',
  'refreshes after expiry',
  'slowest at a cut-over (s)',
  'revoked served (before request)',
  'revoked during request',
  'expired served',
  'not answered in time (on faulted container)',
  'answer p99 / max (s)',
  'broker errors',
  'reuse grants past revocation (of grants; reported tokens apart)',
  'conflicts (regions)',
  'max wait outside a fault (s)',
];

export const row = (summary: ScenarioSummary): string[] => {
  const { runs } = summary;
  if (runs.length === 0) {
    return [summary.scenario, '0', '—', `harness error: ${summary.harnessError ?? 'unknown'}`];
  }
  const issuances = sum(runs, (r) => r.issuances);
  const perLifetime = sum(runs, (r) => r.issuancesPerLifetime) / runs.length;
  const revoked = sum(runs, (r) => r.tally.revokedBeforeRequest);
  const served = sum(runs, (r) => r.tally.served);
  const errors: Record<string, number> = {};
  for (const run of runs) {
    for (const [type, count] of Object.entries(run.tally.errors)) {
      errors[type] = (errors[type] ?? 0) + count;
    }
  }
  const errorText =
    Object.entries(errors)
      .sort((a, b) => b[1] - a[1])
      .map(([type, count]) => `${count} ${type}`)
      .join(', ') || '0';
  const spans = runs
    .filter((r) => r.tally.firstRevokedAtMs !== null)
    .map(
      (r) =>
        `${fmt((r.tally.firstRevokedAtMs ?? 0) / 1000, 1)}–${fmt((r.tally.lastRevokedAtMs ?? 0) / 1000, 1)} s`,
    );
  return [
    summary.scenario + (summary.harnessError ? ' (harness error in a run)' : ''),
    String(runs.length),
    String(sum(runs, (r) => r.faultsInjected)),
    String(served),
    `${issuances} (${fmt(perLifetime)})`,
    String(sum(runs, (r) => r.duplicateIssuances)),
    String(sum(runs, (r) => r.refreshesAfterExpiry ?? 0)),
    fmt(Math.max(...runs.map((r) => r.slowestAtCutOverMs ?? 0)) / 1000),
    revoked === 0
      ? '0'
      : `**${revoked}** (${((100 * revoked) / Math.max(1, served)).toFixed(1)}%, at ${spans.join('; ')})`,
    String(sum(runs, (r) => r.tally.revokedDuringRequest)),
    String(sum(runs, (r) => r.tally.expired)),
    `${sum(runs, (r) => r.tally.unanswered)} (${sum(runs, (r) => r.tally.unansweredOnFaulted)})`,
    `${fmt(Math.max(...runs.map((r) => r.tally.latencyMs.p99)) / 1000)} / ${fmt(Math.max(...runs.map((r) => r.tally.latencyMs.max)) / 1000)}`,
    errorText,
    reuseText(runs),
    runs.some((r) => r.regions)
      ? String(sum(runs, (r) => (r.regions ?? []).reduce((n, region) => n + region.conflicts, 0)))
      : '—',
    fmt(Math.max(...runs.map((r) => r.maxWaitOutsideFaultMs ?? 0)) / 1000),
  ];
};

/** The `maxAgeMs` grants that outlived their token, as the table shows them. */
const reuseText = (runs: readonly RunResult[]): string => {
  const past = sum(runs, (r) => r.reuse.pastRevocation);
  const grants = sum(runs, (r) => r.reuse.grants);
  const reported = sum(runs, (r) => r.reuse.pastRevocationReported);
  const overrun = Math.max(...runs.map((r) => r.reuse.maxOverrunMs));
  const head = past === 0 ? '0' : `**${past}** (up to ${fmt(overrun / 1000)} s)`;
  return `${head} of ${grants}${reported > 0 ? `; ${reported} reported` : ''}`;
};

export const table = (summaries: readonly ScenarioSummary[]): string => {
  const lines = [
    `| ${HEADER.join(' | ')} |`,
    `|${HEADER.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
    ...summaries.map((s) => `| ${row(s).join(' | ')} |`),
  ];
  return `${lines.join('\n')}\n`;
};

export const MARGINS_HEADER = [
  'fault',
  'A1: latest POST processed after its send',
  'A2: worst event-loop delay (outside freezes and injected pauses)',
  'A3: clock skew between containers',
  'A4: slowest DynamoDB round trip',
  'CPU: environments at the share, periods throttled',
];

/**
 * How close each scenario came to each timing assumption of docs/protocol.md (the tightest of
 * its runs; chaos/margins.ts), and what the CPU quota did.
 */
export const marginsTable = (summaries: readonly ScenarioSummary[]): string => {
  const rows = summaries.flatMap((summary) => {
    const margins = tightest(summary.runs.flatMap((r) => (r.margins ? [r.margins] : [])));
    if (!margins) return [];
    const cpus = summary.runs.flatMap((r) => (r.cpu ? [r.cpu] : []));
    const environments = cpus.reduce((n, c) => n + c.environments, 0);
    const atShare = cpus.reduce((n, c) => n + c.atShare, 0);
    const periods = cpus.reduce((n, c) => n + c.throttling.periods, 0);
    const throttled = cpus.reduce((n, c) => n + c.throttling.throttledPeriods, 0);
    const cpu =
      atShare === 0
        ? `0 of ${environments} (whole cores)`
        : `${atShare} of ${environments}; ${throttled} of ${periods} (${((100 * throttled) / Math.max(1, periods)).toFixed(0)} %)`;
    return [`| ${[summary.scenario, ...marginCells(margins), cpu].join(' | ')} |`];
  });
  const lines = [
    `| ${MARGINS_HEADER.join(' | ')} |`,
    `|${MARGINS_HEADER.map((_, i) => (i === 0 ? '---' : '---:')).join('|')}|`,
    ...rows,
  ];
  return `${lines.join('\n')}\n`;
};

/**
 * Runs whose fault never fired, in scenarios that inject one (an `install` or an `extra`
 * caller): such a run checked nothing, so `--check` fails on it as on a violation. A trigger
 * whose step no longer comes in the run's time (a shorter run, a changed flow) shows here.
 */
export const faultsNotFired = (
  summaries: readonly ScenarioSummary[],
  injectsFault: (scenario: string) => boolean,
): string[] =>
  summaries.flatMap(({ scenario, runs }) =>
    injectsFault(scenario)
      ? runs.flatMap((run, index) =>
          run.faultsInjected > 0 ? [] : [`${scenario} #${index + 1}: its fault never fired`],
        )
      : [],
  );
