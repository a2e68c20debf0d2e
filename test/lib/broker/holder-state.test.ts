/**
 * The holder's reducer (lib/broker/holder/state.ts), table-driven: each case is named by the
 * state and the event, as client-go's leader election tests are. The full table is in
 * docs/protocol.md (`holder-table.test.ts` checks it); the invariants over runs of events are
 * `holder-properties.test.ts`'s.
 */
import { describe, expect, it } from 'vitest';
import {
  type HolderCommand,
  type HolderEvent,
  type HolderState,
  step,
} from '../../../lib/broker/holder/state.js';
import { countingLeaseMs } from '../../../lib/broker/timing/bounds.js';
import { DEFAULT_TIMING } from '../../../lib/broker/timing/index.js';
import { answered, DEADLINE_AT, ev, holder, inFlight, started } from './holder-fixtures.js';

const counting = (countdown: number, fields: Partial<HolderState> = {}) =>
  holder('counting', { countdown, ...fields });
const fenced = holder('fenced', { confirmedUntil: 9 });
const posting = holder('posting', { confirmedUntil: 9 });
const writing = holder('writing', { confirmedUntil: 9 });

describe('Function: step (the holder)', () => {
  it.each<[string, HolderState, HolderEvent, HolderState['name']]>([
    [
      'counting: a step written stays counting',
      counting(5, { writing: inFlight('step', 4) }),
      ev('write-landed'),
      'counting',
    ],
    [
      'counting: the confirmation fences',
      counting(1, { writing: inFlight('fence', 0, 50), fenceAskedAt: 0 }),
      ev('write-landed'),
      'fenced',
    ],
    [
      'counting: a refused write loses the lease',
      counting(3, { writing: inFlight('step', 2) }),
      ev('write-refused'),
      'lost',
    ],
    ['counting: a failed authorize fails', counting(3), answered('failed'), 'failed'],
    ['counting: no POST can be sent from it', counting(3), ev('post-sent'), 'counting'],
    ['fenced: the POST leaves', fenced, ev('post-sent'), 'posting'],
    [
      'counting: a confirmation answered too late for the POST loses the lease (stale)',
      counting(1, { writing: inFlight('fence', 0, 0), fenceAskedAt: 0 }),
      ev('write-landed', 1_950),
      'lost',
    ],
    ['posting: the token issued is written', posting, answered('issued'), 'writing'],
    ['writing: the token written', writing, ev('token-written'), 'written'],
    ['writing: the token write refused', writing, ev('token-refused'), 'superseded'],
    ['posting: a timeout after sending', posting, answered('outcome-unknown'), 'outcome-unknown'],
    ['posting: a definite refusal', posting, answered('failed'), 'failed'],
    [
      'posting: refused for the credentials, sent again: fenced afresh first',
      posting,
      ev('fence-asked'),
      'counting',
    ],
    [
      'posting: a lease lost changes nothing (only the answer tells)',
      posting,
      ev('post-timer'),
      'posting',
    ],
    ['posting: the last call changes nothing', posting, ev('last-call'), 'posting'],
    [
      'posting: asked to fence again once its budget ran out (signal aborted), nothing more is sent',
      step(posting, ev('post-timer')).state,
      ev('fence-asked'),
      'lost',
    ],
    [
      'posting: a shutdown leaves the POST to its answer',
      posting,
      ev('abandon', 100, { reason: 'x' }),
      'posting',
    ],
    ['written: final', holder('written'), ev('last-call'), 'written'],
  ])('%s', (_title, state, event, next) => {
    expect(step(state, event).state.name).toBe(next);
  });

  it('never raises a countdown (I2)', () => {
    const raised = step(counting(3, { writing: inFlight('step', 4) }), ev('write-landed'));
    expect(raised.state.countdown).toBe(3);
  });

  it('lets the POST leave only from fenced, on a fresh confirmation (I1)', () => {
    const confirmed = step(
      counting(1, { writing: inFlight('fence', 0, 50), fenceAskedAt: 0 }),
      ev('write-landed', 100),
    );
    expect(confirmed.state.name).toBe('fenced');
    // No attempt after the confirmation's send (50) plus its budget (2 s): what it covers.
    expect(confirmed.commands).toContainEqual<HolderCommand>({ do: 'send-post', sendBy: 2_050 });
    // The POST's timer: what is left of the budget the confirmation covers.
    expect(confirmed.commands).toContainEqual<HolderCommand>({
      do: 'arm',
      timer: 'post',
      ms: 1_950,
    });
  });

  // I2.2 and I1: lease writes never overlap. A fence asked while the step that keeps the lease
  // at 1 is in flight waits for its answer: sent at once, the confirmation would be taken for
  // answered by that step's answer, and the POST would leave on a write that did not cover it.
  it('asked to fence while a step is in flight, waits for its answer before the confirmation (writes never overlap)', () => {
    const keeping = counting(1, { writing: inFlight('step', 1), answeredAt: 0 });
    const asked = step(keeping, ev('fence-asked', 600));
    expect(asked.commands.filter((c) => c.do === 'write-lease')).toEqual([]);
    expect(asked.state.writing?.write).toBe('step');
    // Its answer counts as the last one: the confirmation follows it by a step (I2.2).
    const landed = step(asked.state, ev('write-landed', 700));
    expect(landed.commands).toEqual([{ do: 'arm', timer: 'step', ms: 250 }]);
    expect(step(landed.state, ev('step-due', 950)).commands).toContainEqual(
      expect.objectContaining({ do: 'write-lease', write: 'fence', countdown: 0 }),
    );
  });

  // I1: the release and the grace's renewal name exactly the version last written; a write
  // answered after the flow ended (its clean-up under way) still says which version is ours:
  // one that landed is ours, one refused is not, one that failed may be (kept unanswered).
  // Nothing more is done for it.
  it('after the flow ended, records a late lease write’s answer and does nothing else', () => {
    const ended = holder('failed', { writing: inFlight('step', 1), unanswered: 'v1' });
    const landed = step(ended, ev('write-landed'));
    expect(landed).toEqual({
      state: { ...ended, writing: undefined, version: 'v1', unanswered: undefined },
      commands: [],
    });
    const refused = step(ended, ev('write-refused'));
    expect(refused).toEqual({
      state: { ...ended, writing: undefined, unanswered: undefined },
      commands: [],
    });
    const failed = step(ended, ev('write-failed'));
    expect(failed).toEqual({ state: { ...ended, writing: undefined }, commands: [] });
    expect(step(ended, ev('step-due'))).toEqual({ state: ended, commands: [] });
  });

  it('counts the time the flow waited at the fence, from its ask to the confirmation sent', () => {
    const asked = step(counting(1, { answeredAt: 0 }), ev('fence-asked', 100)).state;
    const confirming = step(asked, ev('step-due', 250)).state;
    expect(confirming.writing?.write).toBe('fence');
    expect(confirming.waitedMs).toBe(150);
  });

  it('is final only once the flow ended and was cleaned up', () => {
    const lost = step(counting(3), ev('last-call')).state;
    expect(lost.name).toBe('lost');
    expect(lost.finished).toBe(false);
    expect(step(lost, answered('not-sent')).state.finished).toBe(true);
    expect(started().finished).toBe(false);
  });
});

