/**
 * Taking the lease, each attempt under a holder id and first version of its own, for `leaseMs`
 * cut to the deadline; and letting a stale lease go (taken over exactly, released at once).
 */
import { randomUUID } from 'node:crypto';
import type { Clock, Deadline } from '../../clock.js';
import type {
  Lease,
  LeaseAttempt,
  LeaseRef,
  LeaseRequest,
  TokenRecord,
  TokenStore,
} from '../../ports.js';
import { leaseTerm, type RefreshSettings } from '../timing/index.js';
import type { BrokerLogger } from '../types.js';

export class LeaseTaker {
  readonly #containerId = randomUUID();
  #attempts = 0;

  constructor(
    private readonly deps: {
      readonly store: TokenStore;
      readonly clock: Clock;
      readonly logger: BrokerLogger;
      readonly settings: Pick<RefreshSettings, 'timing'>;
      /** Cuts a store call to `waitMs` (I3). */
      readonly bounded: <T>(operation: Promise<T>, waitMs: number) => Promise<T>;
    },
  ) {}

  /** A new attempt's lease: a holder id of its own, and its first version. */
  next(): LeaseRef {
    this.#attempts += 1;
    return { holder: `${this.#containerId}:${this.#attempts}`, version: randomUUID() };
  }

  /** Asks for the lease as `ours` (`leaseMs`, cut to the deadline), within the deadline. */
  acquire(
    name: string,
    ours: LeaseRef,
    deadline: Deadline,
    terms: Pick<LeaseRequest, 'countdown' | 'takeOver' | 'replacesDigest' | 'forced'>,
  ): Promise<LeaseAttempt> {
    // A lease that starts a countdown is renewed by its first step a step after its answer.
    const { durationMs } = leaseTerm(
      0,
      deadline.leftMs(),
      this.deps.settings.timing,
      terms.countdown > 1,
    );
    const request: LeaseRequest = {
      ...ours,
      leaseExpiresAt: this.deps.clock.now() + durationMs,
      durationMs,
      ...terms,
    };
    return this.deps.bounded(
      this.deps.store.acquireLease(name, request, { deadline }),
      deadline.leftMs(),
    );
  }

  /** Takes a stale lease over and releases it at once, best effort. */
  async letGo(name: string, stale: Lease, valid: TokenRecord, deadline: Deadline): Promise<void> {
    const ours = this.next();
    try {
      const attempt = await this.acquire(name, ours, deadline, {
        countdown: stale.countdown,
        takeOver: stale,
        replacesDigest: valid.tokenDigest,
      });
      if (attempt.acquired) {
        await this.deps.bounded(
          this.deps.store.releaseLease(name, ours, { deadline }),
          deadline.leftMs(),
        );
      }
      this.deps.logger.info('Stale lease let go', { connection: name, countdown: stale.countdown });
    } catch {
      // The next read tries again, or finds it gone.
    }
  }
}
