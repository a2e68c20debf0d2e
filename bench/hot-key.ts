/**
 * The hot key: how many DynamoDB requests one container makes per second in each phase of a
 * token's life, measured on the real bundle. Containers (each serving a stream of requests, as
 * Lambda does one at a time) share one token item; the dynalite request counter is sampled
 * every 100 ms and each sample is put in the phase the current token was in:
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
 *
 * Issue 17 runs the same measurement on containers that are mostly idle (a request every
 * `pauseMs`, 0.3–1.5 s) and either always running or frozen between invocations (Lambda's
 * model, `execution`): besides, every run reports the slowest caller at a cut-over as the chaos
 * suite counts it (a request sent from 5 s before a refresh's issuance to 1 s after it),
 * refreshes that landed after their token expired, issuances per lifetime, and (frozen) the
 * billed time after the response.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import { DynamoDBClient } from '@aws-sdk/client-dynamodb';
import { DynamoDBTokenStore } from '../lib/adapters/dynamodb-token-store.js';
import { tokenOf } from '../local/fleet.js';
import {
  type Billing,
  type Execution,
  type LambdaContainer,
  startLambdaContainer,
} from '../local/lambda-container.js';
import type { Stack } from '../local/stack.js';
import {
  CHAOS_CUT_OVER,
  itemLoad,
  percentile,
  refreshesAfterExpiry,
  slowestPerContainerAtCutOver,
  waitsAtCutOver,
} from './measures.js';

export interface HotKeySettings {
  readonly bundle: string;
  readonly runner: string;
  /** `local/lambda-env/bootstrap.mjs`, for frozen containers. */
  readonly bootstrap: string;
  readonly env: Record<string, string>;
  readonly execution: Execution;
  readonly containers: number;
  readonly durationMs: number;
  readonly lifetimeSeconds: number;
  readonly windowSeconds: number;
  /** Each container's pause between an answer and its next request, uniform in [min, max]. */
  readonly pauseMs: { readonly min: number; readonly max: number };
  /** Read copies of the token item, set by the operator's action before the run (ADR 0024). */
  readonly copies?: number;
}

export interface HotKeyPhase {
  /** Seconds of the run spent in this phase. */
  readonly seconds: number;
  /** DynamoDB reads per container per second in this phase (they grow with the fleet). */
  readonly readsPerContainerSecond: number;
  /**
   * The same, on the busiest item alone: the hot key. With read copies (docs/adr/0024) the
   * reads spread over the main item and its copies; with none it is every read.
   */
  readonly busiestItemReadsPerContainerSecond: number;
  /**
   * One item's load at scale: the main item's reads (each container's first, and its falls
   * back), or the copies' reads divided by their number, whichever is more. A reader picks a
   * copy at random per read, so over thousands of containers each copy takes its share; over
   * the run's 4 containers and a phase of seconds, the busiest copy is the largest of K draws
   * of a few dozen reads, above its share by chance (`busiestItemReadsPerContainerSecond`).
   */
  readonly perItemReadsPerContainerSecond: number;
  /** Items read in this phase (1 + the copies read). */
  readonly itemsRead: number;
  /** Reads per busy container-second on each item read in this phase, by its key. */
  readonly byItem: Readonly<Record<string, number>>;
  /** DynamoDB writes per second on the item in this phase (the lease holder's: they do not). */
  readonly writesPerSecond: number;
}

export interface HotKeyResult {
  readonly execution: Execution;
  readonly containers: number;
  /** Read copies of the token item in the run (0: the main item alone). */
  readonly copies: number;
  readonly pauseMs: { readonly min: number; readonly max: number };
  readonly durationMs: number;
  readonly phases: Readonly<Record<'outside' | 'inside' | 'cutover', HotKeyPhase>>;
  /** The cold start, once per fleet: its length and the reads each container made in it. */
  readonly coldStart: { readonly seconds: number; readonly readsPerContainer: number };
  /** Containers at which the busiest phase's reads reach 3,000 per second on one item. */
  readonly containersToSaturate: number;
  /**
   * Callers who arrived at a cut-over: how many, and their wait (ms). The p99 is close to a coin
   * toss (about one caller per container and cut-over waits for the successor: 8 of about 800);
   * `slowestPerContainer` is each container's slowest caller per cut-over, its median and max.
   */
  readonly cutover: {
    readonly callers: number;
    readonly p99Ms: number;
    readonly maxMs: number;
    readonly slowestPerContainer: { readonly count: number; readonly p50Ms: number };
  };
  /** The chaos suite's figure: the slowest request sent 5 s before to 1 s after a refresh (ms). */
  readonly cutoverChaos: { readonly callers: number; readonly slowestMs: number };
  /** Every caller of the run (ms). */
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  readonly requests: number;
  /** Requests answered with an error (a function error, or no answer). */
  readonly errors: number;
  /** Tokens the upstream no longer accepted when they were received. */
  readonly invalidServed: number;
  readonly issuances: number;
  /** When each issuance came, ms after the run's start. */
  readonly issuanceTimesMs: readonly number[];
  /** Issuances after the fleet's first token. */
  readonly refreshes: number;
  readonly issuancesPerLifetime: number;
  /**
   * Refreshes that landed after the token they replace had expired: an issuance more than a
   * lifetime after the one before, or a token left to expire before the run's end.
   */
  readonly refreshesAfterExpiry: number;
  /** Frozen containers: the billed time of every invocation, once each had frozen. */
  readonly billing: Billing;
}

