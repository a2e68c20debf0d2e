/**
 * The faults of issue 10, one scenario each. Steps of the flow are recognised at the proxies:
 * the Open API step by its path, the DynamoDB operation by its `x-amz-target` header. A
 * trigger fires on the first matching event once armed, at most `max` times per run and not
 * again within `cooldownMs`, so that one fault hits one issuance at a time.
 */
import { COPIES_SCENARIOS } from './copies-scenarios.js';
import type { Scenario, ScenarioContext } from './harness.js';
import type { ProxiedRequest, ProxiedResponse } from './proxy.js';
import { REGION_SCENARIOS } from './region-scenarios.js';
import { RELEASE_SCENARIOS } from './release-scenarios.js';
import { SCHEDULE_SCENARIOS } from './schedule-scenarios.js';

/** Longer than the 3 s lease (so it lapses), shorter than the 8 s Lambda timeout. */
const PAUSE_MS = 5_000;

export const upstreamStep = (request: ProxiedRequest): 'authorize' | 'access-token' | undefined => {
  const path = request.path.split('?')[0] ?? '';
  if (path.endsWith('/oauth/authorize')) return 'authorize';
  if (path.endsWith('/oauth/access-token')) return 'access-token';
  return undefined;
};

/** `GetItem`, `PutItem`, `UpdateItem`, … */
export const dynamodbOperation = (request: ProxiedRequest): string =>
  String(request.headers['x-amz-target'] ?? '').split('.')[1] ?? '';

interface TriggerOptions {
  readonly max: number;
  readonly cooldownMs: number;
  /** Not before this many ms into the run. */
  readonly afterMs?: number;
}

/** A one-shot-at-a-time trigger shared by every container's proxies. */
export const trigger = (
  context: ScenarioContext,
  { max, cooldownMs, afterMs = 0 }: TriggerOptions,
) => {
  let fired = 0;
  let last = Number.NEGATIVE_INFINITY;
  return (): boolean => {
    const now = context.elapsed();
    if (!context.running() || fired >= max || now < afterMs || now - last < cooldownMs)
      return false;
    fired += 1;
    last = now;
    return true;
  };
};

/** Pauses the lease holder at one step of the flow, seen at its Open API proxy. */
const pauseAt =
  (step: 'authorize' | 'access-token', when: 'request' | 'response') =>
  (context: ScenarioContext) => {
    const fire = trigger(context, { max: 2, cooldownMs: 8_000 });
    for (const node of context.nodes) {
      const act = (request: ProxiedRequest) => {
        if (upstreamStep(request) !== step || !fire()) return;
        context.inject(`SIGSTOP ${PAUSE_MS} ms at the ${step} ${when}`, node.index);
        context.pause(node.index, PAUSE_MS);
      };
      node.upstream.setHooks(
        when === 'request'
          ? { onRequest: act }
          : {
              onResponse: (request) => {
                act(request);
              },
            },
      );
    }
  };

/**
 * Cuts the lease holder off from DynamoDB, the moment it starts the upstream flow (its
 * authorize request), for `ms`; the Open API link stays up.
 */
const partitionHolder =
  (kind: 'refuse' | 'blackhole', ms: number) => (context: ScenarioContext) => {
    const fire = trigger(context, { max: 2, cooldownMs: ms + 3_000 });
    for (const node of context.nodes) {
      node.upstream.setHooks({
        onRequest: (request) => {
          if (upstreamStep(request) !== 'authorize' || !fire()) return;
          context.inject(`DynamoDB link ${kind} for ${ms} ms (holder)`, node.index);
          node.dynamodb.setMode({ kind });
          const from = context.elapsed();
          context.faulted(node.index, from, from + ms);
          context.later(ms, () => node.dynamodb.setMode({ kind: 'pass' }));
        },
      });
    }
  };

/**
 * Holds one access-token POST at the Open API side until `holdMs` after it arrived, then lets
 * it through: the upstream processes it late (revoking every earlier token when it issues).
 * Its retries (the same body: the same single-use code) queue behind it, as at an upstream that
 * processes one client's requests in order; a new flow (a new code) is not held.
 */
