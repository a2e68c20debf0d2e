/**
 * A model-based test of the fleet (fast-check): 4 brokers, one in-memory store and an
 * upstream that revokes every earlier token on each issuance, all on one simulated timeline
 * (test/support/sim.ts). fast-check draws the fleet (each container's re-check and wall clock
 * offset; 1–3 regions, each container's region, and each region's store round trip: 0, 5 or
 * 30 ms in one region, up to 150 ms on a global table of two or three, whose brokers then run a
 * global stage's timing) and a sequence of commands: callers' requests (some forcing a
 * replacement), warm-ups, invalidate reports, waits, store answers lost after the write landed,
 * wall clocks stepped (NTP), containers frozen (a Lambda environment between invocations) and
 * thawed, containers stopped while the others are asked (a holder stopped mid-countdown, found
 * stale and taken over), idle spells longer than a token's life, DynamoDB's TTL deleting every
 * item whose `ttl` has passed, and spells of replicated write conflicts (a write racing another
 * region's write to the item is not applied; the adapter's own retries handle it). Half the
 * fleets read the item through 3 read copies (ADR 0024), kept as the adapter keeps them, and
 * draw writers stopped between the main item and its copies (`lag`: the write lands, no copy
 * gets it, its answer is lost).
 *
 * It draws the schedule too (issue 35, the assumptions A1 and A2 of docs/protocol.md):
 * - the time each request's invocation has left (up to the function's 10 s timeout), which
 *   gives its deadline as the handlers make it (`deadlineOf`), and bounds the refresh ahead it
 *   starts: that runs after the answer, until then (`workUntil`, as functions/broker passes it),
 *   so a refresh started late in an invocation gets a short POST budget;
 * - POSTs given up on and processed late by the upstream, up to A1's bound from their send
 *   (10 s, the last 2 s of it half the time), whatever budget they had;
 * - stalls of a container's event loop (50–500 ms), at a random instant or just before the
 *   next thing it sends (a store call, its POST before the client's last check, an answer).
 *
 * Every answer is judged the moment it leaves, and the invariants of docs/protocol.md are
 * checked over the whole run:
 *
 * - I1 one issuance per lifetime: every token the upstream issued was written to the store,
 *   unless the container that asked for it was frozen meanwhile (its outcome unknown); and no
 *   token is issued while a POST given up on is still out (it lands later, within A1);
 * - I2 no revoked token served: no caller is handed a token the upstream had already revoked
 *   (a token a caller reported aside: the documented exception, as in the chaos ledger); past
 *   A2's 95 ms between a reader's check and its answer leaving, only a token revoked before the
 *   request was sent counts (the ledger's `revoked-during-request` is the rest);
 * - I3 an answer by the deadline: every caller of a container that was not frozen meanwhile is
 *   answered by its deadline (later by as long as the container stalled meanwhile), whatever its
 *   wall clock was stepped by;
 * - I4 a caller's word is bounded: replacements on a caller's word are at most one per refresh
 *   window, plus one after each natural issuance.
 *
 * `npm run model -- --runs 20000` runs more sequences; a failure prints the seed and the path
 * that replay it (`npm run model -- --seed=<seed> --path <path> --trace`).
 *
 * Issue 35's bug, found by this model on the code before b84d6ec (A1: the lease held until the
 * give-up plus one timeout only): `npm run model -- --seed=152 --runs 300` fails after 178
 * runs; `npm run model -- --seed=152 --path 177 --trace` replays run 177 as drawn. A request to
 * n1 with 8.6 s of its invocation left is answered at once from the store and starts a refresh
 * ahead; the POST leaves at 10.5 s with 4.55 s of budget left before `workUntil`, is given up at
 * 15.1 s, and the lease is held until 20.1 s; a warm-up's takeover issues tok-2 at 20.2 s; the
 * upstream processes the first POST 9.7 s after its send (20.26 s), revoking tok-2, and n0
 * serves tok-2 at 20.29 s: "I1: 1 token(s) issued while n1's POST sent at 10547 ms was out; it
 * was processed 9709 ms after its send (tok-3)" and "I2: n0 served tok-2 at 20293 ms, 37 ms
 * after its revocation". (Shrunk, the same seed ends at a forced request with 0.9 s left.) The
 * seed names this version of the draws: a change to an arbitrary draws other fleets from it.
 */
