/**
 * Typed client of the Open API token broker, for internal services.
 *
 * @example Three lines to an authenticated call
 * ```ts
 * import { createTokenClient } from '@open-api-token-broker/client';
 * const tokens = createTokenClient({ transport: { type: 'lambda', functionName: 'token-broker-prod-broker' } });
 * const orders = await tokens.withToken('production', (token) =>
 *   fetch('https://open-api.example.com/open-api/v3/orders', { headers: { 'x-access-token': token } }),
 * );
 * ```
 *
 * `withToken` retries once with a new token when the Open API answers 401 (or when your
 * `isRejected` says so), after reporting the rejected token to the broker.
 */
import { createHash } from 'node:crypto';
import {
  BadRequestError,
  ClientConfigError,
  ClientErrorCode,
  TokenBrokerError,
  TokenReportedError,
  TransportError,
} from './errors.js';
import {
  arnRegion,
  type Broker,
  createFailover,
  DEFAULT_FAILOVER,
  type FailoverOptions,
  isOutage,
  untilAborted,
} from './failover.js';
import { type Reported, ReportedTokens } from './reported.js';
import {
  createTransport,
  type Operation,
  type Transport,
  type TransportOptions,
} from './transports.js';

export * from './errors.js';
export type { FailoverOptions } from './failover.js';
export type {
  HttpTransportOptions,
  LambdaTransportOptions,
  Operation,
  SendOptions,
  Transport,
  TransportOptions,
} from './transports.js';
export { isLoopback, LOCAL_DEFAULTS } from './transports.js';

/** A token as the broker hands it out. */
export interface AccessToken {
  readonly connection: string;
  /** Send it as the `x-access-token` header. */
  readonly accessToken: string;
  readonly expiresAt: Date;
  /** Whole seconds left when the broker answered. */
  readonly expiresIn: number;
  /**
   * For how many ms, counted from when the request was sent, the broker lets this token be
   * reused without asking again (0: not at all). The broker replaces tokens long before they
   * expire, and each replacement revokes the old one: past this, ask again (the client's cache
   * does). A broker older than 0.5.0 of this client sends none: 0 then.
   */
  readonly maxAgeMs: number;
  /**
   * For how many whole seconds after `maxAgeMs` the broker lets this token be used while it
   * cannot be reached (its `stale-if-error`; 0: not at all). The client hands it out then,
   * flagged `stale`, and asks the broker again on every call. A broker before this field: 0.
   */
  readonly staleIfErrorSeconds: number;
  /**
   * Present, `true`, only on a token handed out because the broker could not be reached (a
   * network failure, a timeout, a 5xx or throttling): the last one it gave for the connection,
   * within its `staleIfErrorSeconds`. The broker could not say whether it was replaced since.
   */
  readonly stale?: true;
}

/**
 * One broker of a list: its function ARN (direct invoke in the ARN's region) or its Function
 * URL (HTTP signed with SigV4, in the URL's region), or a transport's options or a transport.
 */
export type BrokerTarget = string | TransportOptions | Transport;

export interface TokenClientOptions {
  /** One broker: direct Lambda invoke, or HTTP to the Function URL signed with SigV4. */
  readonly transport?: TransportOptions | Transport;
  /**
   * Several brokers of one deployment, in regions that share its table, in order of preference
   * (your own region first), instead of `transport`. Each call asks the first that may answer
   * and fails over to the next when one cannot (see `failover`); the last token is used stale
   * only once none could answer.
   */
  readonly brokers?: readonly BrokerTarget[];
  /** How long a broker that could not answer is skipped (with `brokers`); see FailoverOptions. */
  readonly failover?: FailoverOptions;
  /**
   * A cached token is reused for as long as the broker said it may be (`maxAgeMs`, a few
   * seconds), and never closer than this many seconds to its expiry; default 60. The broker's
   * own validity default is 60 s too, so a fresh answer is never refused here.
   */
  readonly marginSeconds?: number;
  /** Limit of each call unless the call sets its own; default 10 000 ms. */
  readonly timeoutMs?: number;
  /**
   * Told what the client decided on its own: the local defaults for a loopback target, and a
   * stale token handed out while the broker cannot be reached (once per connection and outage).
   * Default: `process.emitWarning` (the local defaults printed once per process).
   */
  readonly onWarning?: (message: string) => void;
  readonly now?: () => number;
}

/** Per call: how long to wait, and a signal to give up earlier. */
export interface CallOptions {
  /** Gives up with a `TransportError` (`ABORTED`) when this signal fires. */
  readonly signal?: AbortSignal;
  /**
   * Gives up with a `TransportError` (`TIMEOUT`) after this many ms; default the client's. Each
   * caller keeps its own, also when it shares a request with concurrent callers.
   */
  readonly timeoutMs?: number;
}

export interface GetTokenOptions extends CallOptions {
  /** The token must stay valid at least this many seconds (passed to the broker). */
  readonly minValidity?: number;
  /**
   * Ask the broker even when this client holds a valid token. The broker still answers with
   * its own current token: to have that one replaced, `invalidate` it.
   */
  readonly forceRefresh?: boolean;
}

