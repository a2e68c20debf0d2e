/**
 * What the broker counts. The core reports through this port; the Lambda wiring sends the
 * figures to CloudWatch as EMF (Powertools Metrics). Names are part of the operator contract.
 */
export const MetricName = {
  /** A token handed to a caller; dimension `source`: memory, dynamodb or upstream. */
  TokensServed: 'TokensServed',
  /** A token issued by the Open API (one full two-step flow). */
  UpstreamIssuances: 'UpstreamIssuances',
  /** Duration of one issuance, in milliseconds. */
  UpstreamLatency: 'UpstreamLatency',
  /** A refresh (ahead of expiry, or by the warm-up) that failed. */
  RefreshFailures: 'RefreshFailures',
  /**
   * An issuance refused because the function's timeout cannot hold a refresh's countdown and
   * POST (`FUNCTION_TIMEOUT_TOO_SHORT`): tokens are still served, none is issued.
   */
  IssuanceRefused: 'IssuanceRefused',
  /** A request that waited for another container's lease. */
  LeaseWaits: 'LeaseWaits',
  /** A still-valid token served because getting a newer one failed. */
  LastGoodTokenServed: 'LastGoodTokenServed',
  /** A connection's circuit breaker opened: the upstream failed repeatedly, calls pause. */
  CircuitOpened: 'CircuitOpened',
  /**
   * An access-token request whose outcome is unknown (timed out, reset after sending): the
   * token it would replace was dropped, and the connection waits out a grace before issuing.
   */
  UnknownOutcomes: 'UnknownOutcomes',
  /** A request answered with a server-side failure (HTTP 5xx, or a thrown non-input error). */
  RequestErrors: 'RequestErrors',
  /** Issuances per cause (see `issuance-cause.ts`); UpstreamIssuances counts them all. */
  IssuedForFirstToken: 'IssuedForFirstToken',
  IssuedForExpired: 'IssuedForExpired',
  IssuedForWarmUp: 'IssuedForWarmUp',
  IssuedForRefreshAhead: 'IssuedForRefreshAhead',
  IssuedForMinValidity: 'IssuedForMinValidity',
  IssuedForInvalidate: 'IssuedForInvalidate',
  IssuedForTakeover: 'IssuedForTakeover',
  IssuedForUnknownOutcome: 'IssuedForUnknownOutcome',
  /** One run of the scheduled warm-up: its absence means the schedule stopped. */
  WarmUpRuns: 'WarmUpRuns',
  /**
   * The upstream rejected a token this broker issued and still holds as current (a caller
   * reported it): another system may be issuing tokens for the same client ID.
   */
  AnotherIssuerSuspected: 'AnotherIssuerSuspected',
  /**
   * A `minValidity` that would have replaced the current token was refused: the caller may not
   * force (`FORCE_NOT_ALLOWED`), or it came too soon after the last forced one
   * (`REPLACEMENT_TOO_SOON`).
   */
  ReplacementsRefused: 'ReplacementsRefused',
  /** An invalidate report about a token too young to go: kept, and acted on later. */
  InvalidateDeferred: 'InvalidateDeferred',
} as const;
export type MetricName = (typeof MetricName)[keyof typeof MetricName];

export interface BrokerMetrics {
  /** Adds `value` (a count, or milliseconds for latencies) under `name` for `connection`. */
  record(name: MetricName, connection: string, value?: number, source?: string): void;
}

export const noMetrics: BrokerMetrics = { record: () => undefined };
