/**
 * The observer's loop: reads the store until it holds a token that meets the request, doing what
 * `decide` says after each read (leases are the holder's side's), and the store calls.
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { ReplacementRefusedError, StoreUnavailableError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { Lease, TokenRecord, TokenState, TokenStore } from '../../ports.js';
import { cutOverEstimate, readReserveMs } from '../timing/index.js';
import type { BrokerLogger, ServedToken } from '../types.js';
import type { ConnectionView, ReadSent, TokenRequest } from '../view/index.js';
import type { CallerBoundSettings } from './caller-bounds.js';
import { type Decision, decide, waitTimedOut } from './observer.js';

interface ObserverDeps {
  readonly store: TokenStore;
  readonly view: ConnectionView;
  readonly clock: Clock;
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  readonly settings: CallerBoundSettings;
  /** Cuts a store call to `waitMs` (I3). */
  readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
  readonly reachability: StoreReachability;
}

export type AcquirePlan = Omit<Extract<Decision, { do: 'acquire' }>, 'do'>;

interface LeaseActions {
  letGo(stale: Lease, record: TokenRecord): Promise<void>;
  /** Takes the lease as `plan` says and issues under it; else the state that won, if read. */
  acquire(plan: AcquirePlan): Promise<ServedToken | { state?: TokenState; read: ReadSent }>;
}

export const obtain = async (
  deps: ObserverDeps,
  connection: ConnectionConfig,
  request: TokenRequest,
  lease: LeaseActions,
): Promise<ServedToken> => {
  const { name } = connection;
  const { clock, view, settings, logger } = deps;
  const { deadline } = request;
  let known: { state: TokenState; read: ReadSent } | undefined;
  let waits = 0;
  let countdown: number | undefined;
  let waitsSinceMove = 0; // the backoff starts again when the countdown moves
  await awaitCutOver(deps, name, request);
  for (;;) {
    // 1. Read the store, or take the state that won a lost acquisition.
    const got = known ?? (await readStore(deps, name, request));
    known = undefined;
    if ('source' in got) return got; // the store is down; memory had a usable token
    // 2. Keep what it says (I2's proof, the lease watch), counted from when the read was sent.
    const { state, read } = got;
    const now = clock.now();
    const sinceReadMs = clock.monotonic() - read.sentAtMonotonic;
    const seen = view.observe(connection, state, read, now);
    if (state.lease?.countdown !== countdown) {
      countdown = state.lease?.countdown;
      waitsSinceMove = 0;
    }
    // 3. Decide.
    const decision = decide({
      ...seen,
      state,
      request,
      now,
      sinceReadMs,
      leftMs: deadline.leftMs(),
      readReserveMs: readReserveMs(view.readMs(name), settings.timing),
      lastReadMs: view.readMs(name),
      revokesOnReissue: connection.revokesOnReissue,
      knownForMs: seen.valid ? view.knownFor(name, seen.valid.tokenDigest) : 0,
      waits: waitsSinceMove,
      issuanceMs: view.issuanceMs(name),
      draw: clock.random(),
      settings,
    });
    // Why a caller waited, read again or took the lease: DEBUG only (no credential in it).
    logger.debug('Store read decided', {
      connection: name,
      decision: decision.do,
      ...(decision.do === 'wait' ? { waitMs: Math.round(decision.ms) } : {}),
      countdown,
      readMs: Math.round(sinceReadMs),
      waits,
    });
    // 4. Act; a 'reread' loops at once.
    switch (decision.do) {
      case 'serve':
        return { record: decision.record, source: 'dynamodb' };
      case 'refuse':
        if (decision.error instanceof ReplacementRefusedError) {
          deps.metrics.record(MetricName.ReplacementsRefused, name);
          logger.info('Replacement on a caller’s word refused', {
            connection: name,
            caller: request.caller,
            code: decision.error.code,
            // Never the warm-up: its need, the window, forces nothing (`decide`, step 5).
            minValidity: Math.ceil((request.minValidityMs as number) / 1000),
            availableMinValidity: decision.error.availableMinValidity,
          });
        }
        throw decision.error;
      case 'let-go':
        await lease.letGo(decision.stale, decision.record);
        continue;
      case 'acquire': {
        const outcome = await lease.acquire(decision);
        if ('record' in outcome) return outcome;
        if (outcome.state) known = { state: outcome.state, read: outcome.read };
        continue;
      }
      case 'wait':
        if (waits === 0) {
          deps.metrics.record(MetricName.LeaseWaits, name);
          logger.info('Waiting for another container to issue the token', {
            connection: name,
            leaseExpiresInMs: decision.lease.expiresAt - now,
          });
        }
        waits += 1;
        waitsSinceMove += 1;
        await clock.sleep(decision.ms);
        if (deadline.passed()) throw waitTimedOut(decision.suspect);
    }
  }
};