export interface WithTokenOptions extends GetTokenOptions {
  /**
   * Whether what `fn` threw or returned means the Open API rejected the token. Default: a
   * `Response` with status 401, or an error with `status`/`statusCode` 401.
   */
  readonly isRejected?: (outcome: unknown) => boolean;
}

/** The broker's answer to `invalidate` (docs/contract.md). */
export interface InvalidateResult {
  /** The broker dropped the token (it was its current one): the next request issues a new one. */
  readonly invalidated: boolean;
  /**
   * Only when the token was too young to be replaced on a caller's word: the broker kept the
   * report and replaces the token in about this many seconds. Until then it still serves it, and
   * this client refuses to hand it out (`TokenReportedError`).
   */
  readonly deferredSeconds?: number;
  /**
   * Only on a connection with a `probe`: what the Open API said of the token when the broker
   * asked. `valid`: it still accepts it, nothing was replaced, and this client hands it out
   * again (the rejection came from something else); `revoked`: it was replaced at once.
   */
  readonly verified?: 'valid' | 'revoked';
}

// The wire types below restate the broker's (lib/broker/types.ts) because the client ships alone;
// test/client.test.ts checks at compile time that the two stay identical.

export interface ConnectionStatus {
  readonly connection: string;
  readonly variant: string;
  readonly token: {
    readonly expiresAt: string;
    readonly expiresIn: number;
    readonly issuedAt: string;
    readonly tokenDigest: string;
  } | null;
  readonly lease: {
    readonly holder: string;
    readonly expiresInMs: number;
    /** Lease writes left before its token request (0: the request may be out). */
    readonly countdown: number;
  } | null;
}

export type WarmUpOutcome =
  | { readonly status: 'fresh' | 'issued'; readonly expiresAt: string; readonly expiresIn: number }
  | {
      readonly status: 'failed';
      readonly error: { readonly code: string; readonly message: string };
    };

export interface WarmUpReport {
  readonly connections: Readonly<Record<string, WarmUpOutcome>>;
  readonly issued: number;
  readonly failed: number;
}

/** One readiness check of a connection (see the broker's docs/contract.md, "Readiness"). */
export type ReadinessCheck =
  | { readonly status: 'ok' }
  | {
      readonly status: 'failed';
      readonly error: { readonly code: string; readonly message: string };
    }
  | { readonly status: 'skipped' };

export interface ConnectionReadiness {
  readonly ready: boolean;
  readonly secret: ReadinessCheck;
  readonly token: ReadinessCheck & { readonly expiresIn?: number; readonly source?: string };
}

export interface ReadinessReport {
  readonly ready: boolean;
  readonly connections: Readonly<Record<string, ConnectionReadiness>>;
}

export interface TokenClient {
  /** A token valid for at least `minValidity` (or the margin), from the cache when it can. */
  getToken(connection: string, options?: GetTokenOptions): Promise<AccessToken>;
  /**
   * The token alone, as a provider function for libraries that take one (`() => Promise<string>`);
   * every call goes through this client's cache.
   */
  provider(connection: string, options?: GetTokenOptions): () => Promise<string>;
  /**
   * Reports a token the Open API rejected; the broker drops it only if it is the current one, or
   * keeps the report for later (`deferredSeconds`). From then on this client never hands that
   * token out: an answer that carries it is asked again once, then refused with a
   * `TokenReportedError`.
   */
  invalidate(
    connection: string,
    accessToken: string,
    options?: CallOptions,
  ): Promise<InvalidateResult>;
  /**
   * Runs `fn(token)`; on a rejection, invalidates that exact token and retries once, always with
   * another token (or fails with a `TokenReportedError` when the broker has none yet).
   */
  withToken<T>(
    connection: string,
    fn: (accessToken: string) => Promise<T>,
    options?: WithTokenOptions,
  ): Promise<T>;
  /** Operators: every connection's token metadata and lease (never a token). */
  status(options?: CallOptions): Promise<ConnectionStatus[]>;
  /** Operators: run the broker's warm-up now. */
  warmUp(options?: CallOptions): Promise<WarmUpReport>;
  /**
   * Operators and deploy pipelines: every connection's readiness (its secret, and a token held
   * or obtainable now). Resolves with the report whether ready or not.
   */
  ready(options?: CallOptions): Promise<ReadinessReport>;
}

/** The broker's own limits, so that a bad value is refused here exactly as the broker would. */
export const LIMITS = {
  connectionLength: 200,
  accessTokenLength: 8192,
  maxMinValidity: 1_000_000_000,
} as const;

/** The default `timeoutMs` of every call: the middleware's too, with a client of its own. */
export const DEFAULT_TIMEOUT_MS = 10_000;

/**
 * How far a request's wall-clock age may run ahead of its monotonic age before it counts as
 * pending across a freeze (a clock step of NTP's size, or a slewed second, stays below it).
 */
const FREEZE_SLACK_MS = 1000;

const isTransport = (value: TransportOptions | Transport): value is Transport =>
  typeof (value as Transport).send === 'function';

