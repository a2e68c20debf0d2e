/**
 * How close a run came to each timing assumption of docs/protocol.md (issue 35): the margin it
 * came closest to consuming, per assumption, measured where the harness can see it.
 *
 * - **A1**, the upstream processes an access-token POST within 2 × `BROKER_UPSTREAM_TIMEOUT_MS`
 *   (10 s) of its send: at each container's Open API proxy, from the POST's arrival (its send,
 *   on loopback) to the upstream's answer (it had been processed); the latest.
 * - **A2**, a scheduling pause between a check and the act it guards is at most
 *   `proofMarginMs` (100 ms): each environment's event-loop delays (`local/loop-delay.ts`),
 *   outside its freezes and outside the pauses the scenario injected (SIGSTOP), the worst; the
 *   injected ones apart.
 * - **A3**, wall clocks within `skewToleranceMs` (10 s) of each other: the skew the scenario
 *   gave the containers (`CHAOS_CLOCK_SKEW_MS`), the widest pair; every other clock is this
 *   machine's.
 * - **A4**, a store round trip within `storeRoundTripMs` (50 ms; 150 ms on a global table,
 *   `BROKER_STORE_ROUND_TRIP_MS`), a liveness bound: at each container's DynamoDB proxy, from
 *   a call's arrival to its answer, the slowest answered (a call never answered is not a round
 *   trip: the broker's own timeout ends it).
 */
import { DEFAULT_TIMING } from '../lib/broker/timing/index.js';
import { covered, type LoopDelay, type Span, union } from '../local/loop-delay.js';
import type { Exchange } from './proxy.js';

/** BROKER_UPSTREAM_TIMEOUT_MS's default, which the suite runs (the harness sets none). */
export const UPSTREAM_TIMEOUT_MS = 5_000;

export interface Margins {
  readonly a1: {
    /** The latest an access-token POST was processed after its send, ms (0: none processed). */
    readonly worstMs: number;
    readonly boundMs: number;
    readonly posts: number;
  };
  readonly a2: {
    /** The worst event-loop delay outside freezes and injected pauses, ms. */
    readonly worstMs: number;
    readonly boundMs: number;
    /** Delays over the bound. */
    readonly over: number;
    /** The longest pause the scenario injected into a process, ms (0: none). */
    readonly injectedMaxMs: number;
    /** Environments measured. */
    readonly environments: number;
  };
  readonly a3: { readonly worstMs: number; readonly boundMs: number };
  readonly a4: {
    readonly worstMs: number;
    readonly boundMs: number;
    /** The operation of the slowest call (`UpdateItem`, …). */
    readonly operation: string;
    readonly calls: number;
  };
}

/** Accumulates one run's margins as the proxies and environments report. */
export class MarginMeter {
  #a1 = { worstMs: 0, posts: 0 };
  #a2 = { worstMs: 0, over: 0, environments: 0 };
  #a4 = { worstMs: 0, operation: '', calls: 0 };
  /** Pauses injected per PID, on the monotonic clock of `local/loop-delay.ts`. */
  readonly #injected = new Map<number, Span[]>();
  /** The run itself on that clock: delays closed outside it (at shutdown, say) are not counted. */
  #run: Span = { from: Number.NEGATIVE_INFINITY, to: Number.POSITIVE_INFINITY };

  constructor(
    readonly settings: {
      readonly upstreamTimeoutMs: number;
      readonly storeRoundTripMs: number;
      /** Each container's clock offset, ms. */
      readonly skewsMs: readonly number[];
    },
  ) {}

  /** An exchange at a container's Open API proxy. */
  upstream(exchange: Readonly<Exchange>): void {
    const path = exchange.request.path.split('?')[0] ?? '';
    if (!path.endsWith('/oauth/access-token') || exchange.targetAnsweredAt === undefined) return;
    this.#a1.posts += 1;
    this.#a1.worstMs = Math.max(this.#a1.worstMs, exchange.targetAnsweredAt - exchange.arrivedAt);
  }

