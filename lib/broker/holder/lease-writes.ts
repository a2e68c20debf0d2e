/** The holder reducer's lease writes (a countdown step, the fence), their answers, and losing the lease. Pure. */

import {
  leaseHeartbeatMs,
  leaseTerm,
  postLandsWithinMs,
  postSendWindowMs,
  storeReserveMs,
} from '../timing/index.js';
import type { HolderCommand, HolderState } from './events.js';

export type Result = { readonly state: HolderState; readonly commands: readonly HolderCommand[] };

/** The lease is lost before the POST: nothing is sent, the flow is stopped (its signal). */
export const lose = (state: HolderState, reason: string): Result => {
  const waiting = state.fenceAskedAt !== undefined && state.writing?.write !== 'fence';
  return {
    state: { ...state, name: 'lost', reason, ...(waiting ? { fenceAskedAt: undefined } : {}) },
    commands: [
      { do: 'abort', reason },
      { do: 'cancel', timer: 'step' },
      ...(waiting ? [{ do: 'refuse-fence' } as const] : []),
    ],
  };
};

/** The periodic lease write: the countdown one lower, down to 1 (the heartbeat); cut to the deadline. */
export const writeLease = (state: HolderState, at: number): Result => {
  // Judged here too: a write that never came back must not keep the lease alive.
  if (at >= state.ownedUntil) return lose(state, 'Lease time ran out');
  const countdown = state.countdown > 1 ? state.countdown - 1 : state.countdown;
  // A short (counting) version when another step follows a step after this one's answer.
  const counting = countdown > 1 || state.fenceAskedAt !== undefined;
  const { durationMs } = leaseTerm(0, state.terms.deadlineAt - at, state.terms.timing, counting);
  return {
    state: { ...state, writing: { write: 'step', countdown, durationMs, sentAt: at } },
    // The step timer now marks when the lease lapses if no answer comes.
    commands: [
      { do: 'write-lease', write: 'step', countdown, durationMs },
      { do: 'arm', timer: 'step', ms: state.ownedUntil - at },
    ],
  };
};

/** When the next step is due after an answer: a step while counting down, else a heartbeat. */
export const nextStepMs = (state: HolderState): number => {
  const { timing } = state.terms;
  return state.countdown > 1 ? timing.countdownStepMs : leaseHeartbeatMs(timing);
};

/**
 * The fence once the countdown is at 1 (or 0) and a step has passed since the last answer: the
 * confirmation (countdown 0) covers the POST's budget and A1's bound after it.
 */
export const fence = (state: HolderState, at: number): Result => {
  if (state.writing || state.fenceAskedAt === undefined || state.countdown > 1) {
    return { state, commands: [] };
  }
  const { countdownStepMs, minPostMs } = state.terms.timing;
  const due = state.answeredAt + countdownStepMs;
  if (state.countdown > 0 && at < due) {
    return { state, commands: [{ do: 'arm', timer: 'step', ms: due - at }] };
  }
  const { deadlineAt, upstreamTimeoutMs } = state.terms;
  const waited = { ...state, waitedMs: state.waitedMs + (at - state.fenceAskedAt) };
  const budget = Math.min(upstreamTimeoutMs, deadlineAt - at - storeReserveMs(state.terms.timing));
  if (budget < minPostMs) return lose(waited, 'No time left for the access-token request');
  const sendWindow = Math.min(budget, postSendWindowMs(state.terms.timing));
  const durationMs = sendWindow + postLandsWithinMs(upstreamTimeoutMs);
  return {
    state: {
      ...waited,
      writing: { write: 'fence', countdown: 0, durationMs, sentAt: at, budget, sendWindow },
    },
    commands: [{ do: 'write-lease', write: 'fence', countdown: 0, durationMs, boundMs: budget }],
  };
};

/** A lease write answered: the version it set is ours (a release names it). */
export const landed = (state: HolderState, at: number): Result => {
  const write = state.writing;
  if (!write) return { state, commands: [] };
  const kept: HolderState = {
    ...state,
    writing: undefined,
    version: state.unanswered ?? state.version,
    unanswered: undefined,
    ...(write.write === 'fence'
      ? {
          confirmedUntil: write.expiresAt,
          confirmedUntilMonotonic: write.sentAt + write.durationMs,
        }
      : {}),
  };
  if (state.name !== 'counting') {
    // The flow waited at the fence for this confirmation's answer: it is refused now.
    const waiting = write.write === 'fence' && state.fenceAskedAt !== undefined;
    return waiting
      ? { state: { ...kept, fenceAskedAt: undefined }, commands: [{ do: 'refuse-fence' }] }
      : { state: kept, commands: [] };
  }
  if (write.write === 'fence') {
    // Paused between the confirmation and here? Then the POST no longer fits its lease.
    const left = write.sentAt + (write.budget ?? 0) - at;
    const sendBy = write.sentAt + (write.sendWindow ?? write.budget ?? 0);
    if (left < state.terms.timing.minPostMs || at >= sendBy) {
      return lose(kept, 'Lease confirmation is stale');
    }
    return {
      state: {
        ...kept,
        name: 'fenced',
        countdown: 0,
        answeredAt: at,
        fenceAskedAt: undefined,
        postSendBy: sendBy,
        postAbortAt: at + left,
      },
      commands: [
        { do: 'arm', timer: 'post', ms: left },
        { do: 'send-post', sendBy },
      ],
    };
  }
  const next: HolderState = {
    ...kept,
    countdown: Math.min(state.countdown, write.countdown),
    answeredAt: at,
    // Ours for what this version says, cut to the deadline like its duration.
    ownedUntil: Math.max(state.ownedUntil, write.sentAt + write.durationMs),
  };
  if (next.countdown > 1 || next.fenceAskedAt === undefined) {
    return { state: next, commands: [{ do: 'arm', timer: 'step', ms: nextStepMs(next) }] };
  }
  return counted(next, at);
};

/** The countdown is down to 1 and the flow waits at the fence: it is confirmed next. */
export const counted = (state: HolderState, at: number): Result =>
  state.fenceAskedAt === undefined || state.countdown > 1
    ? { state, commands: [] }
    : fence(state, at);

/** A lease write refused (the lease went elsewhere) or failed (it may have landed). */
export const notLanded = (state: HolderState, refused: boolean): Result => {
  const write = state.writing;
  if (!write) return { state, commands: [] };
  // A write that failed may have landed: its version stays `unanswered`, for the release.
  const kept = { ...state, writing: undefined, ...(refused ? { unanswered: undefined } : {}) };
  if (state.name === 'counting') {
    return lose(
      kept,
      write.write === 'fence'
        ? 'Lease not confirmed before the access-token request'
        : refused
          ? 'Lease taken over'
          : 'Lease write failed',
    );
  }
  const waiting = write.write === 'fence' && state.fenceAskedAt !== undefined;
  return waiting
    ? { state: { ...kept, fenceAskedAt: undefined }, commands: [{ do: 'refuse-fence' }] }
    : { state: kept, commands: [] };
};