/** Default rejection test: HTTP 401 from the Open API, as a Response or an error. */
export const isUnauthorized = (outcome: unknown): boolean => {
  if (outcome instanceof Response) return outcome.status === 401;
  const status =
    (outcome as { status?: unknown; statusCode?: unknown } | null)?.status ??
    (outcome as { statusCode?: unknown } | null)?.statusCode;
  return status === 401;
};

/** The reuse time of an answer: what the broker said, or none (an older broker, a bad value). */
const maxAgeOf = (value: unknown): number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? value : 0;

/** The stale-if-error time of an answer, whole seconds: none unless the broker said. */
const staleIfErrorOf = (value: unknown): number =>
  typeof value === 'number' && Number.isFinite(value) && value > 0 ? Math.floor(value) : 0;

const toAccessToken = (body: unknown): AccessToken => {
  const value = body as {
    connection?: unknown;
    accessToken?: unknown;
    expiresAt?: unknown;
    expiresIn?: unknown;
    maxAgeMs?: unknown;
    staleIfErrorSeconds?: unknown;
  };
  if (typeof value?.accessToken !== 'string' || typeof value.expiresAt !== 'string') {
    throw new TransportError('The broker answered without a token', 'TRANSPORT_FAILED');
  }
  return {
    connection: String(value.connection),
    accessToken: value.accessToken,
    expiresAt: new Date(value.expiresAt),
    expiresIn: Number(value.expiresIn),
    maxAgeMs: maxAgeOf(value.maxAgeMs),
    staleIfErrorSeconds: staleIfErrorOf(value.staleIfErrorSeconds),
  };
};

// The broker's rules (functions/broker/requests.ts), with its wording.
const checkConnection = (connection: unknown) => {
  if (
    typeof connection !== 'string' ||
    connection.length === 0 ||
    connection.length > LIMITS.connectionLength
  ) {
    throw new BadRequestError(
      `"connection": must be a string of 1 to ${LIMITS.connectionLength} characters`,
      'BAD_REQUEST',
    );
  }
};
const checkMinValidity = (minValidity: unknown) => {
  if (
    minValidity !== undefined &&
    !(
      Number.isInteger(minValidity) &&
      (minValidity as number) >= 0 &&
      (minValidity as number) <= LIMITS.maxMinValidity
    )
  ) {
    throw new BadRequestError(
      `"minValidity": must be a whole number of seconds from 0 to ${LIMITS.maxMinValidity}`,
      'BAD_REQUEST',
    );
  }
};
const checkAccessToken = (accessToken: unknown) => {
  if (
    typeof accessToken !== 'string' ||
    accessToken.length === 0 ||
    accessToken.length > LIMITS.accessTokenLength
  ) {
    throw new BadRequestError(
      `"accessToken": must be a string of 1 to ${LIMITS.accessTokenLength} characters`,
      'BAD_REQUEST',
    );
  }
};
const checkTimeout = (timeoutMs: unknown, what: string) => {
  if (
    timeoutMs !== undefined &&
    !(typeof timeoutMs === 'number' && Number.isFinite(timeoutMs) && timeoutMs > 0)
  ) {
    throw new ClientConfigError(`${what} must be a number of milliseconds above 0`);
  }
};

// The keys each options object takes: from plain JavaScript, a typo (`minvalidity`) must be
// refused, not silently change what the call does.
const CLIENT_OPTIONS = new Set([
  'transport',
  'brokers',
  'failover',
  'marginSeconds',
  'timeoutMs',
  'onWarning',
  'now',
]);
const FAILOVER_OPTIONS = new Set(['openMs', 'maxOpenMs']);
const CALL_OPTIONS = new Set(['signal', 'timeoutMs']);
const TOKEN_OPTIONS = new Set([...CALL_OPTIONS, 'minValidity', 'forceRefresh']);
const WITH_TOKEN_OPTIONS = new Set([...TOKEN_OPTIONS, 'isRejected']);

/** The first key of `options` that `allowed` does not list. */
const unknownOption = (options: unknown, allowed: ReadonlySet<string>) =>
  typeof options === 'object' && options !== null
    ? Object.keys(options).find((key) => !allowed.has(key))
    : undefined;

/** A call's options, refused as the broker refuses an unknown field. */
const checkOptions = (options: unknown, allowed: ReadonlySet<string>, method: string) => {
  const key = unknownOption(options, allowed);
  if (key !== undefined) {
    throw new BadRequestError(`${method}: unknown option "${key}"`, 'BAD_REQUEST');
  }
};

/** A signal that has already fired ends the call before anything starts (nothing is sent). */
const checkNotAborted = (caller: AbortSignal | undefined) => {
  if (caller?.aborted) {
    throw new TransportError('The call to the broker was aborted', ClientErrorCode.ABORTED, {
      cause: caller.reason,
    });
  }
};

/** The typed error for a call that its own signal or timeout ended. */
const abortedError = (signal: AbortSignal, caller: AbortSignal | undefined, timeoutMs: number) =>
  caller?.aborted
    ? new TransportError('The call to the broker was aborted', ClientErrorCode.ABORTED, {
        cause: caller.reason,
      })
    : new TransportError(
        `The broker did not answer within ${timeoutMs} ms`,
        ClientErrorCode.TIMEOUT,
        { cause: signal.reason },
      );

