/**
 * Issue 35: the schedule the protocol runs on. Every environment runs at Lambda's CPU share of
 * the stack's 512 MB (0.29 of a core, `local/cpu-share.ts`) where the cgroup controller is
 * writable; these scenarios take CPU and time away from it further:
 * - `noisy-neighbour`: other work on the same cores, inside the environments' CPU share;
 * - `gc-pauses`: GC-like stops of 50–500 ms at random points of the holder and of readers;
 * - `late-refresh-in-invocation`: a refresh a request started after its response, whose POST
 *   leaves late in its invocation and is processed 9 s after it arrived (A1's case).
 *
 * Imported by `scenarios.ts` (the suite's order); it uses that module's helpers only inside the
 * scenarios' functions, so the import cycle is harmless.
 */
import { type ChildProcess, spawn } from 'node:child_process';
import { writeFileSync } from 'node:fs';
import { cpus } from 'node:os';
import { join } from 'node:path';
import type { ChaosNode, Scenario, ScenarioContext } from './harness.js';
import { dynamodbOperation, dynamodbWrite, upstreamStep } from './scenarios.js';

const S = (seconds: number) => seconds * 1000;
const between = (min: number, max: number) => min + Math.random() * (max - min);

/**
 * A busy loop that ends itself once `target` (a PID) is gone or its parent (the harness) is: a
 * hog must never outlive the run, nor hold a cgroup that is to be removed.
 */
const HOG = `const target = Number(process.argv[1]); const parent = process.ppid;
for (;;) {
  const until = Date.now() + 20;
  while (Date.now() < until) {}
  if (process.ppid !== parent) process.exit(0);
  if (target > 0) { try { process.kill(target, 0); } catch { process.exit(0); } }
}`;

const startHog = (target: number): ChildProcess =>
  spawn(process.execPath, ['-e', HOG, String(target)], { stdio: 'ignore' });

/** Containers whose environments get a neighbour: half the fleet (a slow half and a fast one). */
const NOISY = (node: ChaosNode) => node.index < 2;

/**
 * From 2 s on, a busy loop in the CPU group of each environment of containers 0 and 1 (each new
 * one too): it takes its share of the environment's 0.29 core, as other work on a host's cores
 * does, so those environments run at about half their share, the other two at their whole.
 * Where environments run on whole cores (no cgroup), one busy loop per core on the machine.
 */
const noisyNeighbour = (context: ScenarioContext) => {
  const hogs: ChildProcess[] = [];
  context.cleanup(() => {
    for (const hog of hogs) hog.kill('SIGKILL');
  });
  if (context.cpu.kind !== 'quota') {
    context.later(S(2), () => {
      for (let i = 0; i < cpus().length; i += 1) hogs.push(startHog(0));
      context.inject(
        `${cpus().length} busy loops on the machine's cores (no cgroup: ${context.cpu.kind})`,
      );
    });
    return;
  }
  const hogged = new Set<string>();
  const visit = () => {
    if (!context.running()) return;
    for (const node of context.nodes.filter(NOISY)) {
      for (const environment of node.container.environments()) {
        const { cpu, state, id, pid } = environment;
        if (hogged.has(id) || cpu.kind !== 'quota') continue;
        if (state === 'ended' || state === 'shutting-down') continue;
        hogged.add(id);
        const hog = startHog(pid);
        hogs.push(hog);
        try {
          writeFileSync(join(cpu.group, 'cgroup.procs'), String(hog.pid));
          context.inject(`busy loop in the CPU group of environment ${id}`, node.index);
        } catch {
          // The environment ended between the list and the write: its hog ends itself.
          hog.kill('SIGKILL');
        }
      }
    }
    context.later(200, visit);
  };
  context.later(S(2), visit);
};

/** A pause: 50–500 ms, uniform. */
const pauseMs = () => Math.round(between(50, 500));

/** The environments of a node that are running (not frozen between invocations). */
const running = (node: ChaosNode) =>
  node.container.environments().filter((e) => e.state === 'busy' || e.state === 'after-response');

/**
 * At the holder's points: each answer to a lease write it sent (the take, a countdown step or
 * heartbeat, the fence, the token write) stops its container's running environments, with a
 * chance of 1 in 3, before the answer reaches them (between a write and what it leads to); a
 * reader's `GetItem` answer, 1 in 20. The random instants are the `extra` loop below.
 */
const gcPausesAtSteps = (context: ScenarioContext) => {
  for (const node of context.nodes) {
    node.dynamodb.setHooks({
      onResponse: (request) => {
        if (!context.running()) return undefined;
        const write = dynamodbWrite(request);
        const holder =
          write === 'take' || write === 'heartbeat' || write === 'confirm' || write === 'put';
        const reader = dynamodbOperation(request) === 'GetItem';
        if (!(holder && Math.random() < 1 / 3) && !(reader && Math.random() < 1 / 20)) {
          return undefined;
        }
        const ms = pauseMs();
        const stopped = running(node).filter((e) => context.pauseProcess(node.index, e.pid, ms));
        if (stopped.length > 0) {
          context.inject(
            `GC pause ${ms} ms at ${holder ? `the holder's ${write}` : "a reader's GetItem"} answer`,
            node.index,
          );
        }
        return undefined;
      },
    });
  }
};

