/**
 * The holder's driver: runs what `step` (`state.ts`) commands (timers, lease writes, the fence's
 * answer, the abort signal, the flow's effects in order) and feeds the results back as events.
 * Countdown writes never overlap and go out in order, each a step after the last answer (I2).
 */
import { randomUUID } from 'node:crypto';
import { type Clock, Deadline } from '../../clock.js';
import type { LeaseRef, TokenStore } from '../../ports.js';
import {
  type HolderCommand,
  type HolderEvent,
  type HolderOutcome,
  type HolderState,
  type HolderTerms,
  type HolderTimer,
  initialState,
  type PostAnswer,
  step,
} from './state.js';

/** The lease went elsewhere, or its time ran out, before the access-token POST: nothing sent. */
export class LeaseLost extends Error {
  override readonly name = 'LeaseLost';
}

/** The flow's side of the commands: the token write and the clean-up (`issue-under-lease.ts`). */
export interface HolderEffects {
  /** Writes the issued token under `ref`: whether it was accepted (a throw: no answer). */
  writeToken(ref: LeaseRef): Promise<boolean>;
  dropReplaced(): Promise<void>;
  forgetReplaced(): void;
  release(ref: LeaseRef, restore: boolean): Promise<void>;
  holdForGrace(ref: LeaseRef, confirmedUntil: number | undefined, until: number): Promise<void>;
}

/** What a held lease starts from: the reducer's terms but the deadline's instant, and the lease. */
export interface HeldLeaseOptions extends Omit<HolderTerms, 'deadlineAt'> {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly connection: string;
  /**
   * The lease as taken: its holder and first version, its countdown, and when its write was sent
   * (its time counts from here) and answered (the first step counts from here), monotonic.
   */
  readonly lease: LeaseRef;
  readonly countdown: number;
  readonly leasedAt: number;
  readonly answeredAt: number;
  readonly deadline: Deadline;
  /** Bounds a store call to `waitMs` (the POST budget). */
  readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
  readonly effects: HolderEffects;
}

export class HeldLease {
  readonly #aborter = new AbortController();
  #state: HolderState;
  readonly #timers = new Map<HolderTimer, () => void>();
  readonly #queue: HolderEvent[] = [];
  #stepping = false;
  #fence: PromiseWithResolvers<Deadline> | undefined;
  /** The last answered lease write's round trip (ms): what the next step announces. */
  #roundTripMs: number;
  /** The flow's effects, one after another, in the order commanded. */
  #effects: Promise<void> = Promise.resolve();
  readonly #outcome = Promise.withResolvers<HolderOutcome>();

