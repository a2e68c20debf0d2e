/**
 * One chaos run: a fresh stack (dynalite, the Open API simulator, loopback Secrets Manager and
 * KMS), `containers` container processes running the built bundle, each behind its own two
 * fault proxies (→ DynamoDB, → Open API), one caller per container (Lambda serves one
 * invocation at a time per container), the scheduled warm-up, and a scenario that injects its
 * fault. Every served token is judged against the simulator the moment it arrives.
 *
 * Everything started here is stopped in `finally`: callers by an AbortController, paused
 * containers are continued then killed by PID, proxies and servers closed by handle.
 */
import { createHash } from 'node:crypto';
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { DEFAULT_TIMING } from '../lib/broker/timing/index.js';
import {
  type CpuPolicy,
  type CpuThrottling,
  defaultCpuPolicy,
  describeCpuShare,
  STACK_MEMORY_MB,
} from '../local/cpu-share.js';
import {
  type Execution,
  type LambdaContainer,
  startLambdaContainer,
} from '../local/lambda-container.js';
import { DEFAULT_LAMBDA, scheduledEvent } from '../local/lambda-events.js';
import { monotonicMs } from '../local/loop-delay.js';
import { type Stack, startStack } from '../local/stack.js';
import {
  classify,
  duplicateIssuances,
  type FaultSpan,
  Ledger,
  type Outcome,
  type ReuseGrant,
  type ReuseTally,
  refreshesAfterExpiry,
  slowestAtCutOver,
  type Tally,
  type TokenHistory,
  tallyReuse,
} from './ledger.js';
import { MarginMeter, type Margins, UPSTREAM_TIMEOUT_MS } from './margins.js';
import { type FaultProxy, startFaultProxy } from './proxy.js';
import { type RegionLink, type RegionSpec, type RegionStats, startRegionWorld } from './regions.js';

/** Where the built pieces are (`npm run chaos` builds them into .chaos/). */
export interface ChaosPaths {
  readonly bundle: string;
  readonly runner: string;
  /** The runtime of an emulated execution environment (`local/lambda-env/bootstrap.mjs`). */
  readonly bootstrap: string;
  /** The clock-skew preload (`--import`). */
  readonly clockSkew: string;
  /** Container logs of each run go under here. */
  readonly logDir: string;
  /**
   * The previous release's bundle, built from git (`chaos/previous-release.ts`), when a selected
   * scenario runs it.
   */
  readonly previous?: { readonly bundle: string; readonly label: string };
}

/** Which release a container runs: this tree's bundle, or the previous release's. */
export type Release = 'current' | 'previous';

export interface RunSettings {
  readonly containers: number;
  readonly durationMs: number;
  /** Token lifetime handed out by the simulator (`expiresIn`), seconds. */
  readonly lifetimeSeconds: number;
  /** BROKER_REFRESH_WINDOW_SECONDS. */
  readonly refreshWindowSeconds: number;
  /** The emulated Lambda timeout: also each caller's deadline. */
  readonly lambdaTimeoutMs: number;
  /** Simulator latency added to every upstream request. */
  readonly upstreamLatencyMs: number;
  /** Pause between a caller's answer and its next request (uniform 0.5×–1.5×). */
  readonly thinkMs: number;
  /** Warm-up (scheduled event) interval, sent to the containers in turn; 0: none. */
  readonly warmUpEveryMs: number;
  /**
   * How containers run: `frozen` (Lambda's model: an execution environment frozen between
   * invocations; the default in every scenario), or `always-running` (a process that never
   * stops), which a scenario must ask for.
   */
  readonly execution: Execution;
  /**
   * Regions of a multi-Region strongly consistent table (`chaos/regions.ts`): container `i` is
   * in region `i % regions.length` and reaches the one table through that region's proxy, and
   * each region runs its own warm-up schedule. None (the default): one region, no such proxy.
   */
  readonly regions: readonly RegionSpec[];
  /** With regions: whether racing writes from different regions are answered with a conflict. */
  readonly conflicts: boolean;
  /**
   * With regions: every region's warm-up at the same instants (schedules in several regions on
   * one clock, as `rate(5 minutes)` rules are), rather than a share of the interval apart.
   */
  readonly warmUpsInStep: boolean;
  /**
   * The function's memory, MB: each environment gets Lambda's CPU share of it (1,769 MB = one
   * core) where the cgroup v1 `cpu` controller is writable (`local/cpu-share.ts`). Default the
   * stack's 512 MB (serverless.yml): 0.29 of a core.
   */
  readonly memoryMb: number;
}

