/**
 * The holder as one pure reducer: `step(state, event)` is the only writer of its state and says
 * in commands what to do (`held-lease.ts` runs them). docs/protocol.md's holder table is
 * generated from it. I1: `send-post` only on a fresh confirmation. I3: the last call.
 * Instants are monotonic ms, except `expiresAt` and `confirmedUntil`: the stored wall-clock expiry.
 */
import {
  leaseHeartbeatMs,
  leaseTerm,
  type ProtocolTiming,
  postLandsWithinMs,
  postSendWindowMs,
  storeReserveMs,
} from '../timing/index.js';

/**
 * `counting` (countdown to 1) → `fenced` (POST may leave) → `posting` → `writing` (the token);
 * final: `written`, `superseded`, `lost` (nothing sent), `outcome-unknown`, `failed`.
 */
export type HolderName =
  | 'counting'
  | 'fenced'
  | 'posting'
  | 'writing'
  | 'written'
  | 'superseded'
  | 'lost'
  | 'outcome-unknown'
  | 'failed';

/** What a holder knows from its start and never changes. */
export interface HolderTerms {
  /** The caller's deadline, monotonic ms (a number: the reducer reads no clock). */
  readonly deadlineAt: number;
  /** Longest access-token POST; also the grace after it during which it may still land. */
  readonly upstreamTimeoutMs: number;
  /** The flow replaces a valid token (dropped if the POST may have revoked it). */
  readonly replacesToken: boolean;
  /** That token may already be revoked (a lease taken over after a countdown). */
  readonly suspect: boolean;
  readonly timing: ProtocolTiming;
}

/** A lease write in flight (writes never overlap). */
export interface LeaseWrite {
  /** A step (the countdown one lower, or kept at 1: the heartbeat), or the fence (0). */
  readonly write: 'step' | 'fence';
  readonly countdown: number;
  readonly durationMs: number;
  /** When it was sent (monotonic): its duration counts from here. */
  readonly sentAt: number;
  readonly budget?: number | undefined;
  /** The fence's send window: no attempt of the POST leaves later than `sentAt` plus it. */
  readonly sendWindow?: number | undefined;
  /** The expiry it stores (wall clock), once sent. */
  readonly expiresAt?: number | undefined;
}

export interface HolderState {
  readonly name: HolderName;
  readonly terms: HolderTerms;
  /** The countdown last written (0 once confirmed). */
  readonly countdown: number;
  /** The version last written: each write names it, and sets a new one. */
  readonly version: string;
  /** A version sent whose answer never came: it may have landed (a release names it too). */
  readonly unanswered: string | undefined;
  readonly ownedUntil: number;
  /** When the last lease write was answered: the next step counts from here. */
  readonly answeredAt: number;
  readonly writing: LeaseWrite | undefined;
  /** Since when the flow waits at the fence (undefined: it does not). */
  readonly fenceAskedAt: number | undefined;
  /** How long the flow waited at the fence, in all (not part of an issuance's duration). */
  readonly waitedMs: number;
  /** The stored expiry the confirmation wrote: no other container takes the lease before it. */
  readonly confirmedUntil: number | undefined;
  /** The confirmation's term on the monotonic clock: what memory vouches for counts to here. I2. */
  readonly confirmedUntilMonotonic: number | undefined;
  /** The POST's last instant to leave and its abort instant (monotonic), once fenced (A1). */
  readonly postSendBy?: number | undefined;
  readonly postAbortAt?: number | undefined;
  readonly reason: string | undefined;
  /** The flow is over and cleaned up: nothing more happens. */
  readonly finished: boolean;
}

/** How the POST (or the flow before it) ended, as the driver classifies the upstream's answer. */
export type PostAnswer = 'issued' | 'failed' | 'outcome-unknown' | 'not-sent';

/** What happens to a holder (docs/protocol.md's holder table says each in words). */
export type HolderEvent = { readonly at: number } & (
  | { readonly type: 'started' | 'step-due' | 'post-timer' | 'fence-asked' | 'post-sent' }
  /** I3: the POST and the write after it no longer fit before the deadline. */
  | { readonly type: 'last-call' }
  | { readonly type: 'abandon'; readonly reason: string }
  /** The lease write commanded left, naming this version and storing this expiry. */
  | { readonly type: 'write-sent'; readonly version: string; readonly expiresAt: number }
  /** `write-failed`: no answer (an error, or the fence's budget ran out): it may have landed. */
  | { readonly type: 'write-landed' | 'write-refused' | 'write-failed' }
  | { readonly type: 'answered'; readonly outcome: PostAnswer }
  /** `token-write-failed`: the token is served from memory only. */
  | { readonly type: 'token-written' | 'token-refused' | 'token-write-failed' }
);