  /** An exchange at a container's DynamoDB proxy. */
  dynamodb(exchange: Readonly<Exchange>): void {
    if (exchange.answeredAt === undefined) return;
    this.#a4.calls += 1;
    const ms = exchange.answeredAt - exchange.arrivedAt;
    if (ms <= this.#a4.worstMs) return;
    this.#a4.worstMs = ms;
    this.#a4.operation =
      String(exchange.request.headers['x-amz-target'] ?? '').split('.')[1] ?? 'unknown';
  }

  /** A pause the scenario injected into process `pid`, on the monotonic clock. */
  injected(pid: number, span: Span): void {
    this.#injected.set(pid, [...(this.#injected.get(pid) ?? []), span]);
  }

  /** The run's span on the monotonic clock: from its callers' start to its end. */
  run(span: Span): void {
    this.#run = span;
  }

  /**
   * An ended environment's delays (net of its freezes), those whose late timer ran during the
   * run: less the pauses injected into it; the ones counted, the worst first.
   */
  environment(pid: number, delays: readonly LoopDelay[]): LoopDelay[] {
    this.#a2.environments += 1;
    const injected = union(this.#injected.get(pid) ?? []);
    const counted = delays
      .filter((d) => d.to >= this.#run.from && d.to <= this.#run.to)
      .map((d) => ({ ...d, delayMs: d.delayMs - covered(d, injected) }))
      .toSorted((a, b) => b.delayMs - a.delayMs);
    for (const { delayMs } of counted) {
      if (delayMs > DEFAULT_TIMING.proofMarginMs) this.#a2.over += 1;
      this.#a2.worstMs = Math.max(this.#a2.worstMs, delayMs);
    }
    return counted;
  }

  margins(): Margins {
    const injected = [...this.#injected.values()].flat();
    const skews = [0, ...this.settings.skewsMs];
    return {
      a1: { ...this.#a1, boundMs: 2 * this.settings.upstreamTimeoutMs },
      a2: {
        ...this.#a2,
        boundMs: DEFAULT_TIMING.proofMarginMs,
        injectedMaxMs: Math.max(0, ...injected.map((s) => s.to - s.from)),
      },
      a3: {
        worstMs: Math.max(...skews) - Math.min(...skews),
        boundMs: DEFAULT_TIMING.skewToleranceMs,
      },
      a4: { ...this.#a4, boundMs: this.settings.storeRoundTripMs },
    };
  }
}

const ms = (value: number): string =>
  value >= 1_000 ? `${(value / 1000).toFixed(2)} s` : `${Math.round(value)} ms`;

/** `38 ms of 100 ms (62 ms left)`, or `130 ms of 100 ms (**30 ms over**)`. */
export const marginText = (worstMs: number, boundMs: number): string =>
  worstMs <= boundMs
    ? `${ms(worstMs)} of ${ms(boundMs)} (${ms(boundMs - worstMs)} left)`
    : `${ms(worstMs)} of ${ms(boundMs)} (**${ms(worstMs - boundMs)} over**)`;

/** The tightest of several runs' margins: each assumption's worst. */
export const tightest = (all: readonly Margins[]): Margins | undefined => {
  const [first, ...rest] = all;
  if (!first) return undefined;
  return rest.reduce<Margins>(
    (a, b) => ({
      a1: {
        worstMs: Math.max(a.a1.worstMs, b.a1.worstMs),
        boundMs: a.a1.boundMs,
        posts: a.a1.posts + b.a1.posts,
      },
      a2: {
        worstMs: Math.max(a.a2.worstMs, b.a2.worstMs),
        boundMs: a.a2.boundMs,
        over: a.a2.over + b.a2.over,
        injectedMaxMs: Math.max(a.a2.injectedMaxMs, b.a2.injectedMaxMs),
        environments: a.a2.environments + b.a2.environments,
      },
      a3: { worstMs: Math.max(a.a3.worstMs, b.a3.worstMs), boundMs: a.a3.boundMs },
      a4:
        b.a4.worstMs > a.a4.worstMs
          ? { ...b.a4, calls: a.a4.calls + b.a4.calls }
          : { ...a.a4, calls: a.a4.calls + b.a4.calls },
    }),
    first,
  );
};

/** The four margins of a scenario's runs, one cell each, for the report. */
export const marginCells = (margins: Margins): string[] => {
  const { a1, a2, a3, a4 } = margins;
  return [
    a1.posts === 0 ? '— (no POST)' : marginText(a1.worstMs, a1.boundMs),
    `${marginText(a2.worstMs, a2.boundMs)}${a2.over > 0 ? `, ${a2.over} over` : ''}${a2.injectedMaxMs > 0 ? `; injected up to ${ms(a2.injectedMaxMs)}` : ''}`,
    marginText(a3.worstMs, a3.boundMs),
    `${marginText(a4.worstMs, a4.boundMs)}${a4.operation ? ` (${a4.operation})` : ''}`,
  ];
};