import {
  ConditionalCheckFailedException,
  ReplicatedWriteConflictException,
} from '@aws-sdk/client-dynamodb';
import fc from 'fast-check';
import { describe, it } from 'vitest';
import { deadlineOf } from '../../functions/broker/shared.js';
import { ConflictRetries } from '../../lib/adapters/dynamodb-conflicts.js';
import { afterConflict } from '../../lib/adapters/dynamodb-token-store.js';
import type { TokenBroker } from '../../lib/broker/index.js';
import { protocolTiming } from '../../lib/broker/timing/index.js';
import type { BrokerLogger } from '../../lib/broker/types.js';
import { type Clock, Deadline } from '../../lib/clock.js';
import { UpstreamUnavailableError } from '../../lib/errors.js';
import type { TokenIssuer, TokenStore } from '../../lib/ports.js';
import { sealCode } from '../../lib/upstream/authorization-code.js';
import { InMemoryTokenStore } from '../support/fakes.js';
import { fleetBroker, Upstream, wrap } from '../support/fleet-model.js';
import { isBefore, ModelCopies, type Order } from '../support/model-copies.js';
import { Sim, settle } from '../support/sim.js';

const T0 = 1_795_262_400_000;
/** Tokens live 24 s, the window is 12 s: a run sees a few refreshes. */
const LIFE_S = 24;
const WINDOW_S = 12;
const RUNS = Number(process.env.MODEL_RUNS ?? 300);
const SEED = process.env.MODEL_SEED === undefined ? undefined : Number(process.env.MODEL_SEED);
const PATH = process.env.MODEL_PATH;

type Command =
  /**
   * A caller's request, in an invocation with `leftMs` left when it arrives (Lambda's
   * getRemainingTimeInMillis): answered by that less the answer margin, and a refresh ahead it
   * starts runs after the answer until then too (`workUntil`, as functions/broker does): late in
   * an invocation, its POST gets a short budget.
   */
  | {
      readonly kind: 'request';
      readonly node: number;
      readonly force: boolean;
      readonly leftMs: number;
    }
  | { readonly kind: 'warm'; readonly node: number }
  | { readonly kind: 'report'; readonly node: number }
  | { readonly kind: 'wait'; readonly ms: number }
  | { readonly kind: 'step'; readonly node: number; readonly ms: number }
  | { readonly kind: 'freeze'; readonly node: number; readonly ms: number }
  /**
   * The container stops for `ms` (frozen, or its process killed and its lease left) while the
   * others go on being asked: a holder stopped mid-countdown is found stale and taken over.
   */
  | { readonly kind: 'stop'; readonly node: number; readonly ms: number }
  /** The container's next store write lands, and its answer is lost (an SDK error). */
  | { readonly kind: 'lose'; readonly node: number }
  /**
   * The container's next store write is not applied and fails (throttled, a 500 after the
   * SDK's retries): a token write that fails leaves the token in its holder's memory only.
   */
  | { readonly kind: 'refuse'; readonly node: number }
  /**
   * The container's next access-token POST reaches the upstream but its answer never comes
   * (outcome unknown, given up when its budget runs out); the upstream processes it `ms` after
   * it was sent, within the bound the protocol assumes (A1: twice the upstream timeout from the
   * send, whatever budget the POST had).
   */
  | { readonly kind: 'late-post'; readonly node: number; readonly ms: number }
  /**
   * The container's event loop stalls for `ms` (a GC pause, a throttled CPU) while the others go
   * on: `afterMs` from now, at whatever point of its work it is then (`anywhere`: between two of
   * its events, an answer that came meanwhile handled after it), or at the first thing it sends
   * after that (`send`: a store call, its POST, an answer to its caller), between deciding to
   * send it and its leaving.
   */
  | {
      readonly kind: 'pause';
      readonly node: number;
      readonly afterMs: number;
      readonly ms: number;
      readonly at: 'anywhere' | 'send';
    }
  /**
   * The container's wall clock steps by `ms` while its next access-token POST is out (an NTP
   * correction): between the lease's confirmation and the answer, where a step between
   * commands never lands. Its monotonic clock does not move (review 2's finding: a memory-only
   * token vouched for on the wall clock).
   */
  | { readonly kind: 'step-in-post'; readonly node: number; readonly ms: number }
  /** DynamoDB's TTL runs: every item whose `ttl` is past may vanish, at any moment. */
  | { readonly kind: 'sweep' }
  /** Nobody asks for a while (a night, shortened): tokens expire and their ttl passes. */
  | { readonly kind: 'idle'; readonly ms: number }
  /**
   * For `ms`, a write to the item that overlaps another region's write to it fails with
   * `ReplicatedWriteConflictException` (not applied), answered after its round trip.
   */
  | { readonly kind: 'conflicts'; readonly ms: number }
  /**
   * With read copies: the container's next write that lands on the main item reaches no copy,
   * and its answer is lost (a writer stopped between the two, or its copy writes failed).
   */
  | { readonly kind: 'lag'; readonly node: number };

/** A write the model refused (`refuse`): not applied, failed as a 500 after the SDK's retries. */
class ModelRefusedWrite extends Error {
  constructor() {
    super('InternalServerError (not applied, after the SDK retries)');
  }
}

