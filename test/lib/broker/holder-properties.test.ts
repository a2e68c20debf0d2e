/**
 * I1–I3 on the holder's reducer (lib/broker/holder/state.ts), over random runs: a small world
 * plays the driver's part (timers fire when due, each lease write is answered landed, refused or
 * failed after a delay, the flow asks for the fence, its POST is answered any way, the
 * environment may shut down) and every step is checked against the invariants. Each run draws
 * its protocol timing too (the default, a scaled one, or any that satisfies the relations of
 * `timing/protocol-timing.ts`): the invariants hold at every valid timing, not only at the default.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type HolderCommand,
  type HolderEvent,
  type HolderState,
  type HolderTimer,
  step,
} from '../../../lib/broker/holder/state.js';
import {
  leaseHeartbeatMs,
  type ProtocolTiming,
  storeReserveMs,
} from '../../../lib/broker/timing/index.js';
import { validTimings } from '../../support/timing-arbitraries.js';
import { DEADLINE_AT, started } from './holder-fixtures.js';

/** The instant after which no POST may leave: the POST and the write after it no longer fit. */
const lastCallAt = (t: ProtocolTiming) => DEADLINE_AT - storeReserveMs(t) - t.minPostMs;

/** One choice of the world: which enabled action happens next, and after how long. */
const choice = fc.record({ pick: fc.nat(), delay: fc.nat({ max: 900 }) });

interface World {
  state: HolderState;
  now: number;
  timers: Map<HolderTimer, { at: number }>;
  /** The flow: authorizing, at the fence, posting, answered (cleaning up), over. */
  flow: 'authorizing' | 'at-fence' | 'refused' | 'posting' | 'answered' | 'done';
  aborted: boolean;
  tokenWrite: boolean;
  versions: number;
  log: {
    before: HolderState;
    event: HolderEvent;
    after: HolderState;
    commands: readonly HolderCommand[];
  }[];
}

const apply = (w: World, event: HolderEvent): void => {
  const before = w.state;
  const { state, commands } = step(before, event);
  w.state = state;
  w.log.push({ before, event, after: state, commands });
  for (const c of commands) {
    if (c.do === 'arm') {
      w.timers.set(c.timer, { at: w.now + c.ms });
    }
    if (c.do === 'cancel') w.timers.delete(c.timer);
    if (c.do === 'abort') w.aborted = true;
    if (c.do === 'write-lease') {
      w.versions += 1;
      apply(w, { type: 'write-sent', at: w.now, version: `v${w.versions}`, expiresAt: 0 });
    }
    if (c.do === 'send-post') {
      w.flow = 'posting';
      apply(w, { type: 'post-sent', at: w.now });
    }
    if (c.do === 'refuse-fence') w.flow = 'refused';
    if (c.do === 'write-token') w.tokenWrite = true;
    if (c.do === 'finish') w.flow = 'done';
  }
};

/** What may happen next in `w`, each as the event it feeds the reducer. */
const enabled = (w: World): HolderEvent['type'][] => {
  const at: HolderEvent['type'][] = [];
  if (w.state.writing) at.push('write-landed', 'write-refused', 'write-failed');
  if (w.flow === 'authorizing') at.push('fence-asked', 'answered');
  if (w.flow === 'posting') at.push('answered', 'fence-asked');
  if (w.flow === 'refused') at.push('answered');
  if (w.tokenWrite) at.push('token-written', 'token-refused', 'token-write-failed');
  if (!w.state.finished) at.push('abandon');
  return at;
};

const run = (
  choices: { pick: number; delay: number }[],
  countdown: number,
  timing: ProtocolTiming,
): World => {
  const w: World = {
    state: started(countdown, { timing }),
    now: 0,
    timers: new Map(),
    flow: 'authorizing',
    aborted: false,
    tokenWrite: false,
    versions: 0,
    log: [],
  };
  apply(w, { type: 'started', at: 0 });
  // The world's choices, then a tail in which everything answers at once, until it is over.
  const tail = Array.from({ length: 400 }, () => ({ pick: 0, delay: 300 }));
  for (const { pick, delay } of [...choices, ...tail]) {
    if (w.state.finished) break;
    const then = w.now + delay;
    // Timers due on the way fire first, in order.
    for (;;) {
      const due = [...w.timers.entries()]
        .filter(([, t]) => t.at <= then)
        .sort((a, b) => a[1].at - b[1].at)[0];
      if (!due) break;
      const [timer, t] = due;
      w.now = t.at;
      w.timers.delete(timer);
      apply(w, { type: TIMER_EVENT[timer], at: w.now });
    }
    w.now = then;
    const options = enabled(w);
    const type = options[pick % options.length];
    if (!type) break;
    if (type === 'answered') {
      // An aborted flow answers not-sent (before its POST) or as its POST went.
      const outcomes = ['issued', 'failed', 'outcome-unknown', 'not-sent'] as const;
      let outcome = outcomes[pick % 4] ?? 'failed';
      if (w.flow === 'authorizing' && outcome !== 'failed')
        outcome = w.aborted ? 'not-sent' : 'failed';
      // The fence refused: the flow stops with the lease's reason, nothing sent.
      if (w.flow === 'refused') outcome = 'not-sent';
      w.flow = 'answered';
      apply(w, { type, at: w.now, outcome });
    } else if (type === 'fence-asked') {
      // A second fence only after a definite refusal of the first POST (a rotated secret).
      w.flow = 'at-fence';
      apply(w, { type, at: w.now });
    } else if (type.startsWith('token-')) {
      w.tokenWrite = false;
      apply(w, { type, at: w.now } as HolderEvent);
    } else if (type === 'abandon') {
      apply(w, { type, at: w.now, reason: 'shutdown' });
    } else {
      apply(w, { type, at: w.now } as HolderEvent);
    }
  }
  return w;
};