const holdPost = (context: ScenarioContext, first: ProxiedRequest, holdMs: number) => {
  const releaseAt = Date.now() + holdMs;
  let queue = Promise.resolve();
  return (request: ProxiedRequest): Promise<void> | undefined => {
    if (!request.body.equals(first.body) || Date.now() >= releaseAt) return undefined;
    queue = queue.then(() => context.sleep(Math.max(0, releaseAt - Date.now())));
    return queue;
  };
};

/**
 * On every container: the first access-token POST that `fire` lets through is held (`holdMs`,
 * with its retries) and `onFire` runs.
 */
const holdFirstPost = (
  context: ScenarioContext,
  fire: () => boolean,
  holdMs: number,
  onFire: (node: ScenarioContext['nodes'][number]) => void,
) => {
  for (const node of context.nodes) {
    let hold: ((request: ProxiedRequest) => Promise<void> | undefined) | undefined;
    node.upstream.setHooks({
      onRequest: (request) => {
        if (upstreamStep(request) !== 'access-token') return undefined;
        const held = hold?.(request);
        if (held || !fire()) return held;
        onFire(node);
        hold = holdPost(context, request, holdMs);
        return hold(request);
      },
    });
  }
};

const S = (seconds: number) => seconds * 1000;

/**
 * Faults aimed at the lease fire at the cold start and again at the refresh; 26 s leaves room
 * for the second one's consequences (the refresh comes ~11 s after the first token).
 */
const LONGER = { durationMs: 26_000 };

/**
 * A mostly idle fleet (issue 17): 30 s tokens, a 15 s window, each container invoked every
 * 0.45–1.35 s, no warm-up, 75 s (two refreshes).
 */
const IDLE_FLEET = {
  lifetimeSeconds: 30,
  refreshWindowSeconds: 15,
  thinkMs: 900,
  warmUpEveryMs: 0,
  durationMs: 75_000,
};
/** How long the lease holder is stopped mid-countdown: over ten 3 s leases. */
const HOLDER_STOP_MS = 40_000;
/** How long the holder is stopped between its fence and its POST: past the POST's budget. */
const POST_STOP_MS = 6_000;

/** The countdown a lease write announces, from its body (-1 when it is none). */
export const countdownOf = (request: ProxiedRequest): number => {
  try {
    const body = JSON.parse(request.body.toString('utf8')) as {
      ExpressionAttributeValues?: Record<string, { N?: string }>;
    };
    return Number(body.ExpressionAttributeValues?.[':countdown']?.N ?? -1);
  } catch {
    return -1;
  }
};

/**
 * Runs `act` once, 5 s into the run or later, on the container whose lease holder sends a
 * countdown step with 3 or more left (a refresh well under way): the moment the holder-stop and
 * isolated-region scenarios strike at.
 */
export const onCountdownStep = (
  context: ScenarioContext,
  act: (node: ScenarioContext['nodes'][number], countdown: number) => void,
): void => {
  const fire = trigger(context, { max: 1, cooldownMs: 0, afterMs: 5_000 });
  for (const node of context.nodes) {
    node.dynamodb.setHooks({
      onRequest: (request) => {
        if (dynamodbWrite(request) !== 'heartbeat' || countdownOf(request) < 3 || !fire()) return;
        act(node, countdownOf(request));
      },
    });
  }
};

/**
 * What a DynamoDB write of the broker is for, read from its body: `take` (acquire the lease),
 * `confirm` (the fence before the access-token POST: a renewal longer than the 3 s lease),
 * `heartbeat` (a 3 s renewal), `release`, `drop-token` (compare-and-delete), `put` (the token,
 * which releases the lease: a `PutItem` of the main item before read copies, an `UpdateItem`
 * setting the token's attributes by placeholder since), `copy` (an image put on a read copy,
 * ADR 0024), or `other` (reads, the operator's count of copies).
 */
export type DynamodbWrite =
  | 'take'
  | 'confirm'
  | 'heartbeat'
  | 'release'
  | 'drop-token'
  | 'put'
  | 'copy'
  | 'other';

