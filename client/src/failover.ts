/**
 * Failover across brokers (issue 26): several brokers of one deployment, in regions that share
 * one table, tried in the order given (the caller's own region first). A broker that cannot
 * answer is skipped for a short time by its circuit breaker, and the next one is asked within
 * the same call's time.
 *
 * What counts as "cannot answer" and what counts as an answer is decided here, once: the same
 * predicate picks what fails over, what trips a breaker, and (through {@link isOutage}) what the
 * client rides out with its last token.
 */
import { BrokerErrorCode, ClientErrorCode, TokenBrokerError, TransportError } from './errors.js';
import type { Operation, Transport } from './transports.js';

/** How a broker that failed is skipped (the client's `failover` option). */
export interface FailoverOptions {
  /**
   * How long a broker that could not answer is skipped before one call may try it again
   * (half-open); default 5000 ms, about one `maxAgeMs`: a busy process is back on its own
   * region's broker within one or two reuse times of its recovery.
   */
  readonly openMs?: number;
  /** Each failed retry of a skipped broker doubles its time, up to this; default 60 000 ms. */
  readonly maxOpenMs?: number;
}

export const DEFAULT_FAILOVER: Required<FailoverOptions> = { openMs: 5_000, maxOpenMs: 60_000 };

/** The broker's own answers that say it failed on its side (5xx): it can say nothing now. */
const BROKER_FAILURES = new Set<string>([
  BrokerErrorCode.INTERNAL_ERROR,
  BrokerErrorCode.STORE_UNAVAILABLE,
  BrokerErrorCode.UPSTREAM_UNAVAILABLE,
]);

/**
 * Whether `error` means the broker could not be reached or could not answer: a transport
 * failure (the network, a timeout, AWS's 5xx or 429 in front of the broker, an answer outside
 * its protocol), or the broker's own 5xx. Not a caller's abort, an IAM denial (403) or a
 * redirect, nor any other answer of the broker (a 4xx says something about this request).
 * What the client rides out with its last token, once every broker failed so.
 */
export const isOutage = (error: unknown): boolean => {
  if (error instanceof TransportError) {
    if (error.code === ClientErrorCode.ABORTED) return false;
    return error.status === undefined || error.status >= 500 || error.status === 429;
  }
  return error instanceof TokenBrokerError && BROKER_FAILURES.has(error.code);
};

/**
 * AWS refused the request in front of the broker, without the broker's error: an IAM denial
 * (401, 403) or no such function or URL (404). It says something about that broker's
 * deployment (a region whose resource policy or function is missing or wrong), not about the
 * request: another region may answer. A caller denied everywhere gets the same refusal from
 * each, a little later. Not an outage: no stale token is handed out on it.
 */
const isRefusedInFront = (error: unknown): boolean =>
  error instanceof TransportError &&
  error.code === ClientErrorCode.TRANSPORT_FAILED &&
  (error.status === 401 || error.status === 403 || error.status === 404);

/**
 * Whether another broker may answer where this one did not: an outage, or AWS's refusal in front
 * of it. Everything else is an answer (`UNKNOWN_CONNECTION`, `CALLER_NOT_ALLOWED`, a 400, …):
 * every region reads one connections configuration and one table, so another would say the
 * same, and the client does not ask it.
 */
export const cannotAnswer = (error: unknown): boolean => isOutage(error) || isRefusedInFront(error);

/** A breaker's verdict for one call: go (closed), go as the one trial (half-open), or skip. */
export type Pass = 'closed' | 'trial' | 'forced';

/**
 * One broker's circuit breaker, on the client's monotonic clock. Closed: every call may go.
 * The first failure opens it (a short breaker: while it is open, another region answers from
 * the same table, so opening too early costs a cross-region round trip, and not opening costs
 * every call a failed attempt). Open: skipped for `openMs`; then one call at a time may try it
 * (half-open): an answer closes it, a failure opens it again for twice as long, up to
 * `maxOpenMs`.
 */