/** The operator's action on the stack's table: `npm run copies` does the same (ADR 0024). */
export const setCopies = async (stack: Stack, connection: string, copies: number) => {
  const client = new DynamoDBClient({
    endpoint: stack.dynamodb.url,
    region: 'us-east-1',
    credentials: { accessKeyId: 'test', secretAccessKey: 'test' },
  });
  try {
    await new DynamoDBTokenStore(client, stack.tableName).setCopies(connection, copies);
  } finally {
    client.destroy();
  }
};

/** DynamoDB's strongly consistent reads per second from one item. */
export const ITEM_READS_PER_SECOND = 3_000;
const SAMPLE_MS = 100;

/** The broker's settings in the hot-key runs: production's, but for the window. */
export const hotKeyEnv = (windowSeconds: number) => ({
  BROKER_REFRESH_WINDOW_SECONDS: String(windowSeconds),
  BROKER_DEFAULT_MIN_VALIDITY_SECONDS: '1',
  POWERTOOLS_LOG_LEVEL: 'WARN',
});

/**
 * The hot key, in production's proportions: the default 5 s memory re-check (a window of at
 * least 20 s keeps it whole), no kills, no warm-up (refresh ahead on demand), busy containers.
 */
export const hotKeySettingsFor = (quick: boolean, durationMs = quick ? 20_000 : 60_000) => ({
  containers: 4,
  durationMs,
  lifetimeSeconds: 40,
  windowSeconds: 20,
});

