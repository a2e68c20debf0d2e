/**
 * The observer's loop: reads the store until it holds a token that meets the request, doing
 * what `decide` says after each read. Taking and letting go of leases is the holder's side's.
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { ReplacementRefusedError } from '../../errors.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { Lease, TokenRecord, TokenState, TokenStore } from '../../ports.js';
import { readReserveMs } from '../timing/index.js';
import type { BrokerLogger, ServedToken } from '../types.js';
import type { ConnectionView, ReadSent, TokenRequest } from '../view/index.js';
import type { CallerBoundSettings } from './caller-bounds.js';
import { awaitCutOver } from './cut-over-wait.js';
import { type Decision, decide, waitTimedOut } from './observer.js';
import { type StoreReachability, storeFailure } from './store-calls.js';

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

/** A decision to take the lease, as the holder's side carries it out. */
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
  // Polls since the countdown last moved: the backoff starts again when it does.
  let polls = { countdown: undefined as number | undefined, since: 0 };
  const cutOverMs = await awaitCutOver(deps, name, deadline);
  if (cutOverMs > 0)
    logger.debug('Waited for the announced cut-over', { connection: name, cutOverMs });
  for (;;) {
    // 1. Read the store, or take the state that won a lost acquisition. What a read proves
    //    counts from when it was sent.
    const read = known?.read ?? { sentAt: clock.now(), sentAtMonotonic: clock.monotonic() };
    const state = known?.state ?? (await readStore(deps, name, request));
    const fresh = known === undefined;
    known = undefined;
    if ('source' in state) return state; // the store is down; memory had a usable token
    // 2. Keep what it says (I2's proof, the lease watch).
    const now = clock.now();
    const sinceReadMs = clock.monotonic() - read.sentAtMonotonic;
    // Stryker disable next-line StringLiteral: equivalent: `measured` tells only 'issuance' apart
    if (fresh) view.measured(name, 'read', sinceReadMs);
    const seen = view.observe(connection, state, read, now);
    if (state.lease?.countdown !== polls.countdown) {
      polls = { countdown: state.lease?.countdown, since: 0 };
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
      waits: polls.since,
      issuanceMs: view.issuanceMs(name),
      draw: clock.random(),
      settings,
    });
    // Why a caller waited, read again or took the lease: DEBUG only (no credential in it).
    logger.debug('Store read decided', {
      connection: name,
      decision: decision.do,
      ...(decision.do === 'wait' ? { waitMs: Math.round(decision.ms) } : {}),
      countdown: state.lease?.countdown,
      readMs: Math.round(sinceReadMs),
      waits,
    });
    // 4. Act.
    switch (decision.do) {
      case 'serve':
        return { record: decision.record, source: 'dynamodb' };
      // Stryker disable next-line StringLiteral: equivalent: a decision no case matches loops too
      case 'reread':
        continue;
      case 'refuse':
        if (decision.callersWord) refused(deps, name, decision.error, request);
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
        polls.since += 1;
        await clock.sleep(decision.ms);
        if (deadline.passed()) throw waitTimedOut(decision.suspect);
    }
  }
};

/** Reads the store within the time left; when it is down, memory's token if servable (I2). */
const readStore = async (
  { store, view, logger, bounded, reachability }: ObserverDeps,
  name: string,
  request: TokenRequest,
): Promise<TokenState | ServedToken> => {
  try {
    const waitMs = reachability.waitMs(request.deadline.leftMs(), view.readMs(name));
    const state = await bounded(store.read(name), waitMs);
    reachability.answered(true);
    return state;
  } catch (error) {
    reachability.answered(false);
    const held = view.servable(name, request, 'store-down').record;
    if (!held) throw storeFailure('read', error);
    logger.warn('Token store unreadable; serving the token held in memory', { connection: name });
    return { record: held, source: 'memory' };
  }
};

/** Logs and counts a caller's word refused (I4). */
const refused = (
  { metrics, logger }: ObserverDeps,
  name: string,
  error: Error,
  request: TokenRequest,
): void => {
  if (!(error instanceof ReplacementRefusedError)) return;
  metrics.record(MetricName.ReplacementsRefused, name);
  logger.info('Replacement on a caller’s word refused', {
    connection: name,
    caller: request.caller,
    code: error.code,
    minValidity:
      typeof request.minValidityMs === 'number'
        ? Math.ceil(request.minValidityMs / 1000)
        : undefined,
    availableMinValidity: error.availableMinValidity,
  });
};