const NODES = 4;
/** The brokers' upstream timeout: a POST's answer is given up after it at the latest. */
const UPSTREAM_TIMEOUT_MS = 5_000;
/**
 * A1 (docs/protocol.md): the upstream processes an access-token POST, if at all, within this
 * long of its send. Drawn up to it, the last 2 s of it half the time.
 */
const POST_LANDS_WITHIN_MS = 2 * UPSTREAM_TIMEOUT_MS;
/** The function's timeout (serverless.yml): an invocation has at most this left. */
const FUNCTION_TIMEOUT_MS = 10_000;
/**
 * The longest stall of a container's event loop drawn: GC-like pauses, as chaos `gc-pauses`
 * draws them (A2 bounds none but one gap, below; the `stop` and `freeze` commands draw longer).
 */
const PAUSE_MAX_MS = 500;
/**
 * A2 (docs/protocol.md): a reader's last check to its answer leaving takes at most this long
 * (`proofMarginMs` less the drift of A3). A longer stall there may hand out a token revoked
 * during the request, never before it (the chaos ledger's `revoked-during-request`).
 */
const CHECK_TO_ANSWER_MS = 95;
const node = fc.nat(NODES - 1);
const commandArb: fc.Arbitrary<Command> = fc.oneof(
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('request' as const),
      node,
      // A forcing minValidity in about one request in five.
      force: fc.integer({ min: 0, max: 4 }).map((n) => n === 0),
      // The time its invocation has left: at most the function's timeout, and as little as
      // leaves 300 ms to answer (a request that came late in its invocation).
      leftMs: fc.integer({ min: 800, max: FUNCTION_TIMEOUT_MS }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('warm' as const), node }) },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('report' as const), node }) },
  {
    weight: 8,
    arbitrary: fc.record({
      kind: fc.constant('wait' as const),
      ms: fc.integer({ min: 0, max: 4_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('step' as const),
      node,
      ms: fc.integer({ min: -3_000, max: 3_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('step-in-post' as const),
      node,
      ms: fc.integer({ min: -3_000, max: 3_000 }),
    }),
  },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('freeze' as const),
      node,
      ms: fc.integer({ min: 100, max: 6_000 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('stop' as const),
      node,
      ms: fc.integer({ min: 500, max: 4_000 }),
    }),
  },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('lose' as const), node }) },
  { weight: 1, arbitrary: fc.record({ kind: fc.constant('refuse' as const), node }) },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('late-post' as const),
      node,
      ms: fc.oneof(
        fc.integer({ min: 0, max: POST_LANDS_WITHIN_MS }),
        fc.integer({ min: POST_LANDS_WITHIN_MS - 2_000, max: POST_LANDS_WITHIN_MS }),
      ),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('pause' as const),
      node,
      afterMs: fc.integer({ min: 0, max: 3_000 }),
      // Within A2's check-to-answer bound half the time.
      ms: fc.oneof(
        fc.integer({ min: 50, max: PAUSE_MAX_MS }),
        fc.integer({ min: 50, max: CHECK_TO_ANSWER_MS }),
      ),
      at: fc.constantFrom('anywhere' as const, 'send' as const),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('sweep' as const) }) },
  {
    weight: 1,
    arbitrary: fc.record({
      kind: fc.constant('idle' as const),
      ms: fc.integer({ min: LIFE_S * 1_000, max: 4 * LIFE_S * 1_000 }),
    }),
  },
  {
    weight: 2,
    arbitrary: fc.record({
      kind: fc.constant('conflicts' as const),
      ms: fc.integer({ min: 500, max: 20_000 }),
    }),
  },
  { weight: 2, arbitrary: fc.record({ kind: fc.constant('lag' as const), node }) },
);

/** A global table's stage: the store's round trip bounded at 150 ms (BROKER_STORE_ROUND_TRIP_MS). */
const GLOBAL_ROUND_TRIP_MS = 150;
const GLOBAL_TIMING = protocolTiming({ storeRoundTripMs: GLOBAL_ROUND_TRIP_MS });

/**
 * 1–3 regions, each with its store round trip (ms), and each container's region. One region is
 * a table in the function's region (0, 5 or 30 ms, the default timing); two or three share a
 * global table (up to 150 ms each: the issue's 25, 70 and 95, the bound, or any below it).
 */
const regionsArb = fc.integer({ min: 1, max: 3 }).chain((count) =>
  fc.record({
    latencies: fc.array(
      count === 1
        ? fc.constantFrom(0, 5, 30)
        : fc.oneof(
            fc.constantFrom(25, 70, 95, GLOBAL_ROUND_TRIP_MS),
            fc.integer({ min: 0, max: GLOBAL_ROUND_TRIP_MS }),
          ),
      { minLength: count, maxLength: count },
    ),
    of: fc.array(fc.nat(count - 1), { minLength: NODES, maxLength: NODES }),
  }),
);

/** A small seeded generator (mulberry32): the store's jitter and the adapter's backoff draws. */
const prng = (seed: number) => {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4_294_967_296;
  };
};