/** A token in the cache, and when its request was sent, on both clocks. */
interface Cached {
  readonly token: AccessToken;
  readonly sent: Instant;
}

/** One instant on the monotonic clock and on the wall clock. */
interface Instant {
  readonly monotonic: number;
  readonly wall: number;
}

/** One token request and the callers waiting for it. */
interface Flight {
  /** The connection's report count when it was sent: an older one may answer a reported token. */
  readonly epoch: number;
  /** When it was sent, on both clocks. */
  readonly sent: Instant;
  readonly promise: Promise<AccessToken>;
  /** When each caller waiting for it gives up (monotonic): failover shares the latest. */
  readonly deadlines: Map<AbortSignal, number>;
  waiting: number;
  readonly abandon: () => void;
}

/**
 * The client's own monotonic clock. Looked up on every call, so that a test's fake timers apply.
 */
const monotonic = () => performance.now();

/** Whether the default `onWarning` has printed: once per process, however many clients. */
let warned = false;

const emitWarning = (message: string) => {
  if (warned) return;
  warned = true;
  process.emitWarning(message, { type: 'TokenBrokerWarning', code: 'TOKEN_BROKER_LOCAL_DEFAULTS' });
};

/** The default for a stale token: once per connection and outage, which the client counts. */
const emitStaleWarning = (message: string) =>
  process.emitWarning(message, { type: 'TokenBrokerWarning', code: 'TOKEN_BROKER_STALE_TOKEN' });

/**
 * How many tokens per connection a client remembers the last answer of, to order overlapping
 * answers; a connection replaces its token about once per refresh window.
 */
const MAX_ANSWERED = 8;

const digestOf = (accessToken: string) =>
  createHash('sha256').update(accessToken).digest('base64url');

/** The default when a broker's breaker opens: each time, as it is once per broker and outage. */
const emitFailoverWarning = (message: string) =>
  process.emitWarning(message, { type: 'TokenBrokerWarning', code: 'TOKEN_BROKER_FAILOVER' });

/** What a broker is called in messages: its ARN or name, its URL, or its place in the list. */
const labelOf = (target: TransportOptions | Transport, index: number): string => {
  if (isTransport(target)) return target.label ?? `#${index + 1}`;
  if (target?.type === 'http') return target.url;
  if (target?.type === 'lambda') {
    return target.endpoint ? `${target.functionName} at ${target.endpoint}` : target.functionName;
  }
  return `#${index + 1}`;
};

