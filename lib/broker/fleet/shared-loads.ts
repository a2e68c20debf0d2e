/**
 * Concurrent misses for one connection share one load, each caller within its own deadline (I3).
 * A joiner the shared load did not satisfy, or whose leader was refused, asks anew.
 */
import type { Clock } from '../../clock.js';
import type { ConnectionConfig } from '../../config.js';
import { ReplacementRefusedError, UpstreamUnavailableError } from '../../errors.js';
import { unsatisfiable } from '../observer/index.js';
import { SingleFlight } from '../single-flight.js';
import type { RefreshSettings } from '../timing/index.js';
import type { ServedToken } from '../types.js';
import { type TokenRequest, validityNeeded } from '../view/index.js';
import type { LeasedIssuance } from './leased-issuance.js';

const joinTimedOut = () =>
  new UpstreamUnavailableError('Timed out waiting for a token being issued concurrently', {
    retryAfterSeconds: 1,
  });

export class SharedLoads {
  readonly #flight: SingleFlight<string, ServedToken>;

  constructor(
    private readonly issuance: LeasedIssuance,
    private readonly clock: Clock,
    private readonly settings: RefreshSettings,
  ) {
    this.#flight = new SingleFlight(clock);
  }

  /** Whether a load for `name` is running in this container. */
  has(name: string): boolean {
    return this.#flight.has(name);
  }

  /** A token for `request`, each caller within its own deadline. */
  async load(connection: ConnectionConfig, request: TokenRequest): Promise<ServedToken> {
    const obtain = () => this.issuance.obtain(connection, request);
    const joining = this.#flight.has(connection.name);
    let outcome: { readonly value: ServedToken; readonly joined: boolean };
    try {
      outcome = await this.#flight.run(connection.name, obtain, request.deadline, joinTimedOut);
    } catch (error) {
      // A refusal answers the caller that asked, not the ones that joined it: they ask anew.
      if (joining && error instanceof ReplacementRefusedError) return obtain();
      throw error;
    }
    const { value: shared, joined } = outcome;
    const now = this.clock.now();
    const needMs = validityNeeded(request, shared.record, this.settings);
    if (!joined || shared.record.expiresAt - now > needMs) return shared;
    // The shared load asked for less validity than this caller needs.
    if (shared.source === 'upstream') throw unsatisfiable(shared.record, needMs);
    return obtain();
  }
}
