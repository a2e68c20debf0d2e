/**
 * The hot key: how many DynamoDB requests one busy container makes per second in each phase of
 * a token's life, measured on the real bundle. Busy containers (each serving a steady stream of
 * requests, as Lambda does one at a time) share one token item; the dynalite request counter is
 * sampled every 100 ms and each sample is put in the phase the current token was in:
 *
 *   before the window ─── the window (countdown announced) ─── cut-over (±1 s around an issuance)
 *
 * The cold start (every container racing for the first token, up to 1 s after it was issued)
 * happens once per fleet, not once per lifetime: it is reported on its own, as reads per
 * container in all, and left out of the phases and of the saturation figure.
 *
 * DynamoDB serves at most 3,000 strongly consistent reads per second from one item: the
 * busiest phase's rate says at how many busy containers that item saturates. The same run
 * times every caller, and reports the wait of those who arrived at a cut-over (from 1 s before
 * an issuance to 200 ms after it), to set against the upstream's own latency.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { type Container, startContainer, tokenOf } from '../local/fleet.js';
import type { Stack } from '../local/stack.js';
import { percentile } from './measures.js';

export interface HotKeySettings {
  readonly bundle: string;
  readonly runner: string;
  readonly env: Record<string, string>;
  readonly containers: number;
  readonly durationMs: number;
  readonly lifetimeSeconds: number;
  readonly windowSeconds: number;
}

export interface HotKeyPhase {
  /** Seconds of the run spent in this phase. */
  readonly seconds: number;
  /** DynamoDB reads per busy container per second in this phase (they grow with the fleet). */
  readonly readsPerContainerSecond: number;
  /** DynamoDB writes per second on the item in this phase (the lease holder's: they do not). */
  readonly writesPerSecond: number;
}

export interface HotKeyResult {
  readonly containers: number;
  readonly phases: Readonly<Record<'outside' | 'inside' | 'cutover', HotKeyPhase>>;
  /** The cold start, once per fleet: its length and the reads each container made in it. */
  readonly coldStart: { readonly seconds: number; readonly readsPerContainer: number };
  /** Busy containers at which the busiest phase's reads reach 3,000 per second on one item. */
  readonly containersToSaturate: number;
  /** Callers who arrived at a cut-over: how many, and their wait (ms). */
  readonly cutover: { readonly callers: number; readonly p99Ms: number; readonly maxMs: number };
  /** Every caller of the run (ms). */
  readonly latencyMs: { readonly p99: number; readonly max: number };
}

const ITEM_READS_PER_SECOND = 3_000;
const SAMPLE_MS = 100;

export const measureHotKey = async (
  stack: Stack,
  settings: HotKeySettings,
): Promise<HotKeyResult> => {
  const containers: Container[] = [];
  try {
    for (let i = 0; i < settings.containers; i += 1) {
      containers.push(
        await startContainer({
          runner: settings.runner,
          bundle: settings.bundle,
          env: settings.env,
        }),
      );
    }
    const start = Date.now();
    const end = start + settings.durationMs;
    const issuedBefore = stack.simulator.issuanceTimes().length;
    const samples: { at: number; requests: number; reads: number }[] = [];
    const calls: { at: number; took: number }[] = [];
    const busy = containers.map(async (container) => {
      while (Date.now() < end) {
        const at = performance.timeOrigin + performance.now();
        tokenOf(await container.invoke({ action: 'getToken', connection: 'sandbox' }));
        calls.push({ at, took: performance.timeOrigin + performance.now() - at });
        await sleep(5);
      }
    });
    while (Date.now() < end) {
      samples.push({
        at: Date.now(),
        requests: stack.dynamodb.requests(),
        reads: stack.dynamodb.reads(),
      });
      await sleep(SAMPLE_MS);
    }
    await Promise.all(busy);
    const issuances = stack.simulator.issuanceTimes().slice(issuedBefore);
    const lifetimeMs = settings.lifetimeSeconds * 1000;
    const windowMs = Math.min(settings.windowSeconds * 1000, lifetimeMs / 2);
    const first = issuances[0];
    const phaseAt = (at: number): 'cold' | 'outside' | 'inside' | 'cutover' => {
      if (first === undefined || at <= first + 1_000) return 'cold';
      if (issuances.some((issued) => Math.abs(at - issued) <= 1_000)) return 'cutover';
      const current = issuances.filter((issued) => issued <= at).at(-1) ?? first;
      return current + lifetimeMs - at <= windowMs ? 'inside' : 'outside';
    };
    const totals = {
      cold: { ms: 0, reads: 0, writes: 0 },
      outside: { ms: 0, reads: 0, writes: 0 },
      inside: { ms: 0, reads: 0, writes: 0 },
      cutover: { ms: 0, reads: 0, writes: 0 },
    };
    for (let i = 1; i < samples.length; i += 1) {
      const [before, after] = [samples[i - 1], samples[i]];
      if (!before || !after) continue;
      const phase = totals[phaseAt(before.at)];
      phase.ms += after.at - before.at;
      const reads = after.reads - before.reads;
      phase.reads += reads;
      phase.writes += after.requests - before.requests - reads;
    }
    const rate = ({ ms, reads, writes }: (typeof totals)['outside']): HotKeyPhase => ({
      seconds: ms / 1000,
      readsPerContainerSecond: ms === 0 ? 0 : reads / (ms / 1000) / settings.containers,
      writesPerSecond: ms === 0 ? 0 : writes / (ms / 1000),
    });
    const phases = {
      outside: rate(totals.outside),
      inside: rate(totals.inside),
      cutover: rate(totals.cutover),
    };
    const busiest = Math.max(...Object.values(phases).map((p) => p.readsPerContainerSecond));
    // The first issuance is the cold start, not a cut-over.
    const cutovers = issuances.slice(1);
    const atCutover = calls
      .filter(({ at }) => cutovers.some((issued) => at >= issued - 1_000 && at <= issued + 200))
      .map(({ took }) => took);
    const all = calls.map(({ took }) => took);
    return {
      containers: settings.containers,
      phases,
      coldStart: {
        seconds: totals.cold.ms / 1000,
        readsPerContainer: totals.cold.reads / settings.containers,
      },
      containersToSaturate:
        busiest === 0 ? Number.POSITIVE_INFINITY : ITEM_READS_PER_SECOND / busiest,
      cutover: {
        callers: atCutover.length,
        p99Ms: percentile(atCutover, 99),
        maxMs: percentile(atCutover, 100),
      },
      latencyMs: { p99: percentile(all, 99), max: percentile(all, 100) },
    };
  } finally {
    await Promise.all(containers.map((c) => c.kill('SIGKILL')));
  }
};