describe('The holder’s lease versions: how long each lasts (a counting lease while steps follow)', () => {
  const COUNTING = countingLeaseMs(DEFAULT_TIMING);
  const LEASE = DEFAULT_TIMING.leaseMs;
  const durationOf = (state: HolderState, event: HolderEvent) => {
    const write = step(state, event).commands.find((c) => c.do === 'write-lease');
    return write?.do === 'write-lease' ? write.durationMs : undefined;
  };

  it.each<[string, HolderState, HolderEvent, number]>([
    ['a step that leaves more to count', counting(5), ev('step-due', 300), COUNTING],
    [
      'the step to 1 before the flow waits at the fence (kept at 1 a heartbeat period later)',
      counting(2),
      ev('step-due', 300),
      LEASE,
    ],
    [
      'the step to 1 once the flow waits at the fence (the confirmation follows a step later)',
      counting(2, { fenceAskedAt: 100 }),
      ev('step-due', 300),
      COUNTING,
    ],
    [
      'the step that keeps countdown 1 (the heartbeat)',
      counting(1, { answeredAt: 0, ownedUntil: 3_000 }),
      ev('step-due', 1_000),
      LEASE,
    ],
  ])('%s', (_title, state, event, expected) => {
    expect(durationOf(state, event)).toBe(expected);
  });

  it('cuts a version to the caller’s deadline, and owns a countdown’s first version for a counting lease', () => {
    const late = counting(5, { ownedUntil: DEADLINE_AT, answeredAt: DEADLINE_AT - 750 });
    expect(durationOf(late, ev('step-due', DEADLINE_AT - 500))).toBe(500);
    expect(started(21).ownedUntil).toBe(COUNTING);
    expect(started(1).ownedUntil).toBe(LEASE);
    expect(started(2).ownedUntil).toBe(COUNTING);
  });
});