export const measureHotKey = async (
  stack: Stack,
  settings: HotKeySettings,
): Promise<HotKeyResult> => {
  const containers: LambdaContainer[] = [];
  if (settings.copies) await setCopies(stack, 'sandbox', settings.copies);
  try {
    for (let i = 0; i < settings.containers; i += 1) {
      const container = await startLambdaContainer({
        execution: settings.execution,
        runner: settings.runner,
        bootstrap: settings.bootstrap,
        bundle: settings.bundle,
        env: settings.env,
        // One environment, and a second while the first finishes its work after an answer
        // (Lambda gives a busy environment no invocation).
        maxEnvironments: 2,
        outputTail: 4096,
      });
      containers.push(container);
      // Initialised and invoked once (a store read, no token) before the run, whichever the
      // execution: a frozen environment starts only at its first invocation.
      const status = await container.invoke({ action: 'status' });
      if (!status.ok) {
        throw new Error(
          `status: ${status.errorType}: ${status.errorMessage}\n${container.output()}`,
        );
      }
    }
    const start = Date.now();
    const end = start + settings.durationMs;
    const issuedBefore = stack.simulator.issuanceTimes().length;
    const samples: {
      at: number;
      requests: number;
      reads: number;
      byItem: ReadonlyMap<string, number>;
    }[] = [];
    const calls: { container: number; at: number; took: number }[] = [];
    let errors = 0;
    let invalidServed = 0;
    const { min, max } = settings.pauseMs;
    const loops = containers.map(async (container, index) => {
      while (Date.now() < end) {
        const at = performance.timeOrigin + performance.now();
        const outcome = await container
          .invoke({ action: 'getToken', connection: 'sandbox' })
          .catch((error: Error) => ({
            ok: false as const,
            errorType: error.name,
            errorMessage: '',
          }));
        calls.push({ container: index, at, took: performance.timeOrigin + performance.now() - at });
        if (!outcome.ok) errors += 1;
        else if (!stack.simulator.isValid(tokenOf(outcome))) invalidServed += 1;
        await sleep(min + Math.random() * (max - min));
      }
    });
    while (Date.now() < end) {
      samples.push({
        at: Date.now(),
        requests: stack.dynamodb.requests(),
        reads: stack.dynamodb.reads(),
        byItem: stack.dynamodb.readsByItem(),
      });
      await sleep(SAMPLE_MS);
    }
    await Promise.all(loops);
    const endedAt = Date.now();
    // The status invocation before the run aside.
    const billings = await Promise.all(containers.map((c) => c.settledBilling(1)));
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
      cold: { ms: 0, reads: 0, writes: 0, byItem: new Map<string, number>() },
      outside: { ms: 0, reads: 0, writes: 0, byItem: new Map<string, number>() },
      inside: { ms: 0, reads: 0, writes: 0, byItem: new Map<string, number>() },
      cutover: { ms: 0, reads: 0, writes: 0, byItem: new Map<string, number>() },
    };
    for (let i = 1; i < samples.length; i += 1) {
      const [before, after] = [samples[i - 1], samples[i]];
      if (!before || !after) continue;
      const phase = totals[phaseAt(before.at)];
      phase.ms += after.at - before.at;
      const reads = after.reads - before.reads;
      phase.reads += reads;
      phase.writes += after.requests - before.requests - reads;
      for (const [item, count] of after.byItem) {
        const added = count - (before.byItem.get(item) ?? 0);
        if (added > 0) phase.byItem.set(item, (phase.byItem.get(item) ?? 0) + added);
      }
    }
    const perContainerSecond = (ms: number, reads: number) =>
      ms === 0 ? 0 : reads / (ms / 1000) / settings.containers;
    const copies = settings.copies ?? 0;
    const rate = ({ ms, reads, writes, byItem }: (typeof totals)['outside']): HotKeyPhase => ({
      seconds: ms / 1000,
      readsPerContainerSecond: perContainerSecond(ms, reads),
      busiestItemReadsPerContainerSecond: perContainerSecond(ms, Math.max(0, ...byItem.values())),
      perItemReadsPerContainerSecond: perContainerSecond(ms, itemLoad(byItem, copies)),
      itemsRead: byItem.size,
      byItem: Object.fromEntries(
        [...byItem].map(([item, count]) => [
          item,
          Number(perContainerSecond(ms, count).toFixed(3)),
        ]),
      ),
      writesPerSecond: ms === 0 ? 0 : writes / (ms / 1000),
    });
    const phases = {
      outside: rate(totals.outside),
      inside: rate(totals.inside),
      cutover: rate(totals.cutover),
    };
    // The item's capacity is per item: one item's load at scale in the busiest phase.
    const busiest = Math.max(...Object.values(phases).map((p) => p.perItemReadsPerContainerSecond));
    // The first issuance is the cold start, not a cut-over.
    const cutOverWindow = { beforeMs: 1_000, afterMs: 200 };
    const atCutover = waitsAtCutOver(calls, issuances, cutOverWindow);
    const slowest = slowestPerContainerAtCutOver(calls, issuances, cutOverWindow);
    const atCutoverChaos = waitsAtCutOver(calls, issuances, CHAOS_CUT_OVER);
    const all = calls.map(({ took }) => took);
    const durationMs = endedAt - start;
    return {
      execution: settings.execution,
      containers: settings.containers,
      copies: settings.copies ?? 0,
      pauseMs: settings.pauseMs,
      durationMs,
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
        slowestPerContainer: { count: slowest.length, p50Ms: percentile(slowest, 50) },
      },
      cutoverChaos: { callers: atCutoverChaos.length, slowestMs: percentile(atCutoverChaos, 100) },
      latencyMs: {
        p50: percentile(all, 50),
        p99: percentile(all, 99),
        max: percentile(all, 100),
      },
      requests: calls.length,
      errors,
      invalidServed,
      issuances: issuances.length,
      issuanceTimesMs: issuances.map((at) => at - start),
      refreshes: Math.max(0, issuances.length - 1),
      issuancesPerLifetime: issuances.length / (durationMs / lifetimeMs),
      refreshesAfterExpiry: refreshesAfterExpiry(issuances, lifetimeMs, endedAt),
      billing: billings.reduce(
        (total, b) => ({
          invocations: total.invocations + b.invocations,
          durationMs: total.durationMs + b.durationMs,
          billedMs: total.billedMs + b.billedMs,
          keptThawed: total.keptThawed + b.keptThawed,
        }),
        { invocations: 0, durationMs: 0, billedMs: 0, keptThawed: 0 },
      ),
    };
  } finally {
    await Promise.all(containers.map((c) => c.close()));
  }
};