const TIMER_EVENT = {
  step: 'step-due',
  'last-call': 'last-call',
  post: 'post-timer',
} as const;

const runs = fc.tuple(
  fc.array(choice, { maxLength: 60 }),
  fc.integer({ min: 0, max: 30 }),
  validTimings,
);
const sends = (w: World) => w.log.filter((l) => l.commands.some((c) => c.do === 'send-post'));

describe('Function: step, over random runs (I1–I3)', () => {
  it('I1: the POST is commanded only on a fresh confirmation under the current version, once per fence, never after the lease was lost', () => {
    fc.assert(
      fc.property(runs, ([choices, countdown, timing]) => {
        const w = run(choices, countdown, timing);
        for (const { before, event, after, commands } of sends(w)) {
          expect(event.type).toBe('write-landed');
          expect(before.name).toBe('counting');
          expect(before.writing?.write).toBe('fence');
          expect(after.name).toBe('fenced');
          expect(after.version).toBe(before.unanswered);
          // What is left of the confirmed budget covers a POST.
          const post = commands.find((c) => c.do === 'arm' && c.timer === 'post');
          expect(post && 'ms' in post ? post.ms : 0).toBeGreaterThanOrEqual(timing.minPostMs);
        }
        // Once lost, never fenced again.
        const lostAt = w.log.findIndex((l) => l.after.name === 'lost');
        if (lostAt >= 0) expect(sends(w).every((l) => w.log.indexOf(l) < lostAt)).toBe(true);
        // One POST per fence asked.
        const asked = w.log.filter((l) => l.event.type === 'fence-asked').length;
        expect(sends(w).length).toBeLessThanOrEqual(asked);
        // A token is written only after a POST was sent.
        const written = w.log.findIndex((l) => l.commands.some((c) => c.do === 'write-token'));
        if (written >= 0) expect(sends(w).length).toBeGreaterThan(0);
      }),
      { numRuns: 1_500 },
    );
  });

  it('I2: lease writes never overlap; a step lowers the countdown by one, a step after the last answer; the countdown never rises', () => {
    fc.assert(
      fc.property(runs, ([choices, countdown, timing]) => {
        const w = run(choices, countdown, timing);
        for (const { before, after, event, commands } of w.log) {
          expect(after.countdown).toBeLessThanOrEqual(before.countdown);
          for (const c of commands) {
            if (c.do !== 'write-lease') continue;
            // Sent with none in flight, or as the answer to the one in flight came back (a
            // renewal answered after the flow asked for the fence: the fence follows at once;
            // seen first at a scaled timing, whose heartbeat comes before the flow's first step).
            const answered = ['write-landed', 'write-refused', 'write-failed'].includes(event.type);
            if (!answered) expect(before.writing).toBeUndefined();
            expect(after.writing?.write).toBe(c.write);
            if (c.write === 'step') {
              // One lower while above 1, a step after the last answer; kept at 1 (the
              // heartbeat) a heartbeat period after it.
              const down = before.countdown > 1;
              expect(c.countdown).toBe(down ? before.countdown - 1 : before.countdown);
              expect(event.at).toBeGreaterThanOrEqual(
                before.answeredAt + (down ? timing.countdownStepMs : leaseHeartbeatMs(timing)),
              );
            }
            if (c.write === 'fence') {
              expect(before.countdown).toBeLessThanOrEqual(1);
              if (before.countdown > 0) {
                expect(event.at).toBeGreaterThanOrEqual(before.answeredAt + timing.countdownStepMs);
              }
            }
          }
        }
      }),
      { numRuns: 1_500 },
    );
  });

  it('I3: the POST leaves only with time for it and the write after it; the holder stops counting at the last call; every run ends final', () => {
    fc.assert(
      fc.property(runs, ([choices, countdown, timing]) => {
        const w = run(choices, countdown, timing);
        for (const { event, commands } of sends(w)) {
          expect(event.at).toBeLessThanOrEqual(lastCallAt(timing));
          const post = commands.find((c) => c.do === 'arm' && c.timer === 'post');
          const ms = post && 'ms' in post ? post.ms : Number.POSITIVE_INFINITY;
          expect(event.at + ms).toBeLessThanOrEqual(DEADLINE_AT - storeReserveMs(timing));
        }
        for (const { event, after } of w.log) {
          if (event.at > lastCallAt(timing) && after.name === 'counting') {
            // Only a confirmation sent by then may still be answered.
            expect(after.writing?.write).toBe('fence');
          }
        }
        expect(w.state.finished).toBe(true);
        expect(w.flow).toBe('done');
      }),
      { numRuns: 1_500 },
    );
  });
});
