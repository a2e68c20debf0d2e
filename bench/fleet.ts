/**
 * Fleet simulation: up to `maxContainers` emulated Lambda containers (separate processes running
 * a real bundle), each serving one invocation at a time as Lambda does: a request that finds no
 * idle container starts a new one (a cold start) while below the cap, else queues. Containers
 * are killed at random during the run. `callers` loops ask for a token, check at receipt whether
 * the upstream still accepts it, and report it with `invalidate` when not, as callers do on a 401.
 * In broker mode the scheduled warm-up runs on the fleet like any invocation.
 */

import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { tokenOf } from '../local/fleet.js';
import {
  type LambdaContainer as Container,
  startLambdaContainer,
} from '../local/lambda-container.js';
import { type InvokeOutcome, scheduledEvent } from '../local/lambda-events.js';
import type { Stack } from '../local/stack.js';
import { CHAOS_CUT_OVER, percentile, refreshesAfterExpiry, waitsAtCutOver } from './measures.js';

export interface FleetSettings {
  readonly mode: 'broker' | 'baseline';
  readonly bundle: string;
  readonly runner: string;
  readonly env: Record<string, string>;
  /** More environment for the n-th container started (a region's store endpoint). */
  readonly envFor?: ((n: number) => Record<string, string>) | undefined;
  readonly durationMs: number;
  readonly lifetimeSeconds: number;
  readonly maxContainers: number;
  readonly callers: number;
  readonly thinkMs: number;
  readonly killEveryMs: number;
  readonly scheduleEveryMs: number;
  readonly bucketMs: number;
}

export interface Bucket {
  readonly t: number;
  issuances: number;
  served: number;
  revoked: number;
  latencies: number[];
}

export interface FleetResult {
  readonly mode: 'broker' | 'baseline';
  readonly durationMs: number;
  readonly issuances: number;
  readonly issuancesPerLifetime: number;
  readonly served: number;
  readonly revokedReceived: number;
  readonly errors: number;
  readonly latencyMs: { readonly p50: number; readonly p99: number; readonly max: number };
  /**
   * The chaos suite's cut-over figure: the slowest token served to a request sent from 5 s
   * before a refresh's issuance to 1 s after it (ms), and how many such requests.
   */
  readonly cutoverChaos: { readonly callers: number; readonly slowestMs: number };
  /** Issuances more than a lifetime after the one before (or a token left to expire). */
  readonly refreshesAfterExpiry: number;
  readonly dynamodbRequests: number;
  readonly dynamodbRequestsPerServedToken: number;
  readonly containersStarted: number;
  readonly containersKilled: number;
  readonly timeline: readonly {
    t: number;
    issuances: number;
    served: number;
    revoked: number;
    p50: number;
    p99: number;
  }[];
}

class Fleet {
  readonly idle: Container[] = [];
  readonly busy = new Set<Container>();
  readonly waiters: ((container: Container) => void)[] = [];
  starting = 0;
  started = 0;
  killed = 0;
  constructor(private readonly settings: FleetSettings) {}

  get live() {
    return this.idle.length + this.busy.size + this.starting;
  }

  async acquire(): Promise<Container> {
    const idle = this.idle.pop();
    if (idle) {
      this.busy.add(idle);
      return idle;
    }
    if (this.live < this.settings.maxContainers) {
      const n = this.started + this.starting;
      this.starting += 1;
      try {
        // Always running, as this run was measured: Lambda's scaling and losses, not its freezing.
        const container = await startLambdaContainer({
          execution: 'always-running',
          runner: this.settings.runner,
          bundle: this.settings.bundle,
          env: { ...this.settings.env, ...this.settings.envFor?.(n) },
        });
        this.started += 1;
        this.all.push(container);
        this.busy.add(container);
        return container;
      } finally {
        this.starting -= 1;
      }
    }
    return new Promise((resolve) => this.waiters.push(resolve));
  }

  release(container: Container) {
    if (!this.busy.delete(container)) return; // killed meanwhile
    const waiter = this.waiters.shift();
    if (waiter) {
      this.busy.add(container);
      waiter(container);
    } else {
      this.idle.push(container);
    }
  }

  /** Lambda recycles or loses containers at any time, busy or not. */
  killOne() {
    const all = [...this.idle, ...this.busy];
    const victim = all[Math.floor(Math.random() * all.length)];
    if (!victim) return;
    const index = this.idle.indexOf(victim);
    if (index >= 0) this.idle.splice(index, 1);
    this.busy.delete(victim);
    this.killed += 1;
    void victim.close();
    // A queued request would otherwise wait for a release that may never come: start a
    // replacement for it, as Lambda would.
    const waiter = this.waiters.shift();
    if (waiter) void this.acquire().then(waiter);
  }

  async invoke(event: unknown): Promise<InvokeOutcome> {
    const container = await this.acquire();
    try {
      return await container.invoke(event);
    } finally {
      this.release(container);
    }
  }

  readonly all: Container[] = [];

