/**
 * The holder as one pure reducer: `step(state, event)` is the only writer of its state and says
 * in commands what to do (`held-lease.ts` runs them). docs/protocol.md's holder table is
 * generated from it. I1: `send-post` only on a fresh confirmation. I3: the last call.
 */

import { leaseTerm, postLandsWithinMs, postSendWindowMs, storeReserveMs } from '../timing/index.js';
import type {
  HolderCommand,
  HolderEvent,
  HolderName,
  HolderOutcome,
  HolderState,
  HolderTerms,
} from './events.js';
import {
  counted,
  fence,
  landed,
  lose,
  nextStepMs,
  notLanded,
  type Result,
  writeLease,
} from './lease-writes.js';

export type * from './events.js';

/** The holder as it starts: the lease just written (its version, countdown and time). */
export const initialState = (
  terms: HolderTerms,
  lease: { version: string; countdown: number; leasedAt: number; answeredAt: number },
): HolderState => ({
  name: 'counting',
  terms,
  countdown: lease.countdown,
  version: lease.version,
  unanswered: undefined,
  // As long as the version written lasts (`leaseTerm`: a countdown's first version is short).
  ownedUntil: lease.leasedAt + leaseTerm(0, Infinity, terms.timing, lease.countdown > 1).durationMs,
  answeredAt: lease.answeredAt,
  writing: undefined,
  fenceAskedAt: undefined,
  waitedMs: 0,
  confirmedUntil: undefined,
  confirmedUntilMonotonic: undefined,
  reason: undefined,
  finished: false,
});

const ALL_TIMERS: readonly HolderCommand[] = [
  { do: 'cancel', timer: 'step' },
  { do: 'cancel', timer: 'last-call' },
  { do: 'cancel', timer: 'post' },
];

/** The flow ended (its POST answered, or never sent): the clean-up is the final state's. */
const ended = (state: HolderState, outcome: HolderEvent & { type: 'answered' }): Result => {
  const { replacesToken, suspect } = state.terms;
  const end = (name: HolderName, commands: HolderCommand[]): Result => ({
    state: { ...state, name, fenceAskedAt: undefined, finished: name !== 'writing' },
    commands: [...ALL_TIMERS, ...commands],
  });
  // I2. A lease taken over after a countdown: the token it replaced may be revoked; dropped first.
  const suspectDropped: HolderCommand[] = suspect && replacesToken ? [{ do: 'drop-replaced' }] : [];
  switch (outcome.outcome) {
    case 'issued':
      // The store's conditional write names the version last written: the far side's check.
      return end('writing', [{ do: 'write-token' }]);
    case 'not-sent':
      // Nothing was sent: our lease, if still ours, is freed; the new holder's token wins.
      return end('lost', [...suspectDropped, { do: 'release', restore: false }, fin('lost')]);
    case 'outcome-unknown':
      // The POST may still land and revoke its token: dropped now, lease held through the grace.
      return end('outcome-unknown', [
        ...(replacesToken ? [{ do: 'drop-replaced' } as const] : []),
        { do: 'hold-for-grace', until: heldUntil(state, outcome.at) },
        fin('outcome-unknown'),
      ]);
    case 'failed':
      // Nothing issued: the lease is freed, the token good again if the release proves it.
      return end('failed', [...suspectDropped, { do: 'release', restore: true }, fin('failed')]);
  }
};

const fin = (outcome: HolderOutcome): HolderCommand => ({ do: 'finish', outcome });

/**
 * Until when (monotonic) a POST given up at `at` may still land (A1): its bound after the latest
 * instant an attempt may have left (from the give-up itself if the holder stalled, A2).
 */
const heldUntil = (state: HolderState, at: number): number => {
  const { postSendBy, postAbortAt } = state;
  const landsWithin = postLandsWithinMs(state.terms.upstreamTimeoutMs);
  if (postSendBy === undefined || postAbortAt === undefined) return at + landsWithin;
  const stalled = at > postAbortAt + postSendWindowMs(state.terms.timing);
  return (stalled ? at : Math.min(at, postSendBy)) + landsWithin;
};