export type HolderTimer = 'step' | 'last-call' | 'post';

/** How the holder's flow ended, as its caller is told: a final state, or the token in memory only. */
export type HolderOutcome =
  | Exclude<HolderName, 'counting' | 'fenced' | 'posting' | 'writing'>
  | 'written-in-memory';

export type HolderCommand =
  /** Arms a timer (each fires once), replacing one armed before. */
  | { readonly do: 'arm'; readonly timer: HolderTimer; readonly ms: number }
  | { readonly do: 'cancel'; readonly timer: HolderTimer }
  /** A conditional write of the lease on the last version, as the next, for `durationMs`. */
  | ({ readonly do: 'write-lease'; readonly boundMs?: number } & Pick<
      LeaseWrite,
      'write' | 'countdown' | 'durationMs'
    >)
  /** Stops the flow's upstream requests in flight (the lease's signal). */
  | { readonly do: 'abort'; readonly reason: string }
  /** The fence's answer: the POST may leave now (I1), no attempt after `sendBy` (monotonic). */
  | { readonly do: 'send-post'; readonly sendBy: number }
  /** The fence's answer: nothing may be sent. */
  | { readonly do: 'refuse-fence' }
  /** Writes the issued token under the lease as last written; the lease goes with it. */
  | { readonly do: 'write-token' }
  /** The replaced token may be revoked: forgotten here, and deleted from the store if unchanged. */
  | { readonly do: 'drop-replaced' }
  /** The replaced token is revoked (ours was issued): forgotten here. */
  | { readonly do: 'forget-replaced' }
  /** Releases the lease; `restore`: the replaced token is good again if the release proves it. */
  | { readonly do: 'release'; readonly restore: boolean }
  /** Hold the lease until `until` (monotonic): the POST may land until then (A1). */
  | { readonly do: 'hold-for-grace'; readonly until: number }
  | { readonly do: 'finish'; readonly outcome: HolderOutcome };

type Result = { readonly state: HolderState; readonly commands: readonly HolderCommand[] };

const NO_TIME = 'No time left for the access-token request';