/**
 * About three pauses a second at random instants, each of one running environment of a
 * container drawn at random (drawn again, up to 20 times a millisecond apart, while the one
 * drawn has none running: a busy fleet's environments are frozen most of the time).
 */
const gcPausesAtRandom: NonNullable<Scenario['extra']> = async (context) => {
  while (context.running()) {
    await context.sleep(between(150, 500));
    for (let draw = 0; draw < 20 && context.running(); draw += 1) {
      const node = context.nodes[Math.floor(Math.random() * context.nodes.length)];
      const candidates = node ? running(node) : [];
      const environment = candidates[Math.floor(Math.random() * candidates.length)];
      if (!node || !environment) {
        await context.sleep(1);
        continue;
      }
      const ms = pauseMs();
      if (context.pauseProcess(node.index, environment.pid, ms)) {
        context.inject(`GC pause ${ms} ms at a random instant (${environment.state})`, node.index);
      }
      break;
    }
  }
};

/** Held this long at the upstream, then processed: under A1's 10 s, past the 8 s deadline. */
const LATE_POST_HOLD_MS = 9_000;
/** The POST is held only if it leaves with at most this much of its invocation left. */
const LATE_IN_INVOCATION_MS = 4_500;

/**
 * The refresh a request started after its response (no warm-up: every refresh is a request's),
 * whose access-token POST left late in that invocation: held 9 s at the upstream, then
 * processed (it issues, revoking every earlier token). A 30 s token refreshed 14 s ahead has a
 * 15-step countdown (3.75 s and its writes), so a refresh started as its invocation's response
 * goes sends its POST with about 3–3.5 s of the 8 s left: the holder gives it up after that
 * budget. The bug (issue 35): the lease was then held only until the give-up plus the upstream
 * timeout (5 s), about 8.3 s after the send; a takeover issued a new token before 9 s, and the
 * held POST revoked it while every container served it.
 */
const lateRefreshInInvocation = (context: ScenarioContext) => {
  let firstPostAt: number | undefined;
  let fired = false;
  for (const node of context.nodes) {
    let held: Buffer | undefined;
    let releaseAt = 0;
    let queue = Promise.resolve();
    node.upstream.setHooks({
      onRequest: (request) => {
        if (upstreamStep(request) !== 'access-token') return undefined;
        // Its retries (the same body: the same single-use code) queue behind it.
        if (held?.equals(request.body) && Date.now() < releaseAt) {
          queue = queue.then(() => context.sleep(Math.max(0, releaseAt - Date.now())));
          return queue;
        }
        const now = context.elapsed();
        firstPostAt ??= now;
        // A refresh (10 s or more after the cold start's POST), once, and only a POST sent
        // after its invocation's response with little of that invocation left.
        if (fired || now - firstPostAt < S(10) || !context.running()) return undefined;
        const after = node.container.environments().filter((e) => e.state === 'after-response');
        const left = Math.min(
          ...after.map((e) => (e.invocation?.deadlineAt ?? 0) - Date.now()),
          Number.POSITIVE_INFINITY,
        );
        if (left > LATE_IN_INVOCATION_MS) return undefined;
        fired = true;
        held = request.body;
        releaseAt = Date.now() + LATE_POST_HOLD_MS;
        context.inject(
          `access-token POST of a refresh started after a response, ${(left / 1000).toFixed(1)} s of its invocation left: held ${LATE_POST_HOLD_MS / 1000} s, then processed`,
          node.index,
        );
        context.faulted(node.index, now, now + LATE_POST_HOLD_MS);
        queue = context.sleep(LATE_POST_HOLD_MS);
        return queue;
      },
    });
  }
};

export const SCHEDULE_SCENARIOS: readonly Scenario[] = [
  {
    name: 'noisy-neighbour',
    injects:
      'other CPU work on the same cores: from 2 s, a busy loop in the CPU group of every environment of containers 0 and 1 (about half their 0.29 core left to them); without cgroups, one busy loop per core',
    install: noisyNeighbour,
  },
  {
    name: 'gc-pauses',
    injects:
      'GC-like pauses: a running environment SIGSTOPped 50\u2013500 ms at random instants (about 3 a second) and, 1 in 3, at each answer to a lease write of the holder (take, step, fence, token write), 1 in 20 at a reader\u2019s GetItem answer; its callers must still be answered',
    // The cold start and one refresh, and 10 s after it: a refresh slowed by pauses shows.
    settings: { durationMs: 30_000 },
    install: gcPausesAtSteps,
    extra: gcPausesAtRandom,
  },
  {
    name: 'late-refresh-in-invocation',
    injects:
      'no warm-up, 30 s tokens, 14 s window: the access-token POST of a refresh a request started after its response, sent with \u2264 4.5 s of its 8 s invocation left, held 9 s at the upstream, then processed (issue 35\u2019s A1 case)',
    predicted: 'issue 35: a takeover issues before the late POST lands, which revokes it',
    settings: {
      lifetimeSeconds: 30,
      refreshWindowSeconds: 14,
      warmUpEveryMs: 0,
      durationMs: 45_000,
    },
    install: lateRefreshInInvocation,
  },
];
