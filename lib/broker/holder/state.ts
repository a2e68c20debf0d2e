/**
 * The holder as one reducer: `step(state, event)` is the only writer of the holder's state, and
 * says in commands what is to be done (lease writes, timers, the POST's go-ahead, the token
 * write, the clean-up after a failure). `held-lease.ts` runs the commands and feeds their
 * results back as events; `holder/events.ts` defines them. Pure: every instant comes in an event
 * (`at`, monotonic), and each lease write's version is chosen by the driver (`write-sent`).
 * Modelled on client-go's leader election and a Redux-style reducer; docs/protocol.md's holder
 * table is generated from this function (test/lib/broker/holder-table.test.ts).
 *
 * I1: `send-post` is commanded only on entering `fenced`, by a confirmation written under the
 * current version and still fresh; once sent, the holder is `posting`. I2: a step lowers the
 * countdown by one, written at least a step (`countdownStepMs`) after the previous write was answered;
 * writes never overlap. I3: the last call gives the lease up while counting once the POST and
 * the write after it no longer fit before the deadline.
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
  // I2. A lease taken over after a countdown: that holder's POST may be out, and the token it
  // replaced revoked; letting the lease go would make it servable again, so it goes first.
  const suspectDropped: HolderCommand[] = suspect && replacesToken ? [{ do: 'drop-replaced' }] : [];
  switch (outcome.outcome) {
    case 'issued':
      // Only after `send-post` from the real flow; an issue() that never asked for the fence (a
      // test double) has its token written too: the store's conditional write is the far side's
      // check, and it names the version last written.
      return end('writing', [{ do: 'write-token' }]);
    case 'not-sent':
      // Nothing was sent: our lease, if still ours, is freed; the new holder's token wins.
      return end('lost', [...suspectDropped, { do: 'release', restore: false }, fin('lost')]);
    case 'outcome-unknown':
      // The POST may still land and revoke the token it replaces: that token is dropped now,
      // and the lease held through the grace, so that no other POST starts while it could land.
      return end('outcome-unknown', [
        ...(replacesToken ? [{ do: 'drop-replaced' } as const] : []),
        { do: 'hold-for-grace', until: heldUntil(state, outcome.at) },
        fin('outcome-unknown'),
      ]);
    case 'failed':
      // Nothing was issued: the lease is freed now, and the token it would have replaced is
      // good again if the release proves we still held it.
      return end('failed', [...suspectDropped, { do: 'release', restore: true }, fin('failed')]);
  }
};

const fin = (outcome: HolderOutcome): HolderCommand => ({ do: 'finish', outcome });

/**
 * Until when (monotonic) a POST given up at `at` may still land (A1): its bound after the
 * latest instant an attempt may have left. That is the send window's end (each attempt checks
 * it before it is sent), or the give-up if earlier; but a give-up more than a send window after
 * the POST's abort says the holder stalled across it (A2), and an attempt's bytes may have left
 * as late as the give-up: then from the give-up.
 */
const heldUntil = (state: HolderState, at: number): number => {
  const { postSendBy, postAbortAt } = state;
  const landsWithin = postLandsWithinMs(state.terms.upstreamTimeoutMs);
  if (postSendBy === undefined || postAbortAt === undefined) return at + landsWithin;
  const stalled = at > postAbortAt + postSendWindowMs(state.terms.timing);
  return (stalled ? at : Math.min(at, postSendBy)) + landsWithin;
};

/**
 * The holder's next state and what to do, for `event` in `state`. An event that does not apply
 * (a timer that fired late, a write answered after the flow ended) changes nothing but the
 * lease's bookkeeping.
 */
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
          // The periodic lease write (the countdown's step, and the heartbeat at 1), from the
          // answer of the write that took the lease.
          { do: 'arm', timer: 'step', ms: Math.max(0, state.answeredAt + nextStepMs(state) - at) },
          // I3: a countdown (or a slow store) that has not reached the POST by the time the POST
          // and the write after it no longer fit: nothing will be sent, so the lease goes now.
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
        // The POST outlived its lease: stopped (a request not yet sent is not sent); only its
        // answer tells what it did. Its reason stops a second fence too.
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
        // Fenced again while posting: the flow sends a second token request only after a
        // definite refusal of the first (rotated credentials): nothing of the first can land.
        // The lease is confirmed afresh, at once (countdown 0), before the second leaves.
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