/** The lease is lost before the POST: nothing is sent, the flow is stopped (its signal). */
const lose = (state: HolderState, reason: string): Result => {
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
const writeLease = (state: HolderState, at: number): Result => {
  const countdown = state.countdown > 1 ? state.countdown - 1 : state.countdown;
  // A short (counting) version when another step follows a step after this one's answer.
  const counting = countdown > 1 || state.fenceAskedAt !== undefined;
  const durationMs = leaseTerm(state.terms.deadlineAt - at, state.terms.timing, counting);
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
const nextStepMs = (state: HolderState): number => {
  const { timing } = state.terms;
  return state.countdown > 1 ? timing.countdownStepMs : leaseHeartbeatMs(timing);
};

/**
 * The fence once the countdown is at 1 (or 0) and a step has passed since the last answer: the
 * confirmation (countdown 0) covers the POST's budget and A1's bound after it.
 */
const fence = (state: HolderState, at: number): Result => {
  if (state.writing || state.fenceAskedAt === undefined || state.countdown > 1) {
    return { state, commands: [] };
  }
  const { deadlineAt, upstreamTimeoutMs, timing } = state.terms;
  const due = state.answeredAt + timing.countdownStepMs;
  if (state.countdown > 0 && at < due) {
    return { state, commands: [{ do: 'arm', timer: 'step', ms: due - at }] };
  }
  const waited = { ...state, waitedMs: state.waitedMs + (at - state.fenceAskedAt) };
  const budget = Math.min(upstreamTimeoutMs, deadlineAt - at - storeReserveMs(timing));
  if (budget < timing.minPostMs) return lose(waited, NO_TIME);
  const sendWindow = Math.min(budget, postSendWindowMs(timing));
  const durationMs = sendWindow + postLandsWithinMs(upstreamTimeoutMs);
  return {
    state: {
      ...waited,
      writing: { write: 'fence', countdown: 0, durationMs, sentAt: at, budget, sendWindow },
    },
    commands: [{ do: 'write-lease', write: 'fence', countdown: 0, durationMs, boundMs: budget }],
  };
};

type WriteAnswer = 'write-landed' | 'write-refused' | 'write-failed';

/**
 * A lease write answered: landed (the version it set is ours; a release names it), refused (the
 * lease went elsewhere) or failed (it may have landed: its version stays `unanswered`).
 */
const writeAnswered = (state: HolderState, at: number, answer: WriteAnswer): Result => {
  const write = state.writing;
  if (!write) return { state, commands: [] };
  const fenced = write.write === 'fence';
  const landed = answer === 'write-landed';
  const kept: HolderState = {
    ...state,
    writing: undefined,
    ...(answer === 'write-failed' ? {} : { unanswered: undefined }),
    ...(landed ? { version: state.unanswered ?? state.version } : {}),
    ...(landed && fenced
      ? {
          confirmedUntil: write.expiresAt,
          confirmedUntilMonotonic: write.sentAt + write.durationMs,
        }
      : {}),
  };
  if (state.name !== 'counting') {
    // The flow waited at the fence for this confirmation's answer: it is refused now.
    return fenced && kept.fenceAskedAt !== undefined
      ? { state: { ...kept, fenceAskedAt: undefined }, commands: [{ do: 'refuse-fence' }] }
      : { state: kept, commands: [] };
  }
  if (!landed) {
    if (fenced) return lose(kept, 'Lease not confirmed before the access-token request');
    return lose(kept, answer === 'write-refused' ? 'Lease taken over' : 'Lease write failed');
  }
  if (fenced) {
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
  return fence(next, at);
};

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
  ownedUntil: lease.leasedAt + leaseTerm(Infinity, terms.timing, lease.countdown > 1),
  answeredAt: lease.answeredAt,
  writing: undefined,
  fenceAskedAt: undefined,
  waitedMs: 0,
  confirmedUntil: undefined,
  confirmedUntilMonotonic: undefined,
  reason: undefined,
  finished: false,
});

const ALL_TIMERS = (['step', 'last-call', 'post'] as const).map(
  (timer): HolderCommand => ({ do: 'cancel', timer }),
);

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
    const { type } = event;
    if (type !== 'write-landed' && type !== 'write-refused' && type !== 'write-failed') return none;
    return { state: writeAnswered(state, event.at, type).state, commands: [] };
  }
  const { at } = event;
  const { timing } = state.terms;
  switch (event.type) {
    case 'started': {
      // The periodic lease write, from the answer of the write that took the lease; I3: the lease
      // goes once the POST and the write after it no longer fit.
      const stepMs = state.answeredAt + nextStepMs(state) - at;
      const lastCallMs = state.terms.deadlineAt - at - storeReserveMs(timing) - timing.minPostMs;
      return {
        state,
        commands: [
          { do: 'arm', timer: 'step', ms: Math.max(0, stepMs) },
          { do: 'arm', timer: 'last-call', ms: Math.max(0, lastCallMs) },
        ],
      };
    }
    case 'step-due':
      if (state.name !== 'counting') return none;
      // Before the write in flight: a write that never came back must not keep the lease alive.
      if (at >= state.ownedUntil) return lose(state, 'Lease time ran out');
      if (state.writing) return none;
      // At 1, the flow at the fence is confirmed; a flow not there yet keeps the lease.
      return state.countdown <= 1 && state.fenceAskedAt !== undefined
        ? fence(state, at)
        : writeLease(state, at);
    case 'last-call':
      return state.name === 'counting' ? lose(state, NO_TIME) : none;
    case 'post-timer': {
      const reason = 'The access-token request outlived its lease';
      // The POST outlived its lease: stopped; only its answer tells what it did.
      if (state.name !== 'posting') return state.name === 'counting' ? lose(state, reason) : none;
      return { state: { ...state, reason }, commands: [{ do: 'abort', reason }] };
    }
    case 'abandon':
      return state.name === 'counting' || state.name === 'fenced'
        ? lose(state, event.reason)
        : none;
    case 'fence-asked': {
      const asked: HolderState = { ...state, fenceAskedAt: at };
      // The flow was stopped while posting: nothing more may be sent.
      if (state.name === 'posting' && state.reason !== undefined) return lose(asked, state.reason);
      // Fenced again (a second POST after a definite refusal of the first): confirmed afresh.
      if (state.name === 'posting') return fence({ ...asked, name: 'counting', countdown: 0 }, at);
      if (state.name !== 'counting') return { state, commands: [{ do: 'refuse-fence' }] };
      return fence(asked, at);
    }
    case 'write-sent': {
      const sent = state.writing && { writing: { ...state.writing, expiresAt: event.expiresAt } };
      return { state: { ...state, unanswered: event.version, ...sent }, commands: [] };
    }
    case 'write-landed':
    case 'write-refused':
    case 'write-failed':
      return writeAnswered(state, at, event.type);
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