/**
 * At a cut-over, when what a read proved has run out near the end of an announced countdown, the
 * first read waits for the successor (within the deadline) rather than reading once per step.
 */
const awaitCutOver = async (
  { clock, view, logger }: ObserverDeps,
  name: string,
  { deadline }: TokenRequest,
): Promise<void> => {
  const entry = view.entry(name);
  if (!entry?.lease) return;
  // A countdown that did not move between two reads announces nothing to wait for.
  const { timing } = view;
  const since = view.leaseFirstSeen(name, entry.lease);
  if (since === undefined || since < entry.checkedAt - timing.countdownStepMs) return;
  const now = clock.now();
  const issuanceMs = view.issuanceMs(name);
  const { successorAt, stepMs } = cutOverEstimate(entry.checkedAt, entry.lease, issuanceMs, timing);
  if (now < entry.until) return;
  // Further than two steps and the POST: a read proves the old token for a step more.
  if (now < entry.checkedAt + (entry.lease.countdown - 2) * stepMs) return;
  // I3. Wake with time left for the read; past the estimate, read now.
  const readBy = deadline.leftMs() - readReserveMs(view.readMs(name), timing);
  const wait = Math.min(successorAt - now, readBy);
  if (wait <= 0) return;
  await clock.sleep(wait);
  const cutOverMs = Math.round(wait);
  logger.debug('Waited for the announced cut-over', { connection: name, cutOverMs });
};

/** Reads the store within the time left; when it is down, memory's token if servable (I2). */
const readStore = async (
  { store, view, clock, logger, bounded, reachability }: ObserverDeps,
  name: string,
  request: TokenRequest,
): Promise<{ state: TokenState; read: ReadSent } | ServedToken> => {
  const read = { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
  // After a read that went unanswered, the next waits four of the last measured (at least
  // 500 ms) rather than the deadline, so an unreachable store is told fast. Liveness only.
  const leftMs = request.deadline.leftMs();
  const shortMs = Math.min(leftMs, Math.max(500, 4 * (view.readMs(name) ?? 0)));
  try {
    const state = await bounded(store.read(name), reachability.unanswered ? shortMs : leftMs);
    reachability.unanswered = false;
    // Stryker disable next-line StringLiteral: equivalent: `measured` tells only 'issuance' apart
    view.measured(name, 'read', clock.monotonic() - read.sentAtMonotonic);
    return { state, read };
  } catch (error) {
    reachability.unanswered = true;
    // Stryker disable next-line StringLiteral: equivalent: `servable` tells no two strings apart
    const held = view.servable(name, request, 'store-down').record;
    if (!held) throw storeFailure('read', error);
    logger.warn('Token store unreadable; serving the token held in memory', { connection: name });
    return { record: held, source: 'memory' };
  }
};

/** Whether the store left this container's last read unanswered (see `readStore`). */
export class StoreReachability {
  unanswered = false;
}

const FAILURES = {
  read: 'The token store could not be read; retry shortly',
  'answer in time': 'The token store did not answer in time; retry shortly',
  'take the lease': 'The token store failed to take the lease; retry shortly',
} as const;

/** A store call's failure as callers are told it: a typed error, the SDK's in the cause. */
export const storeFailure = (what: keyof typeof FAILURES, cause?: unknown): StoreUnavailableError =>
  new StoreUnavailableError(FAILURES[what], { cause });