/** A broker given as a string: a function ARN or a Function URL. */
const targetOf = (value: string): TransportOptions => {
  if (/^https?:\/\//i.test(value)) return { type: 'http', url: value };
  if (arnRegion(value)) return { type: 'lambda', functionName: value };
  throw new ClientConfigError(
    `brokers: '${value}' is neither a function ARN (arn:aws:lambda:<region>:<account>:function:<name>) nor an http(s) URL; a bare function name would call the same region for every broker`,
  );
};

/** The brokers to ask, in order: `transport` alone, or the `brokers` list. */
const brokersOf = (options: TokenClientOptions, warn: (message: string) => void): Broker[] => {
  const { transport, brokers } = options;
  if ((transport === undefined) === (brokers === undefined)) {
    throw new ClientConfigError(
      'createTokenClient: give either "transport" (one broker) or "brokers" (a list)',
    );
  }
  if (brokers !== undefined && !(Array.isArray(brokers) && brokers.length > 0)) {
    throw new ClientConfigError('createTokenClient: "brokers" must be a list of one or more');
  }
  // Not ignored: a caller who set it expects a fail-over that one broker cannot give.
  if (transport !== undefined && options.failover !== undefined) {
    throw new ClientConfigError(
      'createTokenClient: "failover" applies to "brokers" (a list); with one "transport" there is no other broker to fail over to',
    );
  }
  const targets = (brokers ?? [transport]) as readonly BrokerTarget[];
  return targets.map((value, index) => {
    const target = typeof value === 'string' ? targetOf(value) : value;
    return {
      label: labelOf(target, index),
      transport: isTransport(target) ? target : createTransport(target, { warn }),
    };
  });
};

/** The `failover` option, checked once: unknown keys and values out of range are refused. */
const failoverOptionsOf = (value: FailoverOptions | undefined): Required<FailoverOptions> => {
  const unknown = unknownOption(value, FAILOVER_OPTIONS);
  if (unknown !== undefined) {
    throw new ClientConfigError(`createTokenClient: unknown option "failover.${unknown}"`);
  }
  const merged = { ...DEFAULT_FAILOVER, ...value };
  checkTimeout(merged.openMs, 'failover.openMs');
  checkTimeout(merged.maxOpenMs, 'failover.maxOpenMs');
  if (merged.maxOpenMs < merged.openMs) {
    throw new ClientConfigError('failover.maxOpenMs must not be below failover.openMs');
  }
  return merged;
};

/** Creates a client; keep one per process: it holds the cache. */
export const createTokenClient = (options: TokenClientOptions): TokenClient => {
  const unknown = unknownOption(options, CLIENT_OPTIONS);
  if (unknown !== undefined) {
    throw new ClientConfigError(`createTokenClient: unknown option "${unknown}"`);
  }
  checkTimeout(options.timeoutMs, 'timeoutMs');
  const marginSeconds = options.marginSeconds ?? 60;
  if (!(Number.isFinite(marginSeconds) && marginSeconds >= 0)) {
    throw new ClientConfigError('marginSeconds must be a number of seconds, 0 or more');
  }
  const warn = options.onWarning ?? emitWarning;
  const warnStale = options.onWarning ?? emitStaleWarning;
  const brokers = brokersOf(options, warn);
  const failover = createFailover(brokers, failoverOptionsOf(options.failover), {
    clock: monotonic,
    warn: options.onWarning ?? emitFailoverWarning,
  });
  const marginMs = marginSeconds * 1000;
  const defaultTimeoutMs = options.timeoutMs ?? DEFAULT_TIMEOUT_MS;
  const now = options.now ?? (() => Date.now());
  // Maps, not objects: connection names must not reach prototype members.
  const cache = new Map<string, Cached>();
  // The last token the broker gave per connection, while it may be used stale (its
  // stale-if-error); and the connections told of a stale token in the outage under way.
  const lastGot = new Map<string, Cached>();
  const staleSaid = new Set<string>();
  // When the request of the answer last remembered per connection was sent (monotonic).
  const lastSent = new Map<string, number>();
  // Per connection, the last few tokens answered (by digest) and when each last came back
  // (monotonic): an answer to a request sent before another token came back is of no known order.
  const answered = new Map<string, Map<string, number>>();
  const inflight = new Map<string, Flight>();
  // Reported tokens per connection (`reported.ts`); and per connection, how many reports were
  // made (and reported tokens seen), so that an answer to an older request is not cached.
  const reported = new ReportedTokens(monotonic);
  const epochs = new Map<string, number>();
  const epochOf = (connection: string) => epochs.get(connection) ?? 0;
  const nextEpoch = (connection: string) => epochs.set(connection, epochOf(connection) + 1);
  /** What the client remembers of `token` as reported, if it is; learns its expiry. */
  const reportOf = (connection: string, token: AccessToken): Reported | undefined => {
    const digest = digestOf(token.accessToken);
    const entry = reported.get(connection, digest);
    if (!entry) return undefined;
    reported.expiresIn(entry, token.expiresAt.getTime() - now());
    return reported.get(connection, digest);
  };

  /**
   * Remembers `accessToken` as reported, until the report's outcome: `failed()` forgets it again
   * unless another report of it is out or reached the broker; `landed()` keeps it.
   */
  const report = (
    connection: string,
    accessToken: string,
  ): { readonly failed: () => void; readonly landed: () => void } => {
    const digest = digestOf(accessToken);
    const known = reported.get(connection, digest);
    const held = cache.get(connection)?.token;
    if (held?.accessToken === accessToken) cache.delete(connection);
    // Never used stale again, even if this report fails: the Open API rejected it.
    if (lastGot.get(connection)?.token.accessToken === accessToken) lastGot.delete(connection);
    const entry: Reported = known ?? {
      forgetAt: Number.POSITIVE_INFINITY,
      deferredUntil: 0,
      pending: 0,
      landed: false,
    };
    if (held?.accessToken === accessToken) {
      reported.expiresIn(entry, held.expiresAt.getTime() - now());
    }
    entry.pending += 1;
    reported.set(connection, digest, entry);
    nextEpoch(connection);
    return {
      failed: () => {
        entry.pending -= 1;
        if (entry.pending === 0 && !entry.landed) reported.delete(connection, digest, entry);
      },
      landed: () => {
        entry.pending -= 1;
        entry.landed = true;
      },
    };
  };

  /** The error for a broker that still answers a reported token: when to try again, no token. */
  const stillReported = (connection: string, token: AccessToken, entry: Reported) => {
    const deferredMs = entry.deferredUntil - monotonic();
    const seconds = Math.max(1, Math.ceil((deferredMs > 0 ? deferredMs : token.maxAgeMs) / 1000));
    return new TokenReportedError(
      `The broker still answers connection '${connection}' with the token this client reported as rejected; it should be replaced within about ${seconds} s: retry then`,
      seconds,
    );
  };

  /**
   * Runs `work` under the call's timeout and signal. Whatever fails comes out as a
   * TokenBrokerError; an abort wins even over a transport that ignores its signal.
   */
  const call = async <T>(
    { signal: caller, timeoutMs = defaultTimeoutMs }: CallOptions,
    work: (signal: AbortSignal, deadline: number) => Promise<T>,
  ): Promise<T> => {
    checkTimeout(timeoutMs, 'timeoutMs');
    checkNotAborted(caller);
    // When this caller gives up, on the monotonic clock: failover shares it among the brokers.
    const deadline = monotonic() + timeoutMs;
    // One signal for the timeout and the caller's (by hand: AbortSignal.any needs Node 20.3).
    const controller = new AbortController();
    const signal = controller.signal;
    const timer = setTimeout(
      () => controller.abort(new DOMException(`No answer within ${timeoutMs} ms`, 'TimeoutError')),
      timeoutMs,
    );
    const onAbort = () => controller.abort(caller?.reason);
    caller?.addEventListener('abort', onAbort, { once: true });
    try {
      return await untilAborted(work(signal, deadline), signal);
    } catch (error) {
      // The broker's own answer stands even if the signal fired meanwhile.
      if (error instanceof TokenBrokerError && !(error instanceof TransportError)) throw error;
      if (signal.aborted) throw abortedError(signal, caller, timeoutMs);
      if (error instanceof TokenBrokerError) throw error;
      throw new TransportError(
        `The transport failed: ${(error as Error)?.message ?? String(error)}`,
        ClientErrorCode.TRANSPORT_FAILED,
        { cause: error },
      );
    } finally {
      clearTimeout(timer);
      caller?.removeEventListener('abort', onAbort);
    }
  };

  const [only] = brokers;
  /**
   * Sends `operation` to the first broker that answers. One broker is asked directly, under the
   * caller's signal alone, as before there were lists.
   */
  const send = (operation: Operation, signal: AbortSignal, deadline: () => number) =>
    brokers.length === 1 && only
      ? only.transport.send(operation, { signal })
      : failover.send(operation, signal, deadline);

  /**
   * The token request for `connection` and `minValidity`, shared by every caller that asks while
   * it runs. It has no time limit of its own: each caller waits for it under its own timeout and
   * signal (`call`), and it is aborted only once every caller waiting for it has given up, so
   * that one caller's short timeout or abort never fails the others.
   */
  const shared = (
    connection: string,
    minValidity: number | undefined,
    signal: AbortSignal,
    deadline: number,
  ): Flight => {
    const key = `${connection}\u0000${minValidity ?? ''}`;
    const epoch = epochOf(connection);
    const running = inflight.get(key);
    // A request sent before a report may bring the reported token back: a new one is sent. So
    // is one whose wall-clock age runs more than a second ahead of its monotonic age: it was
    // pending across a freeze (a Lambda environment's, between invocations), and its answer,
    // however long ago the broker gave it, would be handed out as new (its `maxAgeMs` long past).
    const crossedAFreeze = (flight: Flight) =>
      now() - flight.sent.wall - (monotonic() - flight.sent.monotonic) > FREEZE_SLACK_MS;
    if (running && running.epoch === epoch && !crossedAFreeze(running)) return running;
    const controller = new AbortController();
    // Counted before the request leaves: the broker's proof is at least this recent.
    const sent: Instant = { monotonic: monotonic(), wall: now() };
    // Its first caller's, before it joins: the first attempt is cut to it at once.
    const deadlines = new Map([[signal, deadline]]);
    const latest = () => Math.max(...deadlines.values());
    const flight: Flight = {
      epoch,
      sent,
      deadlines,
      waiting: 0,
      abandon: () => {
        // Nobody may join a request that is being abandoned.
        if (inflight.get(key) === flight) inflight.delete(key);
        controller.abort(new DOMException('Every caller gave up', 'AbortError'));
      },
      promise: send(
        { action: 'getToken', connection, ...(minValidity === undefined ? {} : { minValidity }) },
        controller.signal,
        latest,
      )
        .then((body) => {
          const token = toAccessToken(body);
          if (reportOf(connection, token)) {
            // Not kept, and the callers that ask again share one new request, not this one.
            nextEpoch(connection);
          } else if (epoch === epochOf(connection)) {
            // Kept only if no report was made since it was sent.
            remember(connection, token, sent);
          }
          return token;
        })
        .finally(() => {
          if (inflight.get(key) === flight) inflight.delete(key);
        }),
    };
    // Abandoned by every caller, its failure has nobody to reach: not an unhandled rejection.
    flight.promise.catch(() => undefined);
    inflight.set(key, flight);
    return flight;
  };

  /** Waits for `flight` until it settles or `signal` (this caller's) fires. */
  const join = (flight: Flight, signal: AbortSignal, deadline: number): Promise<AccessToken> => {
    flight.waiting += 1;
    flight.deadlines.set(signal, deadline);
    let left = false;
    const leave = () => {
      if (left) return;
      left = true;
      flight.waiting -= 1;
      flight.deadlines.delete(signal);
      if (flight.waiting === 0 && signal.aborted) flight.abandon();
    };
    signal.addEventListener('abort', leave, { once: true });
    return flight.promise.finally(() => {
      signal.removeEventListener('abort', leave);
      leave();
    });
  };

  /**
   * A token for `connection`, never one this client reported. An answer that carries one is asked
   * again once, in a request sent after it and shared by every caller that got that answer (not
   * while the broker said it keeps serving it, `deferredSeconds`), then refused with a
   * TokenReportedError.
   */
  const fetchToken = async (
    connection: string,
    minValidity: number | undefined,
    signal: AbortSignal,
    deadline: number,
  ): Promise<AccessToken> => {
    const first = await join(shared(connection, minValidity, signal, deadline), signal, deadline);
    const entry = reportOf(connection, first);
    if (!entry) return first;
    if (entry.deferredUntil > monotonic()) throw stillReported(connection, first, entry);
    // A caller that gave up meanwhile starts nothing (its call has failed already).
    if (signal.aborted) throw signal.reason;
    const second = await join(shared(connection, minValidity, signal, deadline), signal, deadline);
    const again = reportOf(connection, second);
    if (again) throw stillReported(connection, second, again);
    return second;
  };

  /**
   * Keeps `token` for as long as the broker lets it be reused, counted from `sent`, and as the
   * connection's last token for as long after that as it may be used stale. The broker answered:
   * an outage, if one was under way, is over.
   */
  const remember = (connection: string, token: AccessToken, sent: Instant) => {
    staleSaid.delete(connection);
    // Another token came back after this request was sent: which of the two is newer cannot be
    // told from the sends (a broker may answer an earlier request with the successor, having
    // waited for it or been asked after a fail-over, and a later one with the token it replaced,
    // read before the cut-over). The older revoked, neither is used stale (review 3).
    const digest = digestOf(token.accessToken);
    const seen = answered.get(connection) ?? new Map<string, number>();
    const rival = [...seen].some(([other, at]) => other !== digest && at >= sent.monotonic);
    seen.delete(digest);
    seen.set(digest, monotonic());
    if (seen.size > MAX_ANSWERED) seen.delete(seen.keys().next().value as string);
    answered.set(connection, seen);
    if (rival) lastGot.delete(connection);
    // An answer to a request sent before the last one remembered is older news (two flights of
    // one connection, another minValidity): the later one may carry its token's successor, which
    // revoked it. Its caller has it; it is neither reused nor used stale.
    if (sent.monotonic < (lastSent.get(connection) ?? Number.NEGATIVE_INFINITY)) return;
    lastSent.set(connection, sent.monotonic);
    if (token.maxAgeMs > 0) {
      cache.set(connection, { token, sent });
    } else {
      // Not to be reused: whatever was cached before is older still.
      cache.delete(connection);
    }
    // An answer without a stale-if-error (a replacement announced, say) ends the older one's too.
    if (token.staleIfErrorSeconds > 0 && !rival) lastGot.set(connection, { token, sent });
    else lastGot.delete(connection);
  };

  /** Whether `elapsed` since `entry`'s send, on both clocks, is within `ms`: see `cached`. */
  const within = (entry: Cached, ms: number): boolean => {
    const wall = now();
    const elapsed = Math.max(monotonic() - entry.sent.monotonic, wall - entry.sent.wall);
    return elapsed < ms && wall >= entry.sent.wall;
  };

  /**
   * The last token the broker gave for `connection`, while it cannot be reached: within its
   * stale-if-error (after its reuse time, from the send, on both clocks), keeping `needMs` of
   * validity, and never one this client reported. Flagged `stale`; told once per outage.
   */
  const staleToken = (connection: string, needMs: number, error: unknown) => {
    const entry = lastGot.get(connection);
    if (!entry) return undefined;
    const { token } = entry;
    if (!within(entry, token.maxAgeMs + token.staleIfErrorSeconds * 1000)) {
      lastGot.delete(connection);
      return undefined;
    }
    if (reportOf(connection, token)) {
      lastGot.delete(connection);
      return undefined;
    }
    const leftMs = token.expiresAt.getTime() - now();
    if (!(leftMs > needMs)) return undefined;
    if (!staleSaid.has(connection)) {
      staleSaid.add(connection);
      warnStale(
        `The token broker cannot be reached for connection '${connection}' (${(error as Error).message}): handing out the last token it gave, stale, while it may be used (${Math.floor(leftMs / 1000)} s left before it expires); asking the broker again on every call`,
      );
    }
    const stale: AccessToken = { ...token, stale: true };
    return stale;
  };

  /**
   * The cached token, if the broker still lets it be reused and it keeps `needMs` of validity.
   * The time since the send is read on both clocks, and the reuse is over when either says so:
   * a wall clock that steps (back: a negative elapsed time) cannot stretch it, nor can a
   * monotonic clock that stood still while the process was frozen (a paused VM between two
   * Lambda invocations may not count that time).
   */
  const cached = (connection: string, needMs: number): AccessToken | undefined => {
    const entry = cache.get(connection);
    if (!entry) return undefined;
    if (!within(entry, entry.token.maxAgeMs)) {
      cache.delete(connection);
      return undefined;
    }
    return entry.token.expiresAt.getTime() - now() > needMs ? entry.token : undefined;
  };

  const client: TokenClient = {
    async getToken(connection, tokenOptions = {}) {
      checkOptions(tokenOptions, TOKEN_OPTIONS, 'getToken');
      const { minValidity, forceRefresh = false, timeoutMs = defaultTimeoutMs } = tokenOptions;
      checkConnection(connection);
      checkMinValidity(minValidity);
      checkTimeout(timeoutMs, 'timeoutMs');
      checkNotAborted(tokenOptions.signal);
      const needMs = Math.max(marginMs, (minValidity ?? 0) * 1000);
      const hit = forceRefresh ? undefined : cached(connection, needMs);
      if (hit) return hit;
      try {
        return await call({ ...tokenOptions, timeoutMs }, (signal, deadline) =>
          fetchToken(connection, minValidity, signal, deadline),
        );
      } catch (error) {
        // The broker cannot say: its last token, within the time it granted (not for a caller
        // that insists on asking it: forceRefresh).
        const stale =
          forceRefresh || !isOutage(error) ? undefined : staleToken(connection, needMs, error);
        if (!stale) throw error;
        return stale;
      }
    },

    provider(connection, tokenOptions = {}) {
      checkOptions(tokenOptions, TOKEN_OPTIONS, 'provider');
      checkConnection(connection);
      checkMinValidity(tokenOptions.minValidity);
      return async () => (await client.getToken(connection, tokenOptions)).accessToken;
    },

    async invalidate(connection, accessToken, callOptions = {}) {
      checkOptions(callOptions, CALL_OPTIONS, 'invalidate');
      checkConnection(connection);
      checkAccessToken(accessToken);
      checkNotAborted(callOptions.signal);
      checkTimeout(callOptions.timeoutMs, 'timeoutMs');
      // Remembered before the report leaves: an answer to a getToken racing with it may carry
      // the token. Forgotten again if the report fails (the broker may not have it).
      const outcome = report(connection, accessToken);
      let body: { invalidated?: unknown; deferredSeconds?: unknown; verified?: unknown };
      try {
        // To the first broker that answers, as every call: a report is checked against the
        // token item of the one table every region shares, so any region's broker decides it.
        body = (await call(callOptions, (signal, deadline) =>
          send({ action: 'invalidate', connection, accessToken }, signal, () => deadline),
        )) as typeof body;
      } catch (error) {
        outcome.failed();
        throw error;
      }
      outcome.landed();
      const deferred = body?.deferredSeconds;
      const deferredSeconds =
        typeof deferred === 'number' && Number.isFinite(deferred) && deferred > 0
          ? deferred
          : undefined;
      const verified =
        body?.verified === 'valid' || body?.verified === 'revoked' ? body.verified : undefined;
      const digest = digestOf(accessToken);
      // The Open API accepts it (the broker's probe asked): the report was wrong, not the token.
      if (verified === 'valid') reported.delete(connection, digest);
      const entry = reported.get(connection, digest);
      if (entry && deferredSeconds !== undefined) {
        entry.deferredUntil = monotonic() + deferredSeconds * 1000;
      }
      return {
        invalidated: body?.invalidated === true,
        ...(deferredSeconds === undefined ? {} : { deferredSeconds }),
        ...(verified === undefined ? {} : { verified }),
      };
    },

    async withToken(connection, fn, withTokenOptions = {}) {
      checkOptions(withTokenOptions, WITH_TOKEN_OPTIONS, 'withToken');
      const { isRejected = isUnauthorized, ...tokenOptions } = withTokenOptions;
      const attempt = async (): Promise<{
        token: string;
        rejected: boolean;
        value?: unknown;
        error?: unknown;
      }> => {
        const { accessToken } = await client.getToken(connection, tokenOptions);
        try {
          const value = await fn(accessToken);
          return { token: accessToken, rejected: isRejected(value), value };
        } catch (error) {
          if (error instanceof TokenBrokerError || !isRejected(error)) throw error;
          return { token: accessToken, rejected: true, error };
        }
      };
      const first = await attempt();
      if (!first.rejected) return first.value as Awaited<ReturnType<typeof fn>>;
      const release = async () => {
        if (first.value instanceof Response && !first.value.bodyUsed) {
          await first.value.body?.cancel().catch(() => undefined);
        }
      };
      const answer = await client
        .invalidate(connection, first.token, {
          ...(tokenOptions.signal ? { signal: tokenOptions.signal } : {}),
          ...(tokenOptions.timeoutMs === undefined ? {} : { timeoutMs: tokenOptions.timeoutMs }),
        })
        .catch(async (error: unknown) => {
          // The report failed: the rejected response is not returned either, so it is released.
          await release();
          throw error;
        });
      // The Open API accepts the token (the broker's probe asked): a retry would send the same
      // one. The rejection is the caller's to see, as `fn` got it, its body unread.
      if (answer.verified === 'valid') {
        if (first.error !== undefined) throw first.error;
        return first.value as Awaited<ReturnType<typeof fn>>;
      }
      // The rejected response is not returned: free its connection before asking again.
      await release();
      const second = await attempt();
      if (second.error !== undefined) throw second.error;
      return second.value as Awaited<ReturnType<typeof fn>>;
    },

    async status(callOptions = {}) {
      checkOptions(callOptions, CALL_OPTIONS, 'status');
      const body = (await call(callOptions, (signal, deadline) =>
        send({ action: 'status' }, signal, () => deadline),
      )) as {
        connections?: ConnectionStatus[];
      };
      return body.connections ?? [];
    },

    async warmUp(callOptions = {}) {
      checkOptions(callOptions, CALL_OPTIONS, 'warmUp');
      return (await call(callOptions, (signal, deadline) =>
        send({ action: 'warmUp' }, signal, () => deadline),
      )) as WarmUpReport;
    },

    async ready(callOptions = {}) {
      checkOptions(callOptions, CALL_OPTIONS, 'ready');
      return (await call(callOptions, (signal, deadline) =>
        send({ action: 'ready' }, signal, () => deadline),
      )) as ReadinessReport;
    },
  };
  return client;
};
