/**
 * How late an environment's event loop ran (issue 35, assumption A2: a pause between a check and
 * the act it guards is at most `proofMarginMs`, 100 ms). `perf_hooks.monitorEventLoopDelay`
 * cannot tell a freeze (SIGSTOP between invocations, seconds long) from a pause while the
 * function runs, and only the process that froze it knows when it did. So the runtime process
 * (`lambda-env/bootstrap.ts`) runs a timer every {@link SAMPLE_MS} ms once its init is done and
 * appends each gap longer than that by more than {@link RECORD_OVER_MS} to a file, on the
 * machine's monotonic clock (`process.hrtime`, CLOCK_MONOTONIC: the same in every process here);
 * the environment (`lambda-env/environment.ts`) records its freezes on that clock and, once the
 * process has ended, subtracts them: what is left is how late a timer ran while the environment
 * was meant to run (CPU quota, other load, a GC, an injected pause). The chaos harness subtracts
 * the pauses it injected as well, and reports the worst.
 */
import { appendFileSync, readFileSync } from 'node:fs';

/** The runtime's variable naming the file (not `BROKER_*`: the function refuses unknown ones). */
export const LOOP_DELAY_VARIABLE = 'LOCAL_LAMBDA_LOOP_DELAY_FILE';
/** The sampling timer's interval, ms. */
export const SAMPLE_MS = 10;
/** A gap is written when it exceeds the interval by more than this, ms. */
export const RECORD_OVER_MS = 5;

/** Milliseconds on CLOCK_MONOTONIC: comparable between the processes of one machine. */
export const monotonicMs = (): number => Number(process.hrtime.bigint()) / 1e6;

/** A span on {@link monotonicMs}'s clock. */
export interface Span {
  readonly from: number;
  readonly to: number;
}

/** One late timer: the gap it closed, and how late it ran outside the spans excluded. */
export interface LoopDelay extends Span {
  readonly delayMs: number;
}

/** Starts the sampler, writing to `file`; returns what stops it. The timer keeps nothing alive. */
export const startLoopDelaySampler = (file: string, intervalMs = SAMPLE_MS): (() => void) => {
  let last = monotonicMs();
  const timer = setInterval(() => {
    const now = monotonicMs();
    if (now - last > intervalMs + RECORD_OVER_MS) {
      try {
        appendFileSync(file, `${last.toFixed(1)} ${now.toFixed(1)}\n`);
      } catch {
        // The file went (the environment is ending): nothing to record into.
      }
    }
    last = now;
  }, intervalMs);
  timer.unref();
  return () => clearInterval(timer);
};

/** The gaps a sampler wrote (none if it wrote nothing). */
export const readGaps = (file: string): Span[] => {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch {
    return [];
  }
  return text
    .split('\n')
    .map((line) => line.split(' ').map(Number))
    .filter(
      (parts): parts is [number, number] =>
        parts.length === 2 && parts.every(Number.isFinite) && (parts[1] ?? 0) > (parts[0] ?? 0),
    )
    .map(([from, to]) => ({ from, to }));
};

/** `spans` merged where they overlap, in order. */
export const union = (spans: readonly Span[]): Span[] => {
  const sorted = spans.filter((s) => s.to > s.from).toSorted((a, b) => a.from - b.from);
  const merged: Span[] = [];
  for (const span of sorted) {
    const last = merged.at(-1);
    if (last && span.from <= last.to)
      merged[merged.length - 1] = { from: last.from, to: Math.max(last.to, span.to) };
    else merged.push(span);
  }
  return merged;
};

/** How much of `span` the (merged) `spans` cover, ms. */
export const covered = (span: Span, spans: readonly Span[]): number =>
  spans.reduce(
    (sum, s) => sum + Math.max(0, Math.min(span.to, s.to) - Math.max(span.from, s.from)),
    0,
  );

/**
 * Each gap's delay (its length less the interval) outside the `excluded` spans (freezes,
 * injected pauses); those still late by more than `overMs`, the latest first.
 */
export const netDelays = (
  gaps: readonly Span[],
  excluded: readonly Span[],
  {
    intervalMs = SAMPLE_MS,
    overMs = RECORD_OVER_MS,
  }: { intervalMs?: number; overMs?: number } = {},
): LoopDelay[] => {
  const spans = union(excluded);
  return gaps
    .map((gap) => ({ ...gap, delayMs: gap.to - gap.from - intervalMs - covered(gap, spans) }))
    .filter((d) => d.delayMs > overMs)
    .toSorted((a, b) => b.delayMs - a.delayMs);
};
