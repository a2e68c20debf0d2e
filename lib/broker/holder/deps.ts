/** What the holder's flow works with: its ports, settings, and one run of the flow under a lease */
import type { Clock, Deadline } from '../../clock.js';
import type { BrokerMetrics } from '../../metrics.js';
import type { LeaseRef, ReplacedToken, TokenStore } from '../../ports.js';
import type { Caller, IssuanceCause, Issue } from '../issuance/index.js';
import type { CallerBoundSettings } from '../observer/index.js';
import type { BrokerLogger } from '../types.js';
import type { ConnectionView } from '../view/index.js';

export interface HolderDeps {
  readonly store: TokenStore;
  readonly clock: Clock;
  readonly issue: Issue;
  readonly view: ConnectionView;
  readonly settings: CallerBoundSettings & {
    /** The upstream request timeout: also the grace after a POST during which it may land. */
    readonly upstreamTimeoutMs: number;
  };
  readonly logger: BrokerLogger;
  readonly metrics: BrokerMetrics;
  /** The leases this container holds now (given up when its environment shuts down). */
  readonly held?: Set<{ abandon(reason: string): void }>;
  /** Cuts a store call to `waitMs`: the caller is answered before its deadline, always (I3). */
  readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
}

/** One run of the upstream flow under a lease. */
export interface LeasedFlow {
  /** The lease as this run wrote it when taking it. */
  readonly lease: LeaseRef;
  /** Validity (ms) the caller needs from the new token. */
  readonly needMs: number;
  readonly deadline: Deadline;
  /** The valid token replaced (dropped if the POST is lost), or a suspect one, maybe unreadable. */
  readonly replaced: ReplacedToken | undefined;
  /** `replaced` may already be revoked (a POST under the lease taken over may be out). */
  readonly suspect: boolean;
  /** Monotonic instant at which the lease write was sent: lease time counts from here. */
  readonly leasedAt: number;
  /** Monotonic instant at which that write was answered: the first step counts from here. */
  readonly answeredAt: number;
  /** The countdown the lease was written with. */
  readonly countdown: number;
  /** Why the token is issued, and at whose request (logged and counted with the issuance). */
  readonly cause: IssuanceCause;
  /** Issued on a caller's word, or by taking over a lease that was (see `TokenRecord.forced`). */
  readonly forced: boolean;
  readonly caller: Caller;
}