  async close() {
    await Promise.all([...this.idle, ...this.busy].map((c) => c.close()));
  }
}

export const runFleet = async (stack: Stack, settings: FleetSettings): Promise<FleetResult> => {
  const fleet = new Fleet(settings);
  const start = Date.now();
  const end = start + settings.durationMs;
  const issuedBefore = stack.simulator.issuanceTimes().length;
  const dynamodbBefore = stack.dynamodb.requests();
  const buckets: Bucket[] = Array.from(
    { length: Math.ceil(settings.durationMs / settings.bucketMs) },
    (_, i) => ({
      t: (i * settings.bucketMs) / 1000,
      issuances: 0,
      served: 0,
      revoked: 0,
      latencies: [],
    }),
  );
  const bucketAt = (time: number) =>
    buckets[Math.min(buckets.length - 1, Math.floor((time - start) / settings.bucketMs))];
  const latencies: number[] = [];
  const sent: { at: number; took: number }[] = [];
  let served = 0;
  let revoked = 0;
  let errors = 0;

  const caller = async () => {
    while (Date.now() < end) {
      const asked = performance.now();
      const at = performance.timeOrigin + asked;
      let outcome: InvokeOutcome;
      try {
        outcome = await fleet.invoke({ action: 'getToken', connection: 'sandbox' });
      } catch {
        errors += 1; // the container died under the request
        continue;
      }
      const took = performance.now() - asked;
      const bucket = bucketAt(Date.now());
      if (!outcome.ok) {
        errors += 1;
      } else {
        const token = tokenOf(outcome);
        served += 1;
        latencies.push(took);
        sent.push({ at, took });
        bucket?.latencies.push(took);
        if (bucket) bucket.served += 1;
        if (!stack.simulator.isValid(token)) {
          revoked += 1;
          if (bucket) bucket.revoked += 1;
          await fleet
            .invoke({ action: 'invalidate', connection: 'sandbox', accessToken: token })
            .catch(() => undefined);
        }
      }
      await sleep(settings.thinkMs * (0.5 + Math.random()));
    }
  };

  // Kills at random instants, on average every killEveryMs (gaps of 0.5-1.5 times it, the first
  // within one). A fixed grid lined up with the fleet's own pacing: the second refresh's fence
  // fell on the 7th tick in every run, so whether a kill cost 11 s hung on a few ms.
  let killTimer: NodeJS.Timeout | undefined;
  const killAfter = (ms: number) => {
    killTimer = setTimeout(() => {
      fleet.killOne();
      killAfter(settings.killEveryMs * (0.5 + Math.random()));
    }, ms);
  };
  killAfter(settings.killEveryMs * Math.random());
  const timers = [
    ...(settings.mode === 'broker'
      ? [
          setInterval(
            () => void fleet.invoke(scheduledEvent()).catch(() => undefined),
            settings.scheduleEveryMs,
          ),
        ]
      : []),
  ];
  await Promise.all(Array.from({ length: settings.callers }, caller));
  clearTimeout(killTimer);
  for (const timer of timers) clearInterval(timer);
  await fleet.close();
  // BENCH_LOG_DIR keeps every container's log, to see why any issuance happened.
  const logDir = process.env.BENCH_LOG_DIR;
  if (logDir) {
    mkdirSync(logDir, { recursive: true });
    fleet.all.forEach((c, i) => {
      writeFileSync(join(logDir, `${settings.mode}-${i}.log`), c.output());
    });
  }

  const issuanceTimes = stack.simulator.issuanceTimes().slice(issuedBefore);
  for (const time of issuanceTimes) {
    const bucket = bucketAt(time);
    if (bucket) bucket.issuances += 1;
  }
  const endedAt = Date.now();
  const durationMs = endedAt - start;
  const lifetimeMs = settings.lifetimeSeconds * 1000;
  const atCutover = waitsAtCutOver(sent, issuanceTimes, CHAOS_CUT_OVER);
  const dynamodbRequests = stack.dynamodb.requests() - dynamodbBefore;
  return {
    mode: settings.mode,
    durationMs,
    issuances: issuanceTimes.length,
    issuancesPerLifetime: issuanceTimes.length / (durationMs / 1000 / settings.lifetimeSeconds),
    served,
    revokedReceived: revoked,
    errors,
    latencyMs: {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: percentile(latencies, 100),
    },
    cutoverChaos: { callers: atCutover.length, slowestMs: percentile(atCutover, 100) },
    refreshesAfterExpiry: refreshesAfterExpiry(issuanceTimes, lifetimeMs, endedAt),
    dynamodbRequests,
    dynamodbRequestsPerServedToken: served === 0 ? 0 : dynamodbRequests / served,
    containersStarted: fleet.started,
    containersKilled: fleet.killed,
    timeline: buckets.map((b) => ({
      t: b.t,
      issuances: b.issuances,
      served: b.served,
      revoked: b.revoked,
      p50: percentile(b.latencies, 50),
      p99: percentile(b.latencies, 99),
    })),
  };
};