/**
 * Compressed time that keeps production's proportions where they matter: the refresh window
 * (9 s) is much longer than the 3 s lease and the 5 s pauses, as 600 s is in production, so a
 * fault at a refresh still finds the old token valid when the lease lapses. One run sees the
 * cold start and one refresh.
 */
export const DEFAULT_SETTINGS: RunSettings = {
  containers: 4,
  durationMs: 20_000,
  lifetimeSeconds: 20,
  refreshWindowSeconds: 9,
  lambdaTimeoutMs: 8_000,
  upstreamLatencyMs: 50,
  thinkMs: 40,
  // About half the window, as a 5-minute schedule is for the default 600 s window: a refresh
  // that fails is retried by the schedule only seconds later, not at once.
  warmUpEveryMs: 4_000,
  execution: 'frozen',
  regions: [],
  conflicts: false,
  warmUpsInStep: false,
  memoryMb: STACK_MEMORY_MB,
};

export interface ChaosNode {
  readonly index: number;
  /** Its region's index in `settings.regions` (0 without regions). */
  readonly region: number;
  readonly container: LambdaContainer;
  readonly dynamodb: FaultProxy;
  readonly upstream: FaultProxy;
}

/** What a scenario can do to the run. */
export interface ScenarioContext {
  readonly settings: RunSettings;
  readonly nodes: readonly ChaosNode[];
  /** The regions' proxies (empty without regions): isolate one, read its counters. */
  readonly regions: readonly RegionLink[];
  /** The fleet's table, reached directly (no container's link): an operator's action on it. */
  readonly table: { readonly url: string; readonly name: string };
  readonly startedAt: number;
  readonly endsAt: number;
  /** Milliseconds since the run started. */
  elapsed(): number;
  /** Logs a fault event (kept in the JSON report) and counts it as an injection. */
  inject(what: string, container?: number): void;
  /** Reports a container as faulted over a span (its callers' misses are counted apart). */
  faulted(container: number, fromMs: number, toMs: number): void;
  /** SIGSTOP now, SIGCONT after `ms` (bounded by the run's end). */
  pause(container: number, ms: number): void;
  /**
   * One process of a container (an environment's runtime) SIGSTOPped for `ms`, as a GC pause
   * or a preempted vCPU would stop it: only if it is running (not frozen between invocations),
   * and continued after `ms` unless the runtime froze it meanwhile (its next invocation
   * continues it). Not a faulted span: its callers must still be answered. False if not paused.
   */
  pauseProcess(container: number, pid: number, ms: number): boolean;
  /** Runs `fn` when the run ends, before the containers are closed (a process it started, say). */
  cleanup(fn: () => void | Promise<void>): void;
  /** The CPU share each environment gets (`local/cpu-share.ts`). */
  readonly cpu: CpuPolicy;
  /** Runs `fn` after `ms`, unless the run ended first. */
  later(ms: number, fn: () => void): void;
  sleep(ms: number): Promise<void>;
  /** Whether the run is still going. */
  running(): boolean;
}

export interface CallerPlan {
  /** The getToken event of this request (default: no minValidity). */
  event?(container: number): Record<string, unknown>;
  /** After a served token: whether the caller reports it with `invalidate` right away. */
  invalidateAfter?(container: number): boolean;
}

export interface Scenario {
  readonly name: string;
  /** What it injects, one line (the report's legend). */
  readonly injects: string;
  /** The prediction, if any. */
  readonly predicted?: string;
  readonly settings?: Partial<RunSettings>;
  /** Runs per `npm run chaos` unless `--runs` says otherwise (a narrow race needs several). */
  readonly runs?: number;
  /** Extra environment for container `index` (e.g. the clock-skew preload). */
  env?(index: number, paths: ChaosPaths): Record<string, string>;
  /**
   * Which release container `index` runs (default: this tree's). A scenario that runs the
   * previous release gets its bundle built from git (`--previous <ref>`).
   */
  release?(index: number): Release;
  /** Installs hooks, modes and timers; called once the fleet is up, just before the callers. */
  install?(context: ScenarioContext): void | Promise<void>;
  readonly callers?: CallerPlan;
  /** Extra request loops (e.g. a hostile caller), run alongside the callers. */
  extra?(context: ScenarioContext, invoke: Invoker): Promise<void>;
  /**
   * The scenario's own goals (issue 26's "done when" figures), judged on each run: the unmet
   * ones, one line each. `--check` fails on them as on a violation, unless `knownGap` is set.
   */
  goals?(result: RunResult): string[];
  /**
   * A known gap of the protocol this scenario measures, not yet fixed: its goals are judged and
   * printed as usual, but `--check` does not fail on them. The guarantee (no revoked token
   * served, every caller answered, no reuse past revocation) is checked as everywhere.
   */
  readonly knownGap?: string;
}