export interface ColdStartSettings {
  readonly bundle: string;
  readonly runner: string;
  readonly bootstrap: string;
  /** The broker's settings (the stack's own are added to them). */
  readonly env: Record<string, string>;
  readonly containers: number;
  readonly rounds: number;
  /** Each container's first request comes uniformly within this many ms of the round's start. */
  readonly spreadMs: number;
  readonly lifetimeSeconds: number;
  readonly upstreamLatencyMs: number;
  /** Read copies of the token item, set before the containers start (ADR 0024). */
  readonly copies?: number;
}

export interface ColdStartResult {
  readonly containers: number;
  readonly rounds: number;
  readonly spreadMs: number;
  /** Reads of the item per container, from its first request to its first token (mean). */
  readonly readsPerColdStart: number;
  /** The same, in the round that read most. */
  readonly readsPerColdStartMax: number;
  /** Reads of the busiest item per container (mean): with read copies, below the reads in all. */
  readonly busiestItemReadsPerColdStart: number;
  /** The same, round by round. */
  readonly readsPerRound: readonly number[];
  /** How long the first requests took (ms). */
  readonly firstTokenMs: { readonly p50: number; readonly max: number };
  /** Requests answered with an error. */
  readonly errors: number;
}

/**
 * A fleet's cold start, repeated: each round is a fresh item and fresh containers (started and
 * invoked once for their status, which reads the item, before the round), whose first requests
 * come within `spreadMs` of each other; the item's reads are counted until every one of them
 * has its token. 0 ms is every container racing for the missing token at once (the worst case
 * per container); a second is the "1,000 containers starting within one second".
 */
export const measureColdStarts = async (
  startStack: (lifetimeSeconds: number, upstreamLatencyMs: number) => Promise<Stack>,
  settings: ColdStartSettings,
): Promise<ColdStartResult> => {
  const perRound: number[] = [];
  const busiestPerRound: number[] = [];
  const firstTokenMs: number[] = [];
  let errors = 0;
  for (let round = 0; round < settings.rounds; round += 1) {
    const stack = await startStack(settings.lifetimeSeconds, settings.upstreamLatencyMs);
    const containers: LambdaContainer[] = [];
    if (settings.copies) await setCopies(stack, 'sandbox', settings.copies);
    try {
      for (let i = 0; i < settings.containers; i += 1) {
        const container = await startLambdaContainer({
          execution: 'always-running',
          runner: settings.runner,
          bootstrap: settings.bootstrap,
          bundle: settings.bundle,
          env: { ...stack.env, ...settings.env },
          maxEnvironments: 2,
          outputTail: 4096,
        });
        containers.push(container);
        const status = await container.invoke({ action: 'status' });
        if (!status.ok) throw new Error(`status: ${status.errorType}\n${container.output()}`);
      }
      const before = stack.dynamodb.reads();
      const itemsBefore = stack.dynamodb.readsByItem();
      await Promise.all(
        containers.map(async (container) => {
          await sleep(Math.random() * settings.spreadMs);
          const at = performance.now();
          const outcome = await container
            .invoke({ action: 'getToken', connection: 'sandbox' })
            .catch(() => ({ ok: false as const }));
          firstTokenMs.push(performance.now() - at);
          if (!outcome.ok) errors += 1;
        }),
      );
      perRound.push((stack.dynamodb.reads() - before) / settings.containers);
      const items = [...stack.dynamodb.readsByItem()].map(
        ([item, count]) => count - (itemsBefore.get(item) ?? 0),
      );
      busiestPerRound.push(Math.max(0, ...items) / settings.containers);
    } finally {
      await Promise.all(containers.map((c) => c.close()));
      await stack.close();
    }
  }
  return {
    containers: settings.containers,
    rounds: settings.rounds,
    spreadMs: settings.spreadMs,
    readsPerColdStart: perRound.reduce((a, b) => a + b, 0) / Math.max(1, perRound.length),
    readsPerColdStartMax: Math.max(0, ...perRound),
    busiestItemReadsPerColdStart:
      busiestPerRound.reduce((a, b) => a + b, 0) / Math.max(1, busiestPerRound.length),
    readsPerRound: perRound,
    firstTokenMs: { p50: percentile(firstTokenMs, 50), max: percentile(firstTokenMs, 100) },
    errors,
  };
};
