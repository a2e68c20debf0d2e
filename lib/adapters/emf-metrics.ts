/**
 * {@link BrokerMetrics} as CloudWatch metrics through Powertools Metrics (Embedded Metric
 * Format: one JSON log line, no API call). Values are buffered during an invocation and
 * published at its end, one EMF line per connection. Each metric is published under two
 * dimension sets: [service, connection] for dashboards, and [service] alone so that one alarm
 * covers every connection (CloudWatch alarms need exact dimensions and cannot search).
 *
 * Metric names (namespace POWERTOOLS_METRICS_NAMESPACE, default `TokenBroker`):
 * TokensServedFromMemory, TokensServedFromDynamoDB, TokensServedFromUpstream, UpstreamIssuances,
 * UpstreamLatency (ms), RefreshFailures, LeaseWaits, LastGoodTokenServed, UnknownOutcomes,
 * RequestErrors, CircuitOpened, IssuedFor<Cause> (one per issuance cause), WarmUpRuns,
 * AnotherIssuerSuspected.
 */
import { type Metrics, MetricUnit } from '@aws-lambda-powertools/metrics';
import { type BrokerMetrics, MetricName } from '../metrics.js';

const SERVED_BY_SOURCE: Readonly<Record<string, string>> = {
  memory: 'TokensServedFromMemory',
  dynamodb: 'TokensServedFromDynamoDB',
  upstream: 'TokensServedFromUpstream',
};

export class EmfMetrics implements BrokerMetrics {
  // connection → metric name → values recorded during this invocation
  readonly #pending = new Map<string, Map<string, number[]>>();

  constructor(private readonly metrics: Metrics) {}

  record(name: MetricName, connection: string, value = 1, source?: string): void {
    const metric =
      name === MetricName.TokensServed && source ? (SERVED_BY_SOURCE[source] ?? name) : name;
    let byName = this.#pending.get(connection);
    if (!byName) {
      byName = new Map();
      this.#pending.set(connection, byName);
    }
    const values = byName.get(metric);
    if (values) values.push(value);
    else byName.set(metric, [value]);
  }

  /** Publishes what this invocation recorded. Called once at the end of every invocation. */
  flush(): void {
    for (const [connection, byName] of this.#pending) {
      this.metrics.addDimension('connection', connection);
      this.metrics.addDimensions({});
      for (const [name, values] of byName) {
        const unit =
          name === MetricName.UpstreamLatency ? MetricUnit.Milliseconds : MetricUnit.Count;
        for (const value of values) this.metrics.addMetric(name, unit, value);
      }
      this.metrics.publishStoredMetrics();
    }
    this.#pending.clear();
  }
}