/** Sends one invocation to a container and records it in the ledger. */
export type Invoker = (container: number, event: Record<string, unknown>) => Promise<void>;

export interface FaultEvent {
  readonly atMs: number;
  readonly what: string;
  readonly container?: number;
}

export interface RunResult {
  readonly scenario: string;
  readonly settings: RunSettings;
  readonly durationMs: number;
  readonly tally: Tally;
  readonly issuances: number;
  readonly issuancesPerLifetime: number;
  /** Issuances less than half a lifetime after the previous one. */
  readonly duplicateIssuances: number;
  /** Refreshes that landed after the token they replaced had expired (goal 0). */
  readonly refreshesAfterExpiry: number;
  /** The slowest answer to a request sent at a cut-over (ms): 5 s before to 1 s after it. */
  readonly slowestAtCutOverMs: number;
  /** Frozen containers: invocations, their billed and response durations (ms), in all. */
  readonly billing: { invocations: number; billedMs: number; durationMs: number };
  readonly issuanceTimesMs: readonly number[];
  readonly faultsInjected: number;
  readonly faultEvents: readonly FaultEvent[];
  readonly faultSpans: readonly FaultSpan[];
  readonly proxies: readonly {
    container: number;
    dynamodb: ReturnType<FaultProxy['stats']>;
    upstream: ReturnType<FaultProxy['stats']>;
  }[];
  readonly invalidations: number;
  readonly timeline: ReturnType<Ledger['timeline']>;
  /** Every answer's `maxAgeMs` judged, after the run, against the upstream's revocations. */
  readonly reuse: ReuseTally;
  /**
   * The longest wait of a caller (answered or not) on a container under no fault at the time,
   * from the first fault injected on (the whole run without one): with an isolated region, how
   * long the other regions' callers were held.
   */
  readonly maxWaitOutsideFaultMs: number;
  /** With regions: each region's proxy counters (conflicts answered among them). */
  readonly regions?: readonly ({ name: string } & RegionStats)[];
  /**
   * With two releases in the fleet: which one each container runs (`this tree`, or the previous
   * release's label), and when it sent an access-token POST (run-relative ms: who issued).
   */
  readonly releases?: readonly ContainerRelease[];
  /** How close the run came to each timing assumption (chaos/margins.ts). */
  readonly margins: Margins;
  /** The CPU the environments ran on, and what their quota did. */
  readonly cpu: RunCpu;
}

export interface RunCpu {
  /** `CPU: 0.29 core per environment (512 MB, cgroup cpu quota)`, or whole cores and why. */
  readonly description: string;
  /** Environments that ran in the run. */
  readonly environments: number;
  /** Of those, environments that ran at the share (a cgroup quota). */
  readonly atShare: number;
  /** Why the others ran on whole cores (one line each, distinct). */
  readonly wholeCores: readonly string[];
  /** Their quotas' `cpu.stat`, summed. */
  readonly throttling: CpuThrottling;
}

export interface ContainerRelease {
  readonly container: number;
  readonly release: string;
  readonly accessTokenPostsMs: readonly number[];
}

/** How a run names this tree's bundle. */
export const THIS_TREE = 'this tree';

const digestOf = (token: string) => createHash('sha256').update(token).digest('base64url');

const INVOKE_PATH = '/2015-03-31/functions/token-broker/invocations';
/**
 * A request counts as "at a cut-over" when sent this long before a refresh's issuance (the
 * countdown of a 20–30 s token, about 2.5–5 s) or this long after it (its write, the readers'
 * next read).
 */
const CUT_OVER_BEFORE_MS = 5_000;
const CUT_OVER_AFTER_MS = 1_000;
/**
 * How long a caller waits for an answer past the function's timeout: a cold start's init (the
 * timeout runs from the invocation's delivery to an environment, as in Lambda, which does not
 * count init against it), and then the emulated "Task timed out" answer. The judge of I3 is the
 * environment's own timer, which answers `Sandbox.Timedout` for a handler that overran; this
 * limit only ends a call that nothing answers.
 */
const ANSWER_GRACE_MS = 3_000;

type Answer =
  | { readonly kind: 'result'; readonly body: Record<string, unknown> }
  | { readonly kind: 'function-error'; readonly errorType: string }
  | { readonly kind: 'none'; readonly reason: string }
  | { readonly kind: 'cancelled' };

