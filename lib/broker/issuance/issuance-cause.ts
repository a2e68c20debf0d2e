/**
 * Why a token was issued, and at whose request; the record, metrics and audit log line of a token
 * just issued (expiry from our send time). Every issuance is logged and counted by cause.
 */
import type { ConnectionConfig } from '../../config.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { IssuedToken, Lease, TokenRecord, TokenState } from '../../ports.js';
import { type BrokerLogger, tokenDigest } from '../types.js';

export const IssuanceCause = {
  /** No token had been stored for the connection. */
  FirstToken: 'first-token',
  /** The stored token had expired: nothing refreshed it in time. */
  Expired: 'expired',
  /** The warm-up replaced a token inside its refresh window. */
  WarmUp: 'warm-up',
  /** A request replaced a token inside its refresh window: routine, never `forced`. */
  RefreshAhead: 'refresh-ahead',
  /** The stored token was valid but too short for the validity a caller asked for. */
  MinValidity: 'min-validity',
  /** A caller's invalidate report had dropped the token. */
  Invalidate: 'invalidate',
  /** A holder stopped during its flow: its stale lease was taken over. */
  Takeover: 'takeover',
  /** A token request's outcome was unknown: the token it may have replaced was dropped. */
  UnknownOutcome: 'unknown-outcome',
} as const;
export type IssuanceCause = (typeof IssuanceCause)[keyof typeof IssuanceCause];

const CAUSE_METRIC: Readonly<Record<IssuanceCause, MetricName>> = {
  'first-token': MetricName.IssuedForFirstToken,
  expired: MetricName.IssuedForExpired,
  'warm-up': MetricName.IssuedForWarmUp,
  'refresh-ahead': MetricName.IssuedForRefreshAhead,
  'min-validity': MetricName.IssuedForMinValidity,
  invalidate: MetricName.IssuedForInvalidate,
  takeover: MetricName.IssuedForTakeover,
  'unknown-outcome': MetricName.IssuedForUnknownOutcome,
};

/** Causes that are a caller's word: the token they issue is `forced` (`caller-bounds.ts`). */
export const isCallersWord = (cause: IssuanceCause): boolean =>
  cause === IssuanceCause.MinValidity || cause === IssuanceCause.Invalidate;

/** Who asked: an HTTP caller's IAM ARN, `direct invoke`, `schedule` (the warm-up). */
export type Caller = string;

/** The caller when nobody is named (a caller without an identity, a test). */
export const UNNAMED_CALLER: Caller = 'unnamed caller';

/**
 * Why the lease just taken issues a token, from the read that led to it. Only a valid token
 * replaced before its window for a caller's validity is a caller's word.
 */
export const causeOf = (read: {
  readonly state: TokenState;
  readonly valid: TokenRecord | undefined;
  readonly suspect: boolean;
  readonly takeOver: Lease | undefined;
  readonly warmUp: boolean;
  /** The valid token has entered its refresh window. */
  readonly inWindow?: boolean;
}): IssuanceCause => {
  if (read.takeOver) return IssuanceCause.Takeover;
  if (read.suspect) return IssuanceCause.UnknownOutcome;
  if (read.valid) {
    if (read.warmUp) return IssuanceCause.WarmUp;
    return read.inWindow ? IssuanceCause.RefreshAhead : IssuanceCause.MinValidity;
  }
  if (read.state.token) return IssuanceCause.Expired;
  return read.state.invalidatedAt === undefined
    ? IssuanceCause.FirstToken
    : IssuanceCause.Invalidate;
};

/** Clock skew between us and the upstream beyond which a warning is logged. */
const SKEW_WARNING_MS = 5 * 60_000;

/** Why a token is issued, at whose request, and for what validity (ms): logged and counted. */
export interface Issuance {
  readonly cause: IssuanceCause;
  /** Issued on a caller's word, or by taking over a lease that was (see `TokenRecord.forced`). */
  readonly forced: boolean;
  readonly caller: Caller;
  readonly needMs: number;
}

export const recordIssued = (
  connection: ConnectionConfig,
  issued: IssuedToken,
  tookMs: number,
  { logger, metrics }: { readonly logger: BrokerLogger; readonly metrics: BrokerMetrics },
  { cause, forced, caller, needMs }: Issuance,
): TokenRecord => {
  const { name } = connection;
  metrics.record(MetricName.UpstreamIssuances, name);
  metrics.record(CAUSE_METRIC[cause], name);
  metrics.record(MetricName.UpstreamLatency, name, tookMs);
  const record: TokenRecord = {
    connection: name,
    accessToken: issued.accessToken,
    tokenDigest: tokenDigest(issued.accessToken),
    issuedAt: issued.requestedAt,
    expiresAt: issued.requestedAt + issued.expiresIn * 1000,
    ...(forced ? { forced: true } : {}),
  };
  if (issued.upstreamTimestamp !== undefined) {
    const skewMs = issued.upstreamTimestamp * 1000 - issued.requestedAt;
    if (Math.abs(skewMs) > SKEW_WARNING_MS) {
      logger.warn('Upstream clock differs from ours; expiry counts from our clock', {
        connection: name,
        skewSeconds: Math.round(skewMs / 1000),
      });
    }
  }
  logger.info('Token issued by the Open API', {
    connection: name,
    variant: connection.variant,
    cause,
    // Logged as `trigger` (the log line's field is part of the contract).
    trigger: caller,
    ...(cause === 'min-validity' ? { minValidity: Math.ceil(needMs / 1000) } : {}),
    ...(forced ? { forced: true } : {}),
    tokenDigest: record.tokenDigest,
    expiresIn: issued.expiresIn,
    issuanceMs: tookMs,
  });
  return record;
};
