/**
 * The holder's state machine (lib/broker/holder-state.ts), table-driven: each case is named by
 * the state and the event, as client-go's leader election tests are.
 */
import fc from 'fast-check';
import { describe, expect, it } from 'vitest';
import {
  type HolderEvent,
  type HolderState,
  isFinal,
  mayPost,
  transition,
} from '../../../lib/broker/holder-state.js';

const counting = (countdown: number): HolderState => ({ name: 'counting', countdown });
const fenced: HolderState = { name: 'fenced', confirmedUntil: 9 };
const posting: HolderState = { name: 'posting', confirmedUntil: 9 };

describe('Function: transition (the holder)', () => {
  it.each<[string, HolderState, HolderEvent, HolderState['name']]>([
    [
      'counting: a step written stays counting',
      counting(5),
      { type: 'step-written', countdown: 4 },
      'counting',
    ],
    ['counting: the confirmation fences', counting(1), { type: 'confirmed', until: 9 }, 'fenced'],
    [
      'counting: a refused write loses the lease',
      counting(3),
      { type: 'lease-lost', reason: 'x' },
      'lost',
    ],
    ['counting: a failed authorize fails', counting(3), { type: 'failed' }, 'failed'],
    ['counting: no POST can be sent from it', counting(3), { type: 'post-sent' }, 'counting'],
    ['fenced: the POST leaves', fenced, { type: 'post-sent' }, 'posting'],
    [
      'fenced: a stale confirmation loses the lease',
      fenced,
      { type: 'lease-lost', reason: 'x' },
      'lost',
    ],
    ['posting: the token written', posting, { type: 'token-written' }, 'written'],
    ['posting: the token write refused', posting, { type: 'token-refused' }, 'superseded'],
    ['posting: a timeout after sending', posting, { type: 'outcome-unknown' }, 'outcome-unknown'],
    ['posting: a definite refusal', posting, { type: 'failed' }, 'failed'],
    [
      'posting: refused for the credentials, sent again: fenced afresh first',
      posting,
      { type: 'post-refused' },
      'counting',
    ],
    [
      'posting: a lease lost changes nothing (only the answer tells)',
      posting,
      { type: 'lease-lost', reason: 'x' },
      'posting',
    ],
    ['written: final', { name: 'written' }, { type: 'lease-lost', reason: 'x' }, 'written'],
  ])('%s', (_title, state, event, next) => {
    expect(transition(state, event).name).toBe(next);
  });

  it('never raises a countdown (I2)', () => {
    expect(transition(counting(3), { type: 'step-written', countdown: 4 })).toEqual(counting(3));
  });

  const events = fc.constantFrom<HolderEvent>(
    { type: 'step-written', countdown: 2 },
    { type: 'confirmed', until: 9 },
    { type: 'lease-lost', reason: 'x' },
    { type: 'post-sent' },
    { type: 'token-written' },
    { type: 'token-refused' },
    { type: 'outcome-unknown' },
    { type: 'failed' },
    { type: 'post-refused' },
  );

  it('I1: along any run of events, a POST leaves only from a fresh confirmation, and final states stay final', () => {
    fc.assert(
      fc.property(fc.array(events, { maxLength: 30 }), (run) => {
        let state = counting(20);
        for (const event of run) {
          const next = transition(state, event);
          if (next.name === 'posting' && state.name !== 'posting') {
            expect(mayPost(state)).toBe(true);
            expect(event.type).toBe('post-sent');
          }
          if (isFinal(state)) expect(next).toBe(state);
          state = next;
        }
      }),
      { numRuns: 2_000 },
    );
  });
});