export const dynamodbWrite = (request: ProxiedRequest): DynamodbWrite => {
  const operation = dynamodbOperation(request);
  if (operation !== 'UpdateItem' && operation !== 'PutItem') return 'other';
  let body: {
    UpdateExpression?: string;
    ExpressionAttributeValues?: Record<string, { N?: string }>;
    Item?: { pk?: { S?: string } };
  };
  try {
    body = JSON.parse(request.body.toString('utf8'));
  } catch {
    return 'other';
  }
  if (operation === 'PutItem') {
    return body.Item?.pk?.S?.startsWith('copy#') ? 'copy' : 'put';
  }
  const expression = body.UpdateExpression ?? '';
  if (expression.startsWith('SET #a0 = :a0')) return 'put';
  if (expression.startsWith('SET leaseHolder')) return 'take';
  if (expression.startsWith('SET leaseVersion')) {
    const durationMs = Number(body.ExpressionAttributeValues?.[':durationMs']?.N);
    return durationMs > 3_000 ? 'confirm' : 'heartbeat';
  }
  if (expression.startsWith('REMOVE leaseHolder')) return 'release';
  if (expression.startsWith('REMOVE accessToken')) return 'drop-token';
  return 'other';
};

/**
 * One lost DynamoDB answer: which write, how, in which phase of the run, and whether the SDK's
 * retries of it lose theirs too.
 */
interface AnswerShot {
  readonly write: DynamodbWrite;
  /**
   * `reset`: the SDK sees ECONNRESET at once and retries (its maxAttempts is 2). `drop`: no
   * answer; the broker's SDK client sets `requestTimeout` without `throwOnRequestTimeout`, which
   * with @smithy/node-http-handler 4.x only warns, so nothing but the broker's own bound (the
   * caller's deadline, or the POST budget for the fence) ends the wait, and nothing is retried.
   */
  readonly fault: 'reset' | 'drop';
  /** `first`: the SDK's retry gets its answer; `every`: its retries (same body) lose theirs too. */
  readonly attempts: 'first' | 'every';
  /**
   * `cold-start`: before any token was stored; `refresh`: a token was stored at least
   * REFRESH_AFTER_MS before (so the flow replaces a valid token).
   */
  readonly phase: 'cold-start' | 'refresh';
}

/** A refresh-phase shot fires no earlier than this after the first token was stored. */
const REFRESH_AFTER_MS = 3_000;
/** How long the retries of a shot's write (same body) keep losing their answers. */
const RETRIES_WITHIN_MS = 3_000;

/**
 * On every container's DynamoDB proxy: each shot, in order, fires on the first write of its kind
 * that dynalite applied (HTTP 200) in its phase, once the shots before it fired or their phase
 * passed. The write took effect; the container gets a reset or no answer instead. With `every`,
 * the SDK's retries of that write (the same body, on that container) lose theirs too.
 */
const loseDynamodbAnswers = (shots: readonly AnswerShot[]) => (context: ScenarioContext) => {
  const fired = shots.map(() => false);
  const repeats: { node: number; body: Buffer; fault: AnswerShot['fault']; until: number }[] = [];
  /** Run time at which dynalite first accepted a token write. */
  let storedAt: number | undefined;
  const inPhase = (phase: AnswerShot['phase'], now: number) =>
    phase === 'cold-start'
      ? storedAt === undefined
      : storedAt !== undefined && now - storedAt >= REFRESH_AFTER_MS;
  const phasePassed = (phase: AnswerShot['phase']) =>
    phase === 'cold-start' && storedAt !== undefined;
  for (const node of context.nodes) {
    node.dynamodb.setHooks({
      onResponse: (request, response) => {
        const now = context.elapsed();
        const write = dynamodbWrite(request);
        const repeat = repeats.find(
          (r) => r.node === node.index && now < r.until && r.body.equals(request.body),
        );
        if (repeat) {
          context.inject(`${write} retried by the SDK: answer lost too`, node.index);
          return { kind: repeat.fault };
        }
        if (!context.running() || response.status !== 200) return undefined;
        const index = shots.findIndex(
          (shot, i) =>
            !fired[i] &&
            shot.write === write &&
            inPhase(shot.phase, now) &&
            shots.slice(0, i).every((earlier, j) => fired[j] || phasePassed(earlier.phase)),
        );
        if (write === 'put') storedAt ??= now;
        const shot = shots[index];
        if (!shot) return undefined;
        fired[index] = true;
        context.inject(
          `${shot.phase}: ${write} applied, answer lost (${shot.fault === 'reset' ? 'connection reset' : 'no answer'}${shot.attempts === 'every' ? ', SDK retries too' : ''})`,
          node.index,
        );
        // A reset is over once the SDK retried; a dropped answer holds the container up to
        // its caller's deadline.
        const span = shot.fault === 'reset' ? RETRIES_WITHIN_MS : context.settings.lambdaTimeoutMs;
        context.faulted(node.index, now, now + span);
        if (shot.attempts === 'every') {
          repeats.push({
            node: node.index,
            body: request.body,
            fault: shot.fault,
            until: now + RETRIES_WITHIN_MS,
          });
        }
        return { kind: shot.fault };
      },
    });
  }
};