const fleetArb = fc.record({
  /** Each container's memory re-check (s): mixed settings in one deployment. */
  rechecks: fc.array(fc.constantFrom(2, 5), { minLength: NODES, maxLength: NODES }),
  /** The regions, their store round trips, and which region each container runs in. */
  regions: regionsArb,
  /** Seeds the draws of each store call's jitter and of the adapter's conflict backoffs. */
  jitterSeed: fc.integer(),
  /** How many read copies the item has (ADR 0024): none, or 3. */
  copies: fc.constantFrom(0, 3),
  /** Each container's wall clock offset (ms) from the timeline. */
  offsets: fc.array(fc.integer({ min: -2_000, max: 2_000 }), {
    minLength: NODES,
    maxLength: NODES,
  }),
  commands: fc.array(commandArb, { minLength: 20, maxLength: 80, size: 'max' }),
});

type Fleet = typeof fleetArb extends fc.Arbitrary<infer T> ? T : never;

/** A broker's log lines in the trace, debug aside. */
const traceLogger = (trace: (line: string) => void, who: string): BrokerLogger => {
  const at =
    (level: string) =>
    (message: string, ...attributes: Record<string, unknown>[]) =>
      trace(`${who} ${level}: ${message} ${attributes.map((a) => JSON.stringify(a)).join(' ')}`);
  return { debug: () => undefined, info: at('info'), warn: at('warn'), error: at('error') };
};