/** One Lambda Invoke API call with a hard time limit; never throws. */
const invokeOnce = async (
  url: string,
  event: unknown,
  limitMs: number,
  stop: AbortSignal,
): Promise<Answer> => {
  const timeout = AbortSignal.timeout(limitMs);
  try {
    const response = await fetch(`${url}${INVOKE_PATH}`, {
      method: 'POST',
      body: JSON.stringify(event),
      signal: AbortSignal.any([stop, timeout]),
    });
    const body = (await response.json()) as Record<string, unknown>;
    if (response.headers.get('x-amz-function-error')) {
      return { kind: 'function-error', errorType: String(body.errorType) };
    }
    return { kind: 'result', body };
  } catch (error) {
    if (stop.aborted) return { kind: 'cancelled' };
    if (timeout.aborted) return { kind: 'none', reason: 'no answer' };
    return { kind: 'none', reason: `connection: ${(error as Error).name}` };
  }
};

/** The bundle container `index` runs. */
const bundleOf = (scenario: Scenario, index: number, paths: ChaosPaths): string => {
  if (scenario.release?.(index) !== 'previous') return paths.bundle;
  if (!paths.previous) {
    throw new Error(`${scenario.name} runs the previous release, and none was built`);
  }
  return paths.previous.bundle;
};

const sleepUnless = (ms: number, stop: AbortSignal) =>
  new Promise<void>((resolve) => {
    if (stop.aborted) return resolve();
    const timer = setTimeout(done, ms);
    function done() {
      clearTimeout(timer);
      stop.removeEventListener('abort', done);
      resolve();
    }
    stop.addEventListener('abort', done, { once: true });
  });