export class Breaker {
  #state: 'closed' | 'open' | 'half-open' = 'closed';
  #openUntil = 0;
  #openMs: number;
  #trialOut = false;

  constructor(
    private readonly options: Required<FailoverOptions>,
    private readonly clock: () => number,
  ) {
    this.#openMs = options.openMs;
  }

  /** `closed`, `open` (skipped now) or `half-open` (its trial is due or out). */
  get state(): 'closed' | 'open' | 'half-open' {
    if (this.#state === 'open' && this.clock() >= this.#openUntil) this.#state = 'half-open';
    return this.#state;
  }

  /** Whether a call could go now, without taking the trial. */
  available(): boolean {
    const state = this.state;
    return state === 'closed' || (state === 'half-open' && !this.#trialOut);
  }

  /** A pass for one call, or none (skip this broker): a half-open breaker gives one at a time. */
  acquire(): Pass | undefined {
    const state = this.state;
    if (state === 'closed') return 'closed';
    if (state === 'half-open' && !this.#trialOut) {
      this.#trialOut = true;
      return 'trial';
    }
    return undefined;
  }

  /** The broker answered (a token, or an answer-type error): closed again. */
  succeeded(): void {
    this.#state = 'closed';
    this.#trialOut = false;
    this.#openMs = this.options.openMs;
  }

  /** The broker could not answer; says whether this opened a closed breaker. */
  failed(pass: Pass): boolean {
    const wasClosed = this.#state === 'closed';
    if (pass === 'trial') {
      this.#trialOut = false;
      this.#openMs = Math.min(this.#openMs * 2, this.options.maxOpenMs);
    }
    // A forced call (every breaker was open) leaves an open breaker's time as it was.
    if (pass !== 'forced' || wasClosed) {
      this.#state = 'open';
      this.#openUntil = this.clock() + this.#openMs;
    }
    return wasClosed;
  }

  /** The call was given up before the broker said anything: a trial is due again. */
  released(pass: Pass): void {
    if (pass === 'trial') this.#trialOut = false;
  }
}

/** One broker of the list: how to reach it, and what to call it in messages. */
export interface Broker {
  readonly label: string;
  readonly transport: Transport;
}

export interface FailoverContext {
  /** The client's monotonic clock (ms). */
  readonly clock: () => number;
  /** Told when a broker's breaker opens (once per broker and outage). */
  readonly warn: (message: string) => void;
}

/** Settles with `promise`, or rejects as soon as `signal` fires. */
export const untilAborted = <T>(promise: Promise<T>, signal: AbortSignal): Promise<T> => {
  if (signal.aborted) {
    // Nobody waits for `promise` any more: its later failure must not be an unhandled rejection.
    promise.catch(() => undefined);
    return Promise.reject(signal.reason);
  }
  return new Promise<T>((resolve, reject) => {
    const onAbort = () => reject(signal.reason);
    signal.addEventListener('abort', onAbort, { once: true });
    promise.then(resolve, reject).finally(() => signal.removeEventListener('abort', onAbort));
  });
};

/** Sends an operation to the first broker that answers. */
export interface Failover {
  /**
   * `deadline()` is when (on the client's monotonic clock) the last caller waiting for this
   * request gives up: each attempt gets an equal share of what is left of it among the brokers
   * still to try, so that a broker that hangs cannot use up the time of the next ones.
   */
  send(operation: Operation, signal: AbortSignal, deadline: () => number): Promise<unknown>;
}

/**
 * Tries `brokers` in order, skipping those whose breaker is open, within the callers' time.
 * When every breaker is open, every broker is asked in order, as a single broker is: there is
 * nothing better to prefer, and a call must not fail without asking anyone. An answer-type
 * error ends the call at once. When none answers, the call fails with AWS's refusal in front of
 * a broker if there was one (not an outage: no stale token), else with the last broker's error.
 */
export const createFailover = (
  brokers: readonly Broker[],
  options: Required<FailoverOptions>,
  { clock, warn }: FailoverContext,
): Failover => {
  const breakers = brokers.map(() => new Breaker(options, clock));

  /**
   * One attempt at `broker`, cut once `share()` ms have gone since it started (read again when
   * they have: a caller that joined the request meanwhile may have brought a later deadline).
   * What fails comes out as a TokenBrokerError.
   */
  const attempt = async (
    broker: Broker,
    operation: Operation,
    outer: AbortSignal,
    share: () => number,
  ): Promise<unknown> => {
    const controller = new AbortController();
    const start = clock();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const arm = () => {
      const wait = start + share() - clock();
      if (wait > 0) timer = setTimeout(arm, wait);
      else {
        controller.abort(
          new DOMException(`No answer within ${Math.round(clock() - start)} ms`, 'TimeoutError'),
        );
      }
    };
    arm();
    const onAbort = () => controller.abort(outer.reason);
    outer.addEventListener('abort', onAbort, { once: true });
    try {
      return await untilAborted(
        broker.transport.send(operation, { signal: controller.signal }),
        controller.signal,
      );
    } catch (error) {
      // The caller gave up: its reason, as a single broker's call would see it.
      if (outer.aborted) throw outer.reason;
      if (error instanceof TokenBrokerError && !(error instanceof TransportError)) throw error;
      if (controller.signal.aborted) {
        throw new TransportError(
          `The broker ${broker.label} did not answer within ${Math.round(clock() - start)} ms, its share of the call's time`,
          ClientErrorCode.TIMEOUT,
          { cause: controller.signal.reason },
        );
      }
      if (error instanceof TokenBrokerError) throw error;
      throw new TransportError(
        `The broker ${broker.label} failed: ${(error as Error)?.message ?? String(error)}`,
        ClientErrorCode.TRANSPORT_FAILED,
        { cause: error },
      );
    } finally {
      clearTimeout(timer);
      outer.removeEventListener('abort', onAbort);
    }
  };

  return {
    async send(operation, signal, deadline) {
      const forced = breakers.every((breaker) => !breaker.available());
      let refused: unknown;
      let last: unknown;
      for (let i = 0; i < brokers.length; i += 1) {
        const broker = brokers[i] as Broker;
        const breaker = breakers[i] as Breaker;
        const pass = forced ? 'forced' : breaker.acquire();
        if (pass === undefined) continue;
        // This one and every later one that may be asked share what is left, equally.
        const left = 1 + breakers.slice(i + 1).filter((next) => forced || next.available()).length;
        const start = clock();
        const share = () => (deadline() - start) / left;
        if (!(share() > 0) || signal.aborted) {
          breaker.released(pass);
          break;
        }
        try {
          const answer = await attempt(broker, operation, signal, share);
          breaker.succeeded();
          return answer;
        } catch (error) {
          if (signal.aborted) {
            breaker.released(pass);
            throw error;
          }
          if (!cannotAnswer(error)) {
            // An answer: the broker is up, and every other would say the same.
            breaker.succeeded();
            throw error;
          }
          if (breaker.failed(pass) && brokers.length > 1) {
            warn(
              `The token broker ${broker.label} cannot answer (${(error as Error).message}): asking the next one; skipping it for ${options.openMs / 1000} s, then trying it again`,
            );
          }
          if (!isOutage(error)) refused ??= error;
          last = error;
        }
      }
      if (signal.aborted) throw signal.reason;
      throw (
        refused ??
        last ??
        new TransportError('No time was left to ask a broker', ClientErrorCode.TIMEOUT)
      );
    },
  };
};

/** `arn:aws:lambda:<region>:<account>:function:<name>[:<qualifier>]` carries its region. */
export const arnRegion = (functionName: string): string | undefined =>
  /^arn:aws[a-z-]*:lambda:([a-z0-9-]+):\d{12}:function:/.exec(functionName)?.[1];