/** Runs one drawn fleet and sequence; returns the violations found (none: the property holds). */
const runFleet = async ({
  rechecks,
  regions,
  jitterSeed,
  copies: copyCount,
  offsets,
  commands,
}: Fleet): Promise<string[]> => {
  const sim = new Sim(T0);
  /** `--trace`: what happened, on the timeline (ms from the start). */
  const trace = process.env.MODEL_TRACE
    ? (line: string) => process.stderr.write(`${String(sim.now() - T0).padStart(7)} ${line}\n`)
    : undefined;
  const random = prng(jitterSeed);
  const timing = regions.latencies.length > 1 ? GLOBAL_TIMING : undefined;
  /**
   * Writes to the item, by region, from when they were sent until their round trip ends (a write
   * returns once another region has it; on the store's time: a container frozen meanwhile does
   * not hold it up): two that overlap race.
   */
  const writes: { region: number; sentAt: number; until: number }[] = [];
  let conflictsUntil = Number.NEGATIVE_INFINITY;
  sim.draw = 0.3;
  const store = new InMemoryTokenStore();
  const copies = new ModelCopies(store, copyCount);
  const lagNext: boolean[] = [];
  const up = new Upstream();
  const violations: string[] = [];
  const written = new Set<string>();
  /** Who asked for each issued token, and when each container was frozen. */
  const issuedBy = new Map<string, number>();
  const frozenSince: (number | undefined)[] = [];
  const disturbed: { node: number; from: number; to: number }[] = [];
  /** Each container's stalls (`pause`): its answers may come that much later. */
  const paused: { node: number; from: number; to: number }[] = [];
  /** A stall each container is due at its first send from `from` on (`pause` at `send`). */
  const stallArmed: ({ from: number; ms: number } | undefined)[] = [];
  const model = sim.clock('model');
  /** `n` stalls `ms` now, unless it is stopped or frozen already; how long it stalled. */
  const stall = async (n: number, ms: number) => {
    if (frozenSince[n] !== undefined) return 0;
    const owner = `n${n}`;
    frozenSince[n] = sim.now();
    sim.frozen.add(owner);
    paused.push({ node: n, from: sim.now(), to: sim.now() + ms });
    trace?.(`${owner} stalls for ${ms} ms`);
    await model.sleep(ms);
    sim.frozen.delete(owner);
    frozenSince[n] = undefined;
    return ms;
  };
  /** Before `n` sends anything: the stall it is due, if any; how long it stalled. */
  const beforeSend = async (n: number) => {
    const armed = stallArmed[n];
    if (armed === undefined || sim.now() < armed.from) return 0;
    stallArmed[n] = undefined;
    return stall(n, armed.ms);
  };
  /** When each revoked token was revoked, on the timeline. */
  const revokedAt = new Map<string, number>();
  /** The upstream processes a POST of `n`'s now: a token issued, the one before it revoked. */
  const issue = (n: number, clock: Clock) => {
    const before = up.live;
    const issued = up.post(clock.now(), LIFE_S);
    if (before !== undefined) revokedAt.set(before, sim.now());
    issuedBy.set(issued.accessToken, n);
    return issued;
  };
  const clocks: Clock[] = [];
  const brokers: TokenBroker[] = [];
  const lastServed: (string | undefined)[] = [];
  const forcedAt: number[] = [];
  const reported = new Set<string>();
  const stats = { served: 0, refused: 0, codes: new Set<string>(), conflicts: 0 };
  const loseNext: boolean[] = [];
  const refuseNext: boolean[] = [];
  const upstreamClock = sim.clock('upstream');
  const latePost: (number | undefined)[] = [];
  const stepInPost: (number | undefined)[] = [];
  /** Tokens issued by a POST whose answer never came: never stored, by design (I1). */
  const unknownOutcome = new Set<string>();
  /** Tokens whose write the model refused (`refuse`): kept in their holder's memory only. */
  const unwritable = new Set<string>();
  const pending: Promise<unknown>[] = [];
  for (let i = 0; i < NODES; i += 1) {
    const clock = sim.clock(`n${i}`, offsets[i] ?? 0);
    clocks.push(clock);
    const issuer: TokenIssuer = {
      authorize: async () => sealCode('code'),
      requestToken: async (_connection, _credentials, _code, options) => {
        options.signal?.throwIfAborted();
        await beforeSend(i);
        // As the real attempt (lib/upstream/attempt.ts), the last thing before the send, on the
        // monotonic clock that counted any stall: no time left, or the lease ended, sends nothing.
        if (options.deadline.wholeMsLeft() <= 0) {
          throw new UpstreamUnavailableError(
            'No time left to call the Open API access-token endpoint',
            {
              retryAfterSeconds: 1,
            },
          );
        }
        options.signal?.throwIfAborted();
        const stepMs = stepInPost[i];
        if (stepMs !== undefined) {
          stepInPost[i] = undefined;
          sim.step(`n${i}`, stepMs);
        }
        const lateMs = latePost[i];
        if (lateMs !== undefined) {
          latePost[i] = undefined;
          const sentAt = sim.now();
          const issuedBefore = up.n;
          trace?.(
            `n${i} POST sent, given up in ${Math.min(UPSTREAM_TIMEOUT_MS, options.deadline.leftMs())} ms; the upstream will process it ${lateMs} ms after its send`,
          );
          // Processed late, upstream; the answer never comes: the client times out.
          // On the upstream's own time: a container frozen meanwhile does not hold it back.
          pending.push(
            upstreamClock.sleep(lateMs).then(() => {
              // I1: the lease covers a POST until it may land (A1): no other was processed
              // while it was out, or two tokens were issued in one lifetime.
              const between = up.n - issuedBefore;
              const issued = issue(i, clock);
              unknownOutcome.add(issued.accessToken);
              trace?.(
                `upstream: n${i}'s POST sent at ${sentAt - T0} processed late: ${issued.accessToken} issued, every earlier token revoked`,
              );
              if (between > 0) {
                violations.push(
                  `I1: ${between} token(s) issued while n${i}'s POST sent at ${sentAt - T0} ms was out; it was processed ${lateMs} ms after its send (${issued.accessToken})`,
                );
              }
            }),
          );
          await clock.sleep(Math.min(UPSTREAM_TIMEOUT_MS, Math.max(0, options.deadline.leftMs())));
          throw new UpstreamUnavailableError('Open API access-token request timed out', {
            retryAfterSeconds: 1,
            outcomeUnknown: true,
          });
        }
        const issued = issue(i, clock);
        trace?.(`upstream: ${issued.accessToken} issued to n${i}, every earlier token revoked`);
        return issued;
      },
    };
    const region = regions.of[i] ?? 0;
    const latency = regions.latencies[region] ?? 0;
    /**
     * One call of this region's store: its round trip is the region's latency less a jitter of
     * up to a quarter, and it is applied at a drawn point of it (answered after the rest). A
     * write that overlaps another region's write to the item during a conflict spell is not
     * applied, and answered with the conflict.
     */
    const late = async <T>(call: () => Promise<T>, write = false): Promise<T> => {
      await beforeSend(i);
      const roundTrip = latency - Math.floor(random() * (latency / 4));
      const out = Math.floor(random() * roundTrip);
      const sentAt = sim.now();
      const mine = { region, sentAt, until: sentAt + roundTrip };
      if (write) {
        // Writes answered long ago race nothing any more.
        while ((writes[0]?.until ?? sentAt) < sentAt - 1_000) writes.shift();
        writes.push(mine);
      }
      if (out > 0) await clock.sleep(out);
      const racing =
        write &&
        sim.now() <= conflictsUntil &&
        writes.some((w) => w.region !== region && w.sentAt <= sim.now() && w.until >= mine.sentAt);
      const refused = write && !racing && refuseNext[i] === true;
      if (refused) refuseNext[i] = false;
      const answer = racing || refused ? undefined : await call();
      if (roundTrip - out > 0) await clock.sleep(roundTrip - out);
      if (racing) {
        stats.conflicts += 1;
        throw new ReplicatedWriteConflictException({
          message: 'Replicated write conflict (not applied)',
          $metadata: {},
        });
      }
      if (refused) {
        throw new ModelRefusedWrite();
      }
      if (loseNext[i]) {
        // Applied by the store; the answer is lost on the way back.
        loseNext[i] = false;
        throw new Error('socket hang up (answer lost)');
      }
      return answer as T;
    };
    // The in-memory store stands for the DynamoDB adapter: a conflict is retried as the adapter
    // does (its ConflictRetries: full jitter within the call's budget, a release until its lease
    // lapses, a token write re-read when a retry finds its condition failed), and one still
    // conflicting when the budget runs out reaches the core as the adapter's error.
    const conflicts = new ConflictRetries({
      monotonic: () => clock.monotonic(),
      sleep: (ms) => clock.sleep(ms),
      random,
    });
    const refused = () =>
      new ConditionalCheckFailedException({ message: 'refused', $metadata: {} });
    const conditional = (
      bound: Parameters<ConflictRetries['conditional']>[0],
      w: () => Promise<boolean>,
    ) =>
      conflicts.conditional(bound, async () => {
        if (!(await late(w, true))) throw refused();
      });
    /** What this container has seen of each item (the adapter's memory: a newer image wins). */
    const seen = new Map<string, Order>();
    const see = (name: string, order: Order | undefined) => {
      const before = seen.get(name);
      if (!order) seen.delete(name);
      else if (!before || !isBefore(order, before)) seen.set(name, order);
    };
    /** A write of the main item: it adds to the item's sequence when it lands. */
    const sequenced =
      <T>(name: string, write: () => Promise<T>, landed: (answer: T) => boolean) =>
      async () => {
        const existed = store.items.has(name);
        const answer = await write();
        if (landed(answer)) copies.wrote(name, existed);
        return answer;
      };
    const yes = (ok: boolean) => ok;
    /**
     * After a write of the main item (landed or refused), as the adapter: the main item's image
     * goes to every copy, in parallel, each a round trip, before the answer. A `lag` stops the
     * writer first: its write landed, no copy has it, and its answer is lost.
     */
    const keep = async (name: string) => {
      if (copies.count === 0) return;
      if (lagNext[i]) {
        lagNext[i] = false;
        throw new Error('copies unwritten (writer stopped)');
      }
      const image = copies.image(name);
      if (!image) return;
      see(name, image);
      await Promise.all(
        Array.from({ length: copies.count }, (_, index) =>
          late(async () => copies.put(name, index, image)),
        ),
      );
    };
    const kept = async <T>(name: string, write: Promise<T>): Promise<T> => {
      const answer = await write;
      await keep(name);
      return answer;
    };
    const readMain: TokenStore['read'] = (name) =>
      late(async () => {
        const state = await store.read(name);
        see(name, copies.order(name));
        return state;
      });
    // With copies, one picked at random; a copy missing or older than an image seen here sends
    // the read to the main item.
    const read: TokenStore['read'] = async (name) => {
      if (copies.count > 0) {
        const index = Math.min(copies.count - 1, Math.floor(random() * copies.count));
        const image = await late(async () => copies.copy(name, index));
        const before = seen.get(name);
        if (image && !(before && isBefore(image, before))) {
          see(name, image);
          return image.state;
        }
      }
      return readMain(name);
    };
    const conditionalKept = (
      name: string,
      bound: Parameters<ConflictRetries['conditional']>[0],
      w: () => Promise<boolean>,
    ) => kept(name, conditional(bound, sequenced(name, w, yes)));
    const storeSeenFrom = wrap(store, {
      read,
      // As the adapter: conflicts retried until the caller's deadline (the budget without one),
      // and a take that conflicted judged from a read of the main item before it is sent again.
      acquireLease: (name, request, call = {}) => {
        conflicts.wrote(request);
        return kept(
          name,
          conflicts.retry(call, async (before) => {
            if (before > 0) {
              const verdict = afterConflict(request, await readMain(name));
              if (verdict) return verdict;
            }
            return late(
              sequenced(
                name,
                () => store.acquireLease(name, request),
                (attempt) => attempt.acquired,
              ),
              true,
            );
          }),
        );
      },
      renewLease: (n, l, t, call = {}) => {
        conflicts.wrote(t);
        return conditionalKept(n, call, () => store.renewLease(n, l, t));
      },
      releaseLease: (n, l, call = {}) =>
        conditionalKept(n, conflicts.untilLapsed(l, call), () => store.releaseLease(n, l)),
      deleteIfMatches: (n, d, o) =>
        conditionalKept(n, { deadline: o?.deadline }, () => store.deleteIfMatches(n, d, o)),
      markReported: (n, d, call = {}) => conditionalKept(n, call, () => store.markReported(n, d)),
      putToken: async (record, holder, call = {}) => {
        const name = record.connection;
        // A token write refused by the model (`refuse`) leaves its token in memory only.
        const wrote = await conflicts.attempt(call, async () => {
          const ok = await late(
            sequenced(
              name,
              async () => {
                const landed = await store.putToken(record, holder);
                if (landed) written.add(record.accessToken);
                // Issued on a caller's word (a forcing minValidity, a report, or a takeover of one).
                if (landed && record.forced) forcedAt.push(sim.now());
                return landed;
              },
              yes,
            ),
            true,
          ).catch((error: unknown) => {
            if (error instanceof ModelRefusedWrite) unwritable.add(record.accessToken);
            throw error;
          });
          if (!ok) throw refused();
        });
        if (wrote !== 'refused after a conflict') return kept(name, Promise.resolve(wrote));
        const { token, lease } = await readMain(name);
        await keep(name);
        return token?.tokenDigest === record.tokenDigest && lease === undefined;
      },
    });
    brokers.push(
      fleetBroker(storeSeenFrom, clock, up, {
        recheck: rechecks[i] ?? 5,
        window: WINDOW_S,
        floor: 2,
        timeout: UPSTREAM_TIMEOUT_MS,
        issuer,
        ...(timing ? { timing } : {}),
        ...(trace ? { logger: traceLogger(trace, `n${i}`) } : {}),
      }),
    );
  }
  const wasDisturbed = (n: number, from: number, to: number) =>
    disturbed.some((d) => d.node === n && d.from <= to && d.to >= from);
  /** How long `n` stalled between `from` and `to` (ms): what its answers may be late by. */
  const stalledMs = (n: number, from: number, to: number) =>
    paused
      .filter((p) => p.node === n)
      .reduce((sum, p) => sum + Math.max(0, Math.min(to, p.to) - Math.max(from, p.from)), 0);

  for (const command of commands) {
    trace?.(`> ${JSON.stringify(command)}`);
    switch (command.kind) {
      case 'request': {
        const broker = brokers[command.node] as TokenBroker;
        const sentAt = sim.now();
        // As the function's handlers: the deadline from the time the invocation has left, and a
        // refresh ahead this request starts runs after the answer until it (the extension keeps
        // the environment thawed until then).
        const left = command.leftMs;
        const by = deadlineOf(broker, { getRemainingTimeInMillis: () => left });
        const deadline = sentAt + by.leftMs();
        const minValiditySeconds = command.force ? LIFE_S - 1 : undefined;
        pending.push(
          broker
            .getToken('sandbox', { deadline: by, workUntil: by, minValiditySeconds })
            .then(
              async (answer) => {
                // Judged when it leaves: a stall after the check delays it.
                const stalled = await beforeSend(command.node);
                const token = answer.record.accessToken;
                stats.served += 1;
                lastServed[command.node] = token;
                trace?.(
                  `n${command.node} served ${token} (${answer.source}) to the request sent at ${sentAt - T0}`,
                );
                // A token a caller reported is the documented exception: dropped at once, its
                // successor goes out without a countdown (docs/contract.md, reuse). Past A2's
                // bound between the check and the answer, only a token revoked before the
                // request was sent is one the broker could have known of.
                const revoked = revokedAt.get(token);
                if (
                  revoked !== undefined &&
                  !reported.has(token) &&
                  (stalled <= CHECK_TO_ANSWER_MS || revoked < sentAt)
                ) {
                  violations.push(
                    `I2: n${command.node} served ${token} at ${sim.now() - T0} ms, ${sim.now() - revoked} ms after its revocation (request sent at ${sentAt - T0} ms${stalled > 0 ? `, its answer stalled ${stalled} ms` : ''})`,
                  );
                }
                return sim.now();
              },
              async (error: unknown) => {
                await beforeSend(command.node);
                stats.refused += 1;
                const code = String((error as { code?: string }).code ?? (error as Error).message);
                stats.codes.add(code);
                trace?.(`n${command.node} refused the request sent at ${sentAt - T0}: ${code}`);
                return sim.now();
              },
            )
            .then((answeredAt) => {
              // A stall delays an answer by as long, at most.
              const late = answeredAt - deadline - stalledMs(command.node, sentAt, answeredAt);
              if (late > 0 && !wasDisturbed(command.node, sentAt, answeredAt)) {
                violations.push(
                  `I3: n${command.node} answered ${answeredAt - deadline} ms after the deadline (sent at ${sentAt - T0} ms)`,
                );
              }
            }),
        );
        break;
      }
      case 'warm': {
        const clock = clocks[command.node] as Clock;
        pending.push(
          (brokers[command.node] as TokenBroker)
            .warmUp(Deadline.in(clock, 9_000))
            .catch(() => undefined),
        );
        break;
      }
      case 'report': {
        const token = lastServed[command.node];
        if (token) {
          reported.add(token);
          pending.push(
            (brokers[command.node] as TokenBroker)
              .invalidate('sandbox', token)
              .catch(() => undefined),
          );
        }
        break;
      }
      case 'wait':
      case 'idle':
        await sim.advance(command.ms);
        break;
      case 'sweep':
        // On AWS's clock (the timeline): TTL compares the item's ttl with the time it runs.
        store.sweepExpired(Math.floor(sim.now() / 1_000));
        copies.sweep(Math.floor(sim.now() / 1_000));
        break;
      case 'lag':
        lagNext[command.node] = copies.count > 0;
        break;
      case 'step':
        // Deadlines are judged on the monotonic clock (ADR 0012): a step exempts nobody from I3.
        sim.step(`n${command.node}`, command.ms);
        break;
      case 'step-in-post':
        stepInPost[command.node] = command.ms;
        break;
      case 'lose':
        loseNext[command.node] = true;
        break;
      case 'refuse':
        refuseNext[command.node] = true;
        break;
      case 'late-post':
        latePost[command.node] = command.ms;
        break;
      case 'conflicts':
        conflictsUntil = sim.now() + command.ms;
        break;
      case 'stop': {
        const owner = `n${command.node}`;
        if (frozenSince[command.node] !== undefined) break;
        frozenSince[command.node] = sim.now();
        sim.frozen.add(owner);
        const from = sim.now();
        // Thawed by a timer of the model's own, while the commands after this one run.
        void sim
          .clock('model')
          .sleep(command.ms)
          .then(() => {
            sim.frozen.delete(owner);
            frozenSince[command.node] = undefined;
            disturbed.push({ node: command.node, from, to: sim.now() });
          });
        break;
      }
      case 'pause': {
        const { node: n, afterMs, ms } = command;
        // By a timer of the model's own, while the commands after this one run.
        if (command.at === 'anywhere') void model.sleep(afterMs).then(() => stall(n, ms));
        else stallArmed[n] = { from: sim.now() + afterMs, ms };
        break;
      }
      case 'freeze': {
        const owner = `n${command.node}`;
        if (frozenSince[command.node] !== undefined) break;
        frozenSince[command.node] = sim.now();
        sim.frozen.add(owner);
        const from = sim.now();
        await sim.advance(command.ms);
        sim.frozen.delete(owner);
        frozenSince[command.node] = undefined;
        disturbed.push({ node: command.node, from, to: sim.now() });
        break;
      }
    }
    await settle();
  }
  // Everything started is allowed to finish.
  await sim.run(Promise.allSettled(pending), 120_000, 50);
  for (const broker of brokers) await sim.run(broker.idle(), 60_000, 50);

  // I1: every issued token reached the store, unless its container was frozen meanwhile, its
  // request's outcome was unknown (counted as issued: the grace held its lease), or its write
  // was refused (kept in memory only, under the lease's confirmation).
  for (const [token, n] of issuedBy) {
    const frozen = disturbed.some((d) => d.node === n && d.to !== Number.POSITIVE_INFINITY);
    if (!written.has(token) && !frozen && !unknownOutcome.has(token) && !unwritable.has(token))
      violations.push(`I1: ${token} (asked by n${n}) was issued but never stored`);
  }
  // I4: replacements on a caller's word at most one per window, plus one after each natural
  // issuance.
  const natural = up.n - forcedAt.length;
  const runMs = sim.now() - T0;
  const allowed = Math.floor(runMs / (WINDOW_S * 1_000)) + 1 + natural;
  if (forcedAt.length > allowed) {
    violations.push(
      `I4: ${forcedAt.length} forced replacements in ${runMs} ms (at most ${allowed})`,
    );
  }
  if (process.env.MODEL_TRACE) {
    process.stderr.write(
      `stats: ${stats.served} served, ${stats.refused} refused (${[...stats.codes].join(',')}), ${up.n} issued, ${forcedAt.length} forced, ${stats.conflicts} conflicts, ${sim.now() - T0} ms\n`,
    );
  }
  return violations;
};

describe('Model: the fleet under drawn commands keeps its invariants', () => {
  it(`holds I1–I4 over ${RUNS} drawn fleets and command sequences`, async () => {
    await fc.assert(
      fc.asyncProperty(fleetArb, async (fleet) => {
        const started = Date.now();
        if (process.env.MODEL_TRACE) process.stderr.write(`fleet: ${JSON.stringify(fleet)}\n`);
        const violations = await runFleet(fleet);
        if (process.env.MODEL_TRACE) {
          process.stderr.write(
            `run: ${fleet.commands.length} commands, ${Date.now() - started} ms, ${violations.length} violations\n`,
          );
        }
        if (violations.length > 0) throw new Error(violations.slice(0, 5).join('\n'));
      }),
      {
        numRuns: RUNS,
        ...(SEED === undefined ? {} : { seed: SEED }),
        // A replay stops at the counterexample the path names, unshrunk further.
        ...(PATH === undefined ? {} : { path: PATH, endOnFailure: true }),
      },
    );
  }, 600_000);
});