export const runScenario = async (
  scenario: Scenario,
  paths: ChaosPaths,
  overrides: Partial<RunSettings> = {},
): Promise<RunResult> => {
  const settings: RunSettings = { ...DEFAULT_SETTINGS, ...scenario.settings, ...overrides };
  const stop = new AbortController();
  const timers = new Set<NodeJS.Timeout>();
  const paused = new Set<number>();
  const proxies: FaultProxy[] = [];
  const nodes: ChaosNode[] = [];
  let stack: Stack | undefined;
  let world: Awaited<ReturnType<typeof startRegionWorld>> | undefined;
  let answers: Ledger | undefined;
  let measured: Omit<RunResult, 'margins' | 'cpu'> | undefined;
  /** The run's start on the monotonic clock (`local/loop-delay.ts`). */
  let measuredFrom: number | undefined;
  /** Processes paused by `pauseProcess`, continued at the latest when the run ends. */
  const stoppedPids = new Set<number>();
  const cleanups: (() => void | Promise<void>)[] = [];
  const cpu = defaultCpuPolicy();
  // Each container's extra environment, read once: the margins need its clock and store bound.
  const extraEnvs = Array.from(
    { length: settings.containers },
    (_, index) => scenario.env?.(index, paths) ?? {},
  );
  const meter = new MarginMeter({
    upstreamTimeoutMs: UPSTREAM_TIMEOUT_MS,
    storeRoundTripMs: Number(
      extraEnvs[0]?.BROKER_STORE_ROUND_TRIP_MS ?? DEFAULT_TIMING.storeRoundTripMs,
    ),
    skewsMs: extraEnvs.map((env) => Number(env.CHAOS_CLOCK_SKEW_MS ?? 0)),
  });
  try {
    stack = await startStack(
      {
        expiresIn: settings.lifetimeSeconds,
        latencyMs: settings.upstreamLatencyMs,
        revokeOnReissue: true,
      },
      ['sandbox'],
    );
    const simulatorUrl = stack.simulator.url;
    const baseEnv: Record<string, string> = {
      ...stack.env,
      BROKER_REFRESH_WINDOW_SECONDS: String(settings.refreshWindowSeconds),
      BROKER_DEFAULT_MIN_VALIDITY_SECONDS: '1',
      // The production default: re-check no faster than production does (for a 20 s token
      // it is a quarter of its 9 s window, 2.25 s; see lib/broker/timing/bounds.ts).
      BROKER_MEMORY_RECHECK_SECONDS: '5',
      // The production default, not the test stack's 0: the invalidate storm runs against it.
      BROKER_INVALIDATE_MIN_AGE_SECONDS: '2',
      // And the production bound on a caller's word (a refresh window), not the test stack's 0.
      BROKER_FORCED_MIN_AGE_SECONDS: '',
      BROKER_LOCAL_TIMEOUT_MS: String(settings.lambdaTimeoutMs),
      POWERTOOLS_LOG_LEVEL: process.env.CHAOS_LOG_LEVEL ?? 'INFO',
      POWERTOOLS_METRICS_DISABLED: 'true',
      // As the stack: HTTP only through the Function URL's alias, which the local URL invokes.
      BROKER_URL_QUALIFIER: DEFAULT_LAMBDA.urlQualifier ?? 'url',
    };
    const connections = JSON.parse(baseEnv.BROKER_CONNECTIONS ?? '{}') as Record<
      string,
      Record<string, unknown>
    >;

    if (settings.regions.length > 0) {
      world = await startRegionWorld({
        target: stack.dynamodb.url,
        regions: settings.regions,
        conflicts: settings.conflicts,
      });
    }
    const regionLinks = world?.regions ?? [];

    for (let index = 0; index < settings.containers; index += 1) {
      const region = regionLinks.length > 0 ? index % regionLinks.length : 0;
      const dynamodb = await startFaultProxy({
        target: regionLinks[region]?.url ?? stack.dynamodb.url,
        label: `dynamodb-${index}`,
        observe: (exchange) => meter.dynamodb(exchange),
      });
      proxies.push(dynamodb);
      const upstream = await startFaultProxy({
        target: simulatorUrl,
        label: `upstream-${index}`,
        observe: (exchange) => meter.upstream(exchange),
      });
      proxies.push(upstream);
      const env = {
        ...baseEnv,
        AWS_ENDPOINT_URL_DYNAMODB: dynamodb.url,
        BROKER_CONNECTIONS: JSON.stringify(
          Object.fromEntries(
            Object.entries(connections).map(([name, c]) => [name, { ...c, baseUrl: upstream.url }]),
          ),
        ),
        ...extraEnvs[index],
      };
      const container = await startLambdaContainer({
        execution: settings.execution,
        runner: paths.runner,
        bootstrap: paths.bootstrap,
        bundle: bundleOf(scenario, index, paths),
        env,
        timeoutMs: settings.lambdaTimeoutMs,
        // One caller per container, and the warm-ups: one environment, and more while others
        // finish their work after an answer (Lambda gives a busy environment no invocation: it
        // starts another). Two were too few when a refresh held one for the function's timeout
        // and a warm-up another: the caller queued past its deadline.
        maxEnvironments: 4,
        // Lambda's CPU share of the function's memory (where the cgroup controller is writable),
        // and each environment's event-loop delays for the A2 margin.
        memoryMb: settings.memoryMb,
        cpu,
        loopDelay: true,
      });
      nodes.push({ index, region, container, dynamodb, upstream });
    }

    const startedAt = Date.now();
    const startedAtMonotonic = monotonicMs();
    measuredFrom = startedAtMonotonic;
    const endsAt = startedAt + settings.durationMs;
    const ledger = new Ledger(startedAt);
    answers = ledger;
    const faultEvents: FaultEvent[] = [];
    let invalidations = 0;
    const running = () => !stop.signal.aborted && Date.now() < endsAt;
    const later = (ms: number, fn: () => void) => {
      const timer = setTimeout(() => {
        timers.delete(timer);
        if (!stop.signal.aborted) fn();
      }, ms);
      timers.add(timer);
    };
    const signal = (index: number, name: 'SIGSTOP' | 'SIGCONT') => {
      const pids = nodes[index]?.container.pids() ?? [];
      for (const pid of pids) {
        try {
          process.kill(pid, name);
        } catch {
          // Already gone: nothing to pause or continue.
        }
      }
      return pids;
    };
    /** The state of the environment whose runtime is `pid` (undefined: none such, or ended). */
    const stateOf = (index: number, pid: number) =>
      nodes[index]?.container.environments().find((e) => e.pid === pid)?.state;
    const context: ScenarioContext = {
      settings,
      nodes,
      regions: regionLinks,
      table: { url: stack.dynamodb.url, name: stack.tableName },
      startedAt,
      endsAt,
      elapsed: () => Date.now() - startedAt,
      inject: (what, container) => {
        faultEvents.push({
          atMs: Date.now() - startedAt,
          what,
          ...(container === undefined ? {} : { container }),
        });
      },
      faulted: (container, fromMs, toMs) =>
        ledger.faulted({ container, from: startedAt + fromMs, to: startedAt + toMs }),
      pause: (container, ms) => {
        const pauseMs = Math.max(0, Math.min(ms, endsAt - Date.now()));
        paused.add(container);
        const pids = signal(container, 'SIGSTOP');
        const stoppedAt = monotonicMs();
        const from = Date.now() - startedAt;
        context.faulted(container, from, from + pauseMs);
        const timer = setTimeout(() => {
          timers.delete(timer);
          signal(container, 'SIGCONT');
          const to = monotonicMs();
          for (const pid of pids) meter.injected(pid, { from: stoppedAt, to });
          paused.delete(container);
        }, pauseMs);
        timers.add(timer);
      },
      pauseProcess: (container, pid, ms) => {
        const state = stateOf(container, pid);
        if (stoppedPids.has(pid) || (state !== 'busy' && state !== 'after-response')) return false;
        try {
          process.kill(pid, 'SIGSTOP');
        } catch {
          return false;
        }
        stoppedPids.add(pid);
        const stoppedAt = monotonicMs();
        const timer = setTimeout(
          () => {
            timers.delete(timer);
            stoppedPids.delete(pid);
            meter.injected(pid, { from: stoppedAt, to: monotonicMs() });
            // Frozen by the runtime meanwhile (it had asked for its next invocation just
            // before the stop): its next invocation continues it.
            if (stateOf(container, pid) === 'frozen') return;
            try {
              process.kill(pid, 'SIGCONT');
            } catch {
              // Gone meanwhile (a timeout reset it).
            }
          },
          Math.max(0, Math.min(ms, endsAt - Date.now())),
        );
        timers.add(timer);
        return true;
      },
      cleanup: (fn) => {
        cleanups.push(fn);
      },
      cpu,
      later,
      sleep: (ms) => sleepUnless(ms, stop.signal),
      running,
    };

    /** What the upstream knows of a token, by digest. */
    const history = async (digest: string): Promise<TokenHistory | undefined> => {
      const response = await fetch(`${simulatorUrl}/__simulator/tokens/${digest}`);
      if (response.status === 404) return undefined;
      if (!response.ok) throw new Error(`simulator ledger answered ${response.status}`);
      return (await response.json()) as TokenHistory;
    };
    const judge = (token: string) => history(digestOf(token));
    // Each answer's reuse grant, and the tokens callers reported: judged once the run is over,
    // when every revocation that could cut a grant short has happened.
    const grants: ReuseGrant[] = [];
    const reported = new Set<string>();

    /** One invocation, judged and recorded; returns the token served, if any. */
    const call = async (
      index: number,
      event: Record<string, unknown>,
    ): Promise<string | undefined> => {
      const node = nodes[index];
      if (!node) throw new Error(`no container ${index}`);
      const sentAt = Date.now();
      const answer = await invokeOnce(
        node.container.url,
        event,
        settings.lambdaTimeoutMs + ANSWER_GRACE_MS,
        stop.signal,
      );
      const receivedAt = Date.now();
      if (answer.kind === 'cancelled') return undefined; // cut by the end of the run
      let outcome: Outcome;
      let token: string | undefined;
      if (answer.kind === 'none') {
        outcome = { kind: 'unanswered', reason: answer.reason };
      } else if (answer.kind === 'function-error') {
        // Sandbox.Timedout is the emulated Lambda's own timeout; TimeoutError is middy's early
        // timeout response, thrown 5 ms before the deadline: neither is the broker's answer.
        outcome =
          answer.errorType === 'Sandbox.Timedout'
            ? { kind: 'unanswered', reason: 'Lambda timeout' }
            : answer.errorType === 'TimeoutError'
              ? { kind: 'unanswered', reason: 'middy timeout at the Lambda deadline' }
              : { kind: 'error', errorType: answer.errorType };
      } else if (typeof answer.body.accessToken === 'string') {
        // A result at all means the handler finished before the deadline: the emulated Lambda
        // judges it on the container's own timing and answers Sandbox.Timedout otherwise. This
        // process's wall time would add its own event-loop delays (it runs dynalite, the
        // simulator and the proxies too) to a broker that answers 500 ms before the deadline.
        token = answer.body.accessToken;
        const known = await judge(token);
        outcome = {
          kind: 'token',
          verdict: classify(known, sentAt, receivedAt),
          revokedAt: known?.revokedAt ?? null,
        };
        const maxAgeMs = answer.body.maxAgeMs;
        grants.push({
          digest: digestOf(token),
          sentAt,
          maxAgeMs: typeof maxAgeMs === 'number' ? maxAgeMs : 0,
        });
      } else {
        throw new Error('a getToken answer without accessToken');
      }
      ledger.record({ container: index, sentAt, receivedAt, outcome });
      return token;
    };

    const invalidate = async (index: number, token: string) => {
      const node = nodes[index];
      if (!node) return;
      invalidations += 1;
      reported.add(digestOf(token));
      await invokeOnce(
        node.container.url,
        { action: 'invalidate', connection: 'sandbox', accessToken: token },
        settings.lambdaTimeoutMs + ANSWER_GRACE_MS,
        stop.signal,
      );
    };

    // With two releases: who sends each access-token POST (the simulator only counts them).
    const posts = nodes.map(() => [] as number[]);
    if (scenario.release) {
      for (const node of nodes) {
        node.upstream.setHooks({
          onRequest: (request) => {
            if ((request.path.split('?')[0] ?? '').endsWith('/oauth/access-token')) {
              posts[node.index]?.push(Date.now() - startedAt);
            }
          },
        });
      }
    }
    await scenario.install?.(context);

    const caller = async (index: number) => {
      while (running()) {
        const event = scenario.callers?.event?.(index) ?? {
          action: 'getToken',
          connection: 'sandbox',
        };
        const token = await call(index, event);
        if (token && running() && scenario.callers?.invalidateAfter?.(index)) {
          await invalidate(index, token);
        }
        await sleepUnless(settings.thinkMs * (0.5 + Math.random()), stop.signal);
      }
    };
    /** One warm-up schedule over `group`; each region runs its own, out of step by a share. */
    const warmUps = async (group: readonly ChaosNode[], offsetMs: number) => {
      if (settings.warmUpEveryMs <= 0 || group.length === 0) return; // no schedule here
      let turn = 0;
      const pending: Promise<unknown>[] = [];
      await sleepUnless(offsetMs, stop.signal);
      while (running()) {
        await sleepUnless(settings.warmUpEveryMs, stop.signal);
        if (!running()) break;
        const node = group[turn % group.length];
        turn += 1;
        if (node) {
          pending.push(
            invokeOnce(node.container.url, scheduledEvent(), settings.lambdaTimeoutMs, stop.signal),
          );
        }
      }
      await Promise.all(pending);
    };
    const ending = setTimeout(() => stop.abort(), settings.durationMs);
    timers.add(ending);
    const loops = [
      ...nodes.map((node) => caller(node.index)),
      ...(regionLinks.length > 0
        ? regionLinks.map((_, r) =>
            warmUps(
              nodes.filter((n) => n.region === r),
              settings.warmUpsInStep ? 0 : (settings.warmUpEveryMs * r) / regionLinks.length,
            ),
          )
        : [warmUps(nodes, 0)]),
      scenario.extra?.(context, async (index, event) => {
        await call(index, event);
      }),
    ];
    // A loop that throws is a harness failure: stop the others and report it.
    const settled = await Promise.allSettled(loops);
    stop.abort();
    const failure = settled.find((s) => s.status === 'rejected');
    if (failure && failure.status === 'rejected') throw failure.reason;

    const durationMs = Date.now() - startedAt;
    meter.run({ from: startedAtMonotonic, to: startedAtMonotonic + durationMs });
    const issuanceTimes = stack.simulator
      .issuanceTimes()
      .filter((t) => t <= startedAt + durationMs);
    const tally = ledger.tally();
    if (tally.served === 0) throw new Error('no token was served at all: the harness is broken');
    const digests = [...new Set(grants.map((g) => g.digest))];
    const histories = new Map(
      await Promise.all(digests.map(async (d) => [d, await history(d)] as const)),
    );
    const reuse = tallyReuse(grants, histories, reported);
    const lifetimeMs = settings.lifetimeSeconds * 1000;
    measured = {
      scenario: scenario.name,
      settings,
      durationMs,
      tally,
      issuances: issuanceTimes.length,
      issuancesPerLifetime: issuanceTimes.length / (durationMs / lifetimeMs),
      duplicateIssuances: duplicateIssuances(issuanceTimes, lifetimeMs / 2),
      refreshesAfterExpiry: refreshesAfterExpiry(issuanceTimes, lifetimeMs),
      slowestAtCutOverMs: slowestAtCutOver(
        ledger.entries(),
        issuanceTimes,
        (container, at) =>
          ledger.spans().some((f) => f.container === container && f.from <= at && at <= f.to),
        CUT_OVER_BEFORE_MS,
        CUT_OVER_AFTER_MS,
      ),
      billing: nodes.reduce(
        (total, node) => {
          const b = node.container.billing();
          return {
            invocations: total.invocations + b.invocations,
            billedMs: total.billedMs + b.billedMs,
            durationMs: total.durationMs + b.durationMs,
          };
        },
        { invocations: 0, billedMs: 0, durationMs: 0 },
      ),
      issuanceTimesMs: issuanceTimes.map((t) => t - startedAt),
      // Conflicts answered by the regions' proxies are injected faults too.
      faultsInjected: faultEvents.length + (world?.conflicts() ?? 0),
      faultEvents,
      faultSpans: ledger.spans().map((s) => ({
        container: s.container,
        from: s.from - startedAt,
        to: s.to - startedAt,
      })),
      proxies: nodes.map((n) => ({
        container: n.index,
        dynamodb: n.dynamodb.stats(),
        upstream: n.upstream.stats(),
      })),
      invalidations,
      timeline: ledger.timeline(1_000, durationMs, issuanceTimes),
      reuse,
      maxWaitOutsideFaultMs: Math.max(
        0,
        ...ledger
          .entries()
          .filter(
            (e) =>
              e.sentAt >= startedAt + (faultEvents[0]?.atMs ?? 0) &&
              !ledger
                .spans()
                .some(
                  (f) => f.container === e.container && f.from <= e.receivedAt && e.sentAt <= f.to,
                ),
          )
          .map((e) => e.receivedAt - e.sentAt),
      ),
      ...(world ? { regions: regionLinks.map((r) => ({ name: r.name, ...r.stats() })) } : {}),
      ...(scenario.release
        ? {
            releases: nodes.map((n) => ({
              container: n.index,
              release:
                scenario.release?.(n.index) === 'previous'
                  ? (paths.previous?.label ?? 'previous')
                  : THIS_TREE,
              accessTokenPostsMs: posts[n.index] ?? [],
            })),
          }
        : {}),
    };
  } finally {
    stop.abort();
    for (const timer of timers) clearTimeout(timer);
    for (const fn of cleanups.splice(0)) {
      try {
        await fn();
      } catch {
        // A clean-up that fails must not keep the others (or the containers' close) from running.
      }
    }
    for (const pid of stoppedPids) {
      try {
        process.kill(pid, 'SIGCONT');
      } catch {
        // already gone
      }
    }
    // A stopped process would hold a SIGTERM until continued: continue it, then kill it.
    for (const node of nodes) {
      if (!paused.has(node.index)) continue;
      for (const pid of node.container.pids()) {
        try {
          process.kill(pid, 'SIGCONT');
        } catch {
          // already gone
        }
      }
    }
    await Promise.all(nodes.map((node) => node.container.close()));
    const logDir = join(paths.logDir, scenario.name);
    mkdirSync(logDir, { recursive: true });
    for (const node of nodes) {
      writeFileSync(join(logDir, `container-${node.index}.log`), node.container.output());
    }
    // Every answer, to read next to the containers' logs (times are ISO, as the logs'): which
    // caller waited how long, where, for what.
    writeFileSync(
      join(logDir, 'answers.jsonl'),
      (answers?.entries() ?? [])
        .map((e) =>
          JSON.stringify({
            container: e.container,
            sentAt: new Date(e.sentAt).toISOString(),
            waitMs: e.receivedAt - e.sentAt,
            outcome: e.outcome.kind === 'token' ? e.outcome.verdict : e.outcome,
          }),
        )
        .join('\n'),
    );
    await Promise.all(proxies.map((proxy) => proxy.close()));
    await world?.close();
    await stack?.close();
  }
  if (!measured) throw new Error('the run ended without a result');
  // The containers are closed: every environment has ended, its delays and cpu.stat are final.
  const environments = nodes.flatMap((node) => node.container.environments({ ended: true }));
  // Each environment's worst delays, to read beside the containers' logs (times run-relative).
  const delays = nodes.flatMap((node) =>
    node.container.environments({ ended: true }).map((environment) => ({
      container: node.index,
      environment: environment.id,
      pid: environment.pid,
      worst: meter
        .environment(environment.pid, environment.loopDelays ?? [])
        .slice(0, 10)
        .map((d) => ({
          atMs: Math.round(d.from - (measuredFrom ?? 0)),
          lastedMs: Math.round(d.to - d.from),
          delayMs: Math.round(d.delayMs),
        })),
    })),
  );
  writeFileSync(
    join(paths.logDir, scenario.name, 'loop-delays.json'),
    `${JSON.stringify(delays, null, 2)}\n`,
  );
  const atShare = environments.filter((e) => e.cpu.kind === 'quota');
  return {
    ...measured,
    margins: meter.margins(),
    cpu: {
      description: describeCpuShare(cpu, settings.memoryMb),
      environments: environments.length,
      atShare: atShare.length,
      wholeCores: [
        ...new Set(environments.flatMap((e) => (e.cpu.kind === 'quota' ? [] : [e.cpu.reason]))),
      ],
      throttling: atShare.reduce<CpuThrottling>(
        (sum, e) => {
          const t = e.cpu.kind === 'quota' ? e.cpu.throttling : undefined;
          return {
            periods: sum.periods + (t?.periods ?? 0),
            throttledPeriods: sum.throttledPeriods + (t?.throttledPeriods ?? 0),
            throttledMs: sum.throttledMs + (t?.throttledMs ?? 0),
          };
        },
        { periods: 0, throttledPeriods: 0, throttledMs: 0 },
      ),
    },
  };
};