/** A gateway's error page for a request the upstream did process. */
const gatewayError = (status: 502 | 503): ProxiedResponse => ({
  status,
  headers: { 'content-type': 'application/json' },
  body: Buffer.from(
    JSON.stringify({
      code: '999999',
      message: status === 502 ? 'bad gateway' : 'service unavailable',
    }),
  ),
});

/**
 * A lost answer may hold a flow up to the caller's 8 s deadline at the cold start, which moves
 * the refresh (and its lost answers) that much later: 30 s leaves room for its consequences.
 */
const DYNAMODB_ANSWER_LOST = { durationMs: 30_000 };

/** Shared between the storm scenario's hook and its callers (one run at a time). */
const storm = { until: 0 };

const skewEnv = (index: number, preload: string, skewMs: number): Record<string, string> =>
  index === 0 ? { NODE_OPTIONS: `--import=${preload}`, CHAOS_CLOCK_SKEW_MS: String(skewMs) } : {};

const skewInstall = (skewMs: number) => (context: ScenarioContext) => {
  context.inject(`clock ${skewMs > 0 ? '+' : ''}${skewMs} ms`, 0);
  context.faulted(0, 0, context.settings.durationMs);
};

/**
 * One extra caller that asks for `minValidity` = the token lifetime + `offsetSeconds` every 2 s,
 * in turn on each container.
 */
const askingEvery2s =
  (offsetSeconds: number): NonNullable<Scenario['extra']> =>
  async (context, invoke) => {
    const sign = offsetSeconds < 0 ? '-' : '+';
    let turn = 0;
    while (context.running()) {
      await context.sleep(S(2));
      if (!context.running()) break;
      const node = turn % context.nodes.length;
      context.inject(`getToken minValidity = lifetime ${sign} ${Math.abs(offsetSeconds)}`, node);
      await invoke(node, {
        action: 'getToken',
        connection: 'sandbox',
        minValidity: context.settings.lifetimeSeconds + offsetSeconds,
      });
      turn += 1;
    }
  };

