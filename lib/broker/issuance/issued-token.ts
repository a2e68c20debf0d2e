/** The record, metrics and audit log line of a token just issued (expiry from our send time). */
import type { ConnectionConfig } from '../../config.js';
import { type BrokerMetrics, MetricName } from '../../metrics.js';
import type { IssuedToken, TokenRecord } from '../../ports.js';
import { type BrokerLogger, tokenDigest } from '../types.js';
import { CAUSE_METRIC, type Caller, type IssuanceCause } from './issuance-cause.js';

/** Clock skew between us and the upstream beyond which a warning is logged. */
const SKEW_WARNING_MS = 5 * 60_000;

export const recordIssued = (
  connection: ConnectionConfig,
  issued: IssuedToken,
  tookMs: number,
  { logger, metrics }: { readonly logger: BrokerLogger; readonly metrics: BrokerMetrics },
  {
    cause,
    forced,
    caller,
    needMs,
  }: {
    readonly cause: IssuanceCause;
    readonly forced: boolean;
    readonly caller: Caller;
    readonly needMs: number;
  },
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
  // The audit line of every issuance: why, at whose request, and for what validity.
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