/** The holder's next state and commands for `event`; an event that does not apply changes nothing. */
export const step = (state: HolderState, event: HolderEvent): Result => {
  const none: Result = { state, commands: [] };
  if (state.finished) {
    // Over: only a late lease write's answer is kept (which version is ours).
    if (event.type === 'write-landed')
      return { state: landed(state, event.at).state, commands: [] };
    if (event.type === 'write-refused' || event.type === 'write-failed') {
      return { state: notLanded(state, event.type === 'write-refused').state, commands: [] };
    }
    return none;
  }
  const { at } = event;
  const { timing } = state.terms;
  switch (event.type) {
    case 'started': {
      const { deadlineAt } = state.terms;
      return {
        state,
        commands: [
          // The periodic lease write, from the answer of the write that took the lease.
          { do: 'arm', timer: 'step', ms: Math.max(0, state.answeredAt + nextStepMs(state) - at) },
          // I3: the lease goes once the POST and the write after it no longer fit.
          {
            do: 'arm',
            timer: 'last-call',
            ms: Math.max(0, deadlineAt - at - storeReserveMs(timing) - timing.minPostMs),
          },
        ],
      };
    }
    case 'step-due':
      if (state.name !== 'counting') return none;
      if (at >= state.ownedUntil) return lose(state, 'Lease time ran out');
      if (state.writing) return none;
      // At 1, the flow at the fence is confirmed; a flow not there yet keeps the lease.
      return state.countdown <= 1 && state.fenceAskedAt !== undefined
        ? fence(state, at)
        : writeLease(state, at);
    case 'last-call':
      return state.name === 'counting'
        ? lose(state, 'No time left for the access-token request')
        : none;
    case 'post-timer':
      if (state.name === 'posting') {
        // The POST outlived its lease: stopped; only its answer tells what it did.
        const reason = 'The access-token request outlived its lease';
        return { state: { ...state, reason }, commands: [{ do: 'abort', reason }] };
      }
      return state.name === 'counting'
        ? lose(state, 'The access-token request outlived its lease')
        : none;
    case 'abandon':
      return state.name === 'counting' || state.name === 'fenced'
        ? lose(state, event.reason)
        : none;
    case 'fence-asked':
      // The flow was stopped while posting: nothing more may be sent.
      if (state.name === 'posting' && state.reason !== undefined) {
        return lose({ ...state, fenceAskedAt: at }, state.reason);
      }
      if (state.name === 'posting') {
        // Fenced again (a second POST after a definite refusal of the first): confirmed afresh.
        return fence({ ...state, name: 'counting', countdown: 0, fenceAskedAt: at }, at);
      }
      if (state.name !== 'counting') return { state, commands: [{ do: 'refuse-fence' }] };
      return counted({ ...state, fenceAskedAt: at }, at);
    case 'write-sent':
      return {
        state: {
          ...state,
          unanswered: event.version,
          ...(state.writing ? { writing: { ...state.writing, expiresAt: event.expiresAt } } : {}),
        },
        commands: [],
      };
    case 'write-landed':
      return landed(state, at);
    case 'write-refused':
    case 'write-failed':
      return notLanded(state, event.type === 'write-refused');
    case 'post-sent':
      return state.name === 'fenced'
        ? { state: { ...state, name: 'posting' }, commands: [] }
        : none;
    case 'answered':
      return state.name === 'writing' ? none : ended(state, event);
    case 'token-written':
    case 'token-refused':
    case 'token-write-failed': {
      if (state.name !== 'writing') return none;
      const written = event.type !== 'token-refused';
      return {
        state: { ...state, name: written ? 'written' : 'superseded', finished: true },
        commands: written
          ? [fin(event.type === 'token-written' ? 'written' : 'written-in-memory')]
          : // Our token request went out: the token it replaced is revoked, wherever it is held.
            [
              ...(state.terms.replacesToken ? [{ do: 'forget-replaced' } as const] : []),
              fin('superseded'),
            ],
      };
    }
  }
};