export const SCENARIOS: readonly Scenario[] = [
  {
    name: 'control',
    injects: 'nothing (20 s tokens, refresh window 9 s: under half the lifetime)',
  },
  {
    name: 'control-long-window',
    injects:
      'nothing, refresh window 14 s: over half the 20 s lifetime, as the default 600 s window with 15-minute tokens',
    predicted: 'issue #4: revoked tokens served at every refresh',
    settings: { refreshWindowSeconds: 14 },
  },
  {
    name: 'pause-after-authorize',
    settings: LONGER,
    injects: `holder SIGSTOPped ${PAUSE_MS / 1000} s when its authorize answer arrives (before the access-token POST)`,
    predicted: 'issue #1: revoked tokens served',
    install: pauseAt('authorize', 'response'),
  },
  {
    name: 'pause-during-post',
    settings: LONGER,
    injects: `holder SIGSTOPped ${PAUSE_MS / 1000} s when its access-token POST leaves (the upstream processes it meanwhile)`,
    install: pauseAt('access-token', 'request'),
  },
  {
    name: 'pause-before-write',
    settings: LONGER,
    injects: `holder SIGSTOPped ${PAUSE_MS / 1000} s when its token write reaches DynamoDB (the write lands after the pause)`,
    install: (context) => {
      const fire = trigger(context, { max: 2, cooldownMs: 8_000 });
      for (const node of context.nodes) {
        node.dynamodb.setHooks({
          onRequest: async (request) => {
            if (dynamodbWrite(request) !== 'put' || !fire()) return;
            context.inject(`SIGSTOP ${PAUSE_MS} ms at the token write`, node.index);
            context.pause(node.index, PAUSE_MS);
            await context.sleep(PAUSE_MS);
          },
        });
      }
    },
  },
  {
    name: 'partition-dynamodb-refused',
    settings: LONGER,
    injects: 'holder\u2019s DynamoDB link resets connections for 5 s from its authorize request',
    install: partitionHolder('refuse', S(5)),
  },
  {
    name: 'partition-dynamodb-blackhole',
    settings: LONGER,
    injects:
      'holder\u2019s DynamoDB link accepts and never answers for 5 s from its authorize request',
    install: partitionHolder('blackhole', S(5)),
  },
  {
    name: 'partition-dynamodb-queued-post',
    settings: LONGER,
    injects:
      'holder\u2019s DynamoDB link refused for 6 s from its access-token POST, that POST queued 4 s at the upstream (past the 3 s lease)',
    predicted: 'issue #2: the stored token is revoked for the rest of its lifetime',
    install: (context) => {
      const fire = trigger(context, { max: 2, cooldownMs: 9_000 });
      holdFirstPost(context, fire, S(4), (node) => {
        context.inject('DynamoDB refused 6 s + access-token POST held 4 s', node.index);
        node.dynamodb.setMode({ kind: 'refuse' });
        const from = context.elapsed();
        context.faulted(node.index, from, from + S(6));
        context.later(S(6), () => node.dynamodb.setMode({ kind: 'pass' }));
      });
    },
  },
  {
    name: 'dynamodb-delay',
    injects:
      'container 0\u2019s DynamoDB answers delayed 400\u2013600 ms, whole run (6 s tokens, 3 s window: a refresh every ~4.5 s)',
    predicted: 'issue #6: revoked tokens served',
    // The race is narrow (about a third of refreshes, see chaos/README.md): more refreshes.
    settings: { lifetimeSeconds: 6, refreshWindowSeconds: 3 },
    runs: 3,
    install: (context) => {
      const node = context.nodes[0];
      if (!node) return;
      context.inject('DynamoDB answers delayed 400-600 ms', 0);
      context.faulted(0, 0, context.settings.durationMs);
      node.dynamodb.setMode({ kind: 'delay', minMs: 400, maxMs: 600 });
    },
  },
  {
    name: 'late-post-answer',
    injects:
      'holder\u2019s access-token POSTs held 9 s at the upstream (past the 8 s deadline), then processed: issuance and revocation land late (30 s tokens, 14 s window)',
    predicted: 'issue #3: the old token, revoked by the late POST, keeps being served',
    // The old token must outlive the hold: a 30 s token refreshed 14 s ahead, so that the POST
    // held past the 8 s deadline lands while the token it revokes is still being served.
    settings: { lifetimeSeconds: 30, refreshWindowSeconds: 14, durationMs: 30_000 },
    install: (context) => {
      // Aimed at a refresh (a valid token is out there), not at the cold start.
      const fire = trigger(context, { max: 1, cooldownMs: 0, afterMs: S(3) });
      holdFirstPost(context, fire, S(9), (node) => {
        context.inject('access-token POST held 9 s', node.index);
        const from = context.elapsed();
        context.faulted(node.index, from, from + S(9));
      });
    },
  },
  {
    name: 'post-5xx-after-processing',
    injects:
      'at a refresh, the holder\u2019s access-token POST is processed (the token issued, the earlier one revoked) but answered 502, at the next refresh 503 (40 s run: two refreshes)',
    // Two refreshes: the cold start's token is refreshed at ~12 s; after the 5xx the next
    // token comes once the grace has passed (~18 s) and is refreshed at ~30 s.
    settings: { durationMs: 40_000 },
    install: (context) => {
      // Aimed at refreshes (a valid token is out there), not at the cold start, nor at the
      // issuance that follows the 5xx.
      const fire = trigger(context, { max: 2, cooldownMs: S(12), afterMs: S(3) });
      let fires = 0;
      for (const node of context.nodes) {
        node.upstream.setHooks({
          onResponse: (request, response) => {
            if (upstreamStep(request) !== 'access-token' || response.status !== 200) {
              return undefined;
            }
            if (!fire()) return undefined;
            const status = fires % 2 === 0 ? 502 : 503;
            fires += 1;
            context.inject(
              `access-token POST processed (token issued), answered HTTP ${status}`,
              node.index,
            );
            const from = context.elapsed();
            // The grace (BROKER_UPSTREAM_TIMEOUT_MS, 5 s) the holder keeps its lease through.
            context.faulted(node.index, from, from + S(5));
            return { kind: 'replace', response: gatewayError(status) };
          },
        });
      }
    },
  },
  {
    name: 'dynamodb-answer-lost',
    settings: DYNAMODB_ANSWER_LOST,
    injects:
      'a lease UpdateItem applied by DynamoDB, its answer lost on the holder\u2019s link. Cold start: the lease take (reset; the SDK retry answered), then the fence before the POST (no answer). Refresh: the take (no answer), then the next holder\u2019s fence (reset, SDK retry too)',
    install: loseDynamodbAnswers([
      { write: 'take', fault: 'reset', attempts: 'first', phase: 'cold-start' },
      { write: 'confirm', fault: 'drop', attempts: 'first', phase: 'cold-start' },
      { write: 'take', fault: 'drop', attempts: 'first', phase: 'refresh' },
      { write: 'confirm', fault: 'reset', attempts: 'every', phase: 'refresh' },
    ]),
  },
  {
    name: 'dynamodb-answer-lost-put',
    settings: DYNAMODB_ANSWER_LOST,
    injects:
      'the token write applied by DynamoDB (releasing the lease with it), its answer lost on the holder\u2019s link. Cold start: reset (the SDK retry answered: its condition fails). Refresh: no answer',
    install: loseDynamodbAnswers([
      { write: 'put', fault: 'reset', attempts: 'first', phase: 'cold-start' },
      { write: 'put', fault: 'drop', attempts: 'first', phase: 'refresh' },
    ]),
  },
  {
    name: 'clock-skew-ahead',
    injects: 'container 0\u2019s wall clock 2.5 s ahead (Date.now / new Date), whole run',
    predicted: 'issue #7: takes over live leases (2 issuances), treats a live refresh as dead',
    env: (index, paths) => skewEnv(index, paths.clockSkew, 2_500),
    install: skewInstall(2_500),
  },
  {
    name: 'clock-skew-behind',
    injects: 'container 0\u2019s wall clock 2.5 s behind, whole run',
    env: (index, paths) => skewEnv(index, paths.clockSkew, -2_500),
    install: skewInstall(-2_500),
  },
  {
    name: 'dynamodb-stall',
    injects:
      'container 0\u2019s DynamoDB link forwards requests but never answers, 3\u20137 s and 12\u201316 s into the run',
    predicted: 'issue #8: callers get no answer before the deadline',
    install: (context) => {
      const node = context.nodes[0];
      if (!node) return;
      for (const [from, to] of [
        [S(3), S(7)],
        [S(12), S(16)],
      ] as const) {
        context.faulted(0, from, to);
        context.later(from, () => {
          context.inject(`DynamoDB link stalled for ${(to - from) / 1000} s`, 0);
          node.dynamodb.setMode({ kind: 'stall' });
        });
        context.later(to, () => node.dynamodb.setMode({ kind: 'pass' }));
      }
    },
  },
  {
    name: 'invalidate-storm',
    injects:
      'when a refresh starts (authorize request), every caller reports each token it gets with invalidate for 2 s',
    callers: {
      invalidateAfter: () => storm.until > Date.now(),
    },
    install: (context) => {
      storm.until = 0;
      const fire = trigger(context, { max: 2, cooldownMs: 6_000, afterMs: S(3) });
      for (const node of context.nodes) {
        node.upstream.setHooks({
          onRequest: (request) => {
            if (upstreamStep(request) !== 'authorize' || !fire()) return;
            context.inject('invalidate storm for 2 s', node.index);
            storm.until = Date.now() + S(2);
          },
        });
      }
    },
  },
  {
    name: 'impossible-min-validity',
    injects:
      'one extra caller asks minValidity = lifetime + 5 s (under the 30-day cap) every 2 s, in turn on each container',
    predicted: 'issue #5: each request forces an issuance that revokes everyone\u2019s token',
    extra: askingEvery2s(5),
  },
  {
    name: 'forcing-caller',
    injects:
      'one extra caller asks minValidity = lifetime - 1 s (only a new token gives it) every 2 s, in turn on each container',
    predicted:
      'issue #19: each request replaced the token, revoking everyone’s; bounded to one replacement per refresh window',
    extra: askingEvery2s(-1),
  },
  // Issue 17: Lambda's execution model. Every scenario runs frozen containers; these four are
  // about it. Mostly idle: each container is invoked every 0.45–1.35 s, tokens of 30 s with a
  // 15 s window, so a refresh started by a request has to run in an environment nobody invokes.
  {
    name: 'idle-fleet-requests-only',
    injects:
      'no fault: 4 mostly idle frozen containers (a request every 0.45–1.35 s each), 30 s tokens, 15 s window, no warm-up: refreshes start only from requests',
    settings: IDLE_FLEET,
  },
  {
    name: 'idle-fleet-no-extension',
    injects:
      'the same mostly idle frozen fleet, requests only, with the after-response extension off (BROKER_LAMBDA_EXTENSION=off): what Lambda did to refresh ahead before issue 17',
    settings: IDLE_FLEET,
    env: () => ({ BROKER_LAMBDA_EXTENSION: 'off' }),
  },
  {
    name: 'idle-fleet-foreground-only',
    injects:
      'the same mostly idle frozen fleet, requests only, with no refresh from requests (BROKER_REFRESH_AHEAD=off): a caller whose token no longer satisfies it refreshes, in the foreground',
    settings: IDLE_FLEET,
    env: () => ({ BROKER_REFRESH_AHEAD: 'off' }),
  },
  {
    name: 'idle-fleet-warm-up',
    injects:
      'no fault: the same mostly idle frozen fleet, with a warm-up every 7 s besides the requests',
    settings: { ...IDLE_FLEET, warmUpEveryMs: 7_000 },
  },
  {
    name: 'mixed-settings',
    injects:
      'no fault: a rolling configuration change caught halfway: containers 0 and 1 re-check memory every 1 s, 2 and 3 every 10 s (3.75 s once clamped to a quarter of the window), on the mostly idle frozen fleet with a warm-up every 7 s',
    settings: { ...IDLE_FLEET, warmUpEveryMs: 7_000 },
    env: (index) => ({ BROKER_MEMORY_RECHECK_SECONDS: index < 2 ? '1' : '10' }),
  },
  {
    name: 'holder-stopped-past-lease',
    injects: `the lease holder SIGSTOPped ${HOLDER_STOP_MS / 1000} s at a countdown step (over 10 leases long): Lambda's function timeout (8 s) resets its environment meanwhile, as Lambda does`,
    settings: { ...IDLE_FLEET, warmUpEveryMs: 7_000, durationMs: 60_000 },
    install: (context) =>
      onCountdownStep(context, (node, countdown) => {
        context.inject(`SIGSTOP ${HOLDER_STOP_MS} ms at countdown step ${countdown}`, node.index);
        context.pause(node.index, HOLDER_STOP_MS);
      }),
  },
  {
    name: 'post-in-socket-at-freeze',
    injects: `the holder SIGSTOPped ${POST_STOP_MS / 1000} s the moment its fence is confirmed, before its access-token POST is written: the POST leaves on thaw, or never (the bound: the function timeout)`,
    settings: { ...IDLE_FLEET, warmUpEveryMs: 7_000, durationMs: 45_000 },
    install: (context) => {
      const fire = trigger(context, { max: 2, cooldownMs: 15_000, afterMs: 5_000 });
      for (const node of context.nodes) {
        node.dynamodb.setHooks({
          onResponse: (request) => {
            if (dynamodbWrite(request) !== 'confirm' || !fire()) return;
            context.inject(`SIGSTOP ${POST_STOP_MS} ms at the fence's answer`, node.index);
            context.pause(node.index, POST_STOP_MS);
          },
        });
      }
    },
  },
  // Issue 26: three regions on one multi-Region strongly consistent table.
  ...REGION_SCENARIOS,
  // Issue 25: the previous release and this one in one fleet.
  ...RELEASE_SCENARIOS,
  // Issue 25's hot key: read copies of the token item, writers stopped before their copies.
  ...COPIES_SCENARIOS,
  // Issue 35: the schedule: other work on the cores, GC-like pauses, a refresh late in its
  // invocation.
  ...SCHEDULE_SCENARIOS,
];

export const scenarioNamed = (name: string): Scenario | undefined =>
  SCENARIOS.find((s) => s.name === name);