  constructor(private readonly options: HeldLeaseOptions) {
    const { deadline, lease, upstreamTimeoutMs, replacesToken, suspect, timing } = options;
    this.#roundTripMs = Math.max(0, options.answeredAt - options.leasedAt);
    this.#state = initialState(
      { deadlineAt: deadline.at, upstreamTimeoutMs, replacesToken, suspect, timing },
      { ...options, version: lease.version },
    );
    this.#dispatch('started');
  }

  get state(): HolderState {
    return this.#state;
  }

  /** The lease as last written (the token write and a release name exactly it). */
  get ref(): LeaseRef {
    const { version, unanswered } = this.#state;
    return { holder: this.options.lease.holder, version, ...(unanswered ? { unanswered } : {}) };
  }

  /** Aborted when the lease is lost: stops every upstream request in flight. */
  get signal(): AbortSignal {
    return this.#aborter.signal;
  }

  /** The fence (I1): resolves with the last instant the POST may leave; rejects with LeaseLost. */
  fence(): Promise<Deadline> {
    const fence = Promise.withResolvers<Deadline>();
    this.#fence = fence;
    this.#dispatch('fence-asked');
    return fence.promise;
  }

  /** Gives the lease up before its POST (the environment shuts down): see `step`'s `abandon`. */
  abandon(reason: string): void {
    this.#dispatch('abandon', { reason });
  }

  /** The flow ended: how its POST was answered. Settles with how it ended, once cleaned up. */
  answered(outcome: PostAnswer): Promise<HolderOutcome> {
    this.#dispatch('answered', { outcome });
    return this.#outcome.promise;
  }

  #dispatch<T extends HolderEvent['type']>(
    type: T,
    fields?: Omit<Extract<HolderEvent, { type: T }>, 'type' | 'at'>,
  ): void {
    this.#queue.push({ type, at: this.options.clock.monotonic(), ...fields } as HolderEvent);
    // Events raised while commands run (a write's version, the POST sent) queue behind them.
    if (this.#stepping) return;
    this.#stepping = true;
    try {
      for (let event = this.#queue.shift(); event; event = this.#queue.shift()) {
        const { state, commands } = step(this.#state, event);
        this.#state = state;
        for (const command of commands) this.#run(command);
      }
    } finally {
      this.#stepping = false;
    }
  }

  #run(command: HolderCommand): void {
    const { effects, clock } = this.options;
    switch (command.do) {
      case 'arm':
        this.#timers.get(command.timer)?.();
        this.#timers.set(command.timer, this.#arm(command.timer, command.ms));
        break;
      case 'cancel':
        this.#timers.get(command.timer)?.();
        this.#timers.delete(command.timer);
        break;
      case 'write-lease':
        this.#writeLease(command);
        break;
      case 'abort':
        if (!this.signal.aborted) this.#aborter.abort(new LeaseLost(command.reason));
        break;
      case 'refuse-fence':
        this.#fence?.reject(
          this.signal.reason ?? new LeaseLost(this.#state.reason ?? 'Flow ended'),
        );
        this.#fence = undefined;
        break;
      case 'send-post':
        // The flow sends its POST once this turn ends: the holder is `posting` by then.
        this.#dispatch('post-sent');
        this.#fence?.resolve(Deadline.in(clock, command.sendBy - clock.monotonic()));
        this.#fence = undefined;
        break;
      case 'write-token':
        this.#then(() =>
          effects.writeToken(this.ref).then(
            (written) => this.#dispatch(written ? 'token-written' : 'token-refused'),
            () => this.#dispatch('token-write-failed'),
          ),
        );
        break;
      case 'drop-replaced':
        this.#then(() => effects.dropReplaced());
        break;
      case 'forget-replaced':
        this.#then(async () => effects.forgetReplaced());
        break;
      case 'release':
        this.#then(() => effects.release(this.ref, command.restore));
        break;
      case 'hold-for-grace':
        this.#then(() => effects.holdForGrace(this.ref, this.#state.confirmedUntil, command.until));
        break;
      case 'finish':
        this.#then(async () => this.#outcome.resolve(command.outcome));
        break;
    }
  }

  /** A timer, fired once; a step the flow waits on is a sleep instead. */
  #arm(timer: HolderTimer, ms: number): () => void {
    const { clock } = this.options;
    const fire = () => this.#dispatch(TIMER_EVENTS[timer]);
    const { countdown, fenceAskedAt, writing } = this.#state;
    const waitedOn = !writing && (countdown > 1 || fenceAskedAt !== undefined);
    if (timer !== 'step' || !waitedOn) return clock.after(ms, fire);
    let armed = true;
    // Slept from the next turn: the flow that holds the lease gets under way first.
    void Promise.resolve()
      .then(() => clock.sleep(ms))
      .then(
        () => {
          if (armed) fire();
        },
        () => undefined,
      );
    return () => {
      armed = false;
    };
  }

  #then(effect: () => Promise<void>): void {
    this.#effects = this.#effects.then(effect).catch(() => undefined);
  }

  /** One conditional lease write on the version last written; its answer comes back as an event. */
  #writeLease({ durationMs, countdown, boundMs }: Extract<HolderCommand, { do: 'write-lease' }>) {
    const { clock, store, connection, bounded, lease, timing, deadline } = this.options;
    const version = randomUUID();
    const expiresAt = clock.now() + durationMs;
    this.#dispatch('write-sent', { version, expiresAt });
    // Named with the version sent as `unanswered`: a retry of a write that landed still matches.
    const ref = { holder: lease.holder, version: this.#state.version, unanswered: version };
    const sentAt = clock.monotonic();
    // A step is its wait and then this write: readers aim their read at the cut-over with it.
    const stepMs = timing.countdownStepMs + this.#roundTripMs;
    const terms = { version, leaseExpiresAt: expiresAt, durationMs, countdown, stepMs };
    // A conflict (not applied) is sent again until the caller's deadline, or the command's.
    const until = boundMs === undefined ? deadline : Deadline.in(clock, boundMs).min(deadline);
    const write = store.renewLease(connection, ref, terms, { deadline: until });
    const answer = boundMs === undefined ? write : bounded(write, boundMs);
    answer.then(
      (landed) => {
        if (landed) this.#roundTripMs = clock.monotonic() - sentAt;
        this.#dispatch(landed ? 'write-landed' : 'write-refused');
      },
      () => this.#dispatch('write-failed'),
    );
  }
}

const TIMER_EVENTS = { step: 'step-due', 'last-call': 'last-call', post: 'post-timer' } as const;
