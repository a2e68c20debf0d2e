/**
 * The ledger of one chaos run: every caller request, what it got, and the upstream's verdict on
 * the token at the moment it was served. Pure bookkeeping: the harness feeds it, the report
 * reads it. Tokens never enter it, only their digests' verdicts.
 */

/** What the upstream (the simulator) knows of a token, by digest; epoch ms. */
export interface TokenHistory {
  readonly issuedAt: number;
  readonly expiresAt: number;
  readonly revokedAt: number | null;
}

/**
 * - `revoked-before-request`: the upstream had revoked the token before the caller even sent
 *   its request. The broker could have known: a violation of the fleet guarantee.
 * - `revoked-during-request`: revoked between the request and the answer; reported apart (a
 *   broker can only avoid these by not serving a token whose replacement is in flight).
 * - `expired`: past the upstream's expiry when it arrived.
 * - `unknown`: the upstream never issued it (a harness or broker bug).
 */
export type Verdict =
  | 'valid'
  | 'revoked-before-request'
  | 'revoked-during-request'
  | 'expired'
  | 'unknown';

/** Judges one served token; `sentAt` and `receivedAt` are the caller's, on the upstream's clock. */
export const classify = (
  history: TokenHistory | undefined,
  sentAt: number,
  receivedAt: number,
): Verdict => {
  if (!history) return 'unknown';
  if (history.revokedAt !== null && history.revokedAt < sentAt) return 'revoked-before-request';
  if (history.revokedAt !== null && history.revokedAt <= receivedAt) {
    return 'revoked-during-request';
  }
  if (history.expiresAt <= receivedAt) return 'expired';
  return 'valid';
};

/** How one caller request ended. */
export type Outcome =
  | {
      readonly kind: 'token';
      readonly verdict: Verdict;
      /** When the upstream revoked the token (epoch ms), if it had by the time it was judged. */
      readonly revokedAt?: number | null;
    }
  /** The broker answered in time with an error of its own (a 4xx/5xx-style function error). */
  | { readonly kind: 'error'; readonly errorType: string }
  /** No answer of the broker's by the deadline: emulated Lambda timeout, late or no answer. */
  | { readonly kind: 'unanswered'; readonly reason: string };

export interface LedgerEntry {
  readonly container: number;
  readonly sentAt: number;
  readonly receivedAt: number;
  readonly outcome: Outcome;
}

export interface Tally {
  requests: number;
  served: number;
  valid: number;
  revokedBeforeRequest: number;
  revokedDuringRequest: number;
  expired: number;
  unknownTokens: number;
  errors: Record<string, number>;
  unanswered: number;
  /** Of `unanswered`, those sent to a container while a fault was applied to it. */
  unansweredOnFaulted: number;
  unansweredReasons: Record<string, number>;
  /** Relative ms (from the run start) of the first and last revoked-before-request answer. */
  firstRevokedAtMs: number | null;
  lastRevokedAtMs: number | null;
  /** Revoked-before-request answers per container. */
  revokedByContainer: Record<string, number>;
  /**
   * The first REVOKED_DETAILS answers with a revoked token (either verdict), run-relative ms:
   * which container served it, when it was asked and answered, when the upstream revoked it.
   */
  revokedAnswers: {
    container: number;
    verdict: 'revoked-before-request' | 'revoked-during-request';
    sentAtMs: number;
    receivedAtMs: number;
    revokedAtMs: number | null;
  }[];
  /** Per container: answers with a token, revoked-before-request ones, misses, errors. */
  byContainer: Record<
    string,
    { served: number; revoked: number; unanswered: number; errors: number }
  >;
  /** Time to the broker's answer (token or error), ms. */
  latencyMs: { p50: number; p99: number; max: number };
}

export const emptyTally = (): Tally => ({
  requests: 0,
  served: 0,
  valid: 0,
  revokedBeforeRequest: 0,
  revokedDuringRequest: 0,
  expired: 0,
  unknownTokens: 0,
  errors: {},
  unanswered: 0,
  unansweredOnFaulted: 0,
  unansweredReasons: {},
  firstRevokedAtMs: null,
  lastRevokedAtMs: null,
  revokedByContainer: {},
  revokedAnswers: [],
  byContainer: {},
  latencyMs: { p50: 0, p99: 0, max: 0 },
});

export const percentile = (values: readonly number[], p: number): number => {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
};

const bump = (counts: Record<string, number>, key: string) => {
  counts[key] = (counts[key] ?? 0) + 1;
};

/** How many revoked answers the tally lists one by one. */
export const REVOKED_DETAILS = 50;

/** A time span during which a fault was applied to a container (epoch ms, end exclusive). */
export interface FaultSpan {
  readonly container: number;
  readonly from: number;
  readonly to: number;
}

export class Ledger {
  readonly #entries: LedgerEntry[] = [];
  readonly #spans: FaultSpan[] = [];

  constructor(readonly startedAt: number) {}

  record(entry: LedgerEntry): void {
    this.#entries.push(entry);
  }

  /** Marks a container as faulted over a span: its callers' misses are reported apart. */
  faulted(span: FaultSpan): void {
    this.#spans.push(span);
  }

  entries(): readonly LedgerEntry[] {
    return this.#entries;
  }

  spans(): readonly FaultSpan[] {
    return this.#spans;
  }

  #onFaulted(entry: LedgerEntry): boolean {
    return this.#spans.some(
      (span) =>
        span.container === entry.container &&
        span.from <= entry.receivedAt &&
        span.to >= entry.sentAt,
    );
  }

  tally(): Tally {
    const tally = emptyTally();
    const latencies: number[] = [];
    for (const entry of this.#entries) {
      tally.requests += 1;
      const { outcome } = entry;
      if (outcome.kind !== 'unanswered') latencies.push(entry.receivedAt - entry.sentAt);
      const key = String(entry.container);
      const container = tally.byContainer[key] ?? {
        served: 0,
        revoked: 0,
        unanswered: 0,
        errors: 0,
      };
      tally.byContainer[key] = container;
      if (outcome.kind === 'token') container.served += 1;
      if (outcome.kind === 'token' && outcome.verdict === 'revoked-before-request') {
        container.revoked += 1;
      }
      if (outcome.kind === 'unanswered') container.unanswered += 1;
      if (outcome.kind === 'error') container.errors += 1;
      if (outcome.kind === 'error') {
        bump(tally.errors, outcome.errorType);
        continue;
      }
      if (outcome.kind === 'unanswered') {
        tally.unanswered += 1;
        bump(tally.unansweredReasons, outcome.reason);
        if (this.#onFaulted(entry)) tally.unansweredOnFaulted += 1;
        continue;
      }
      tally.served += 1;
      if (
        (outcome.verdict === 'revoked-before-request' ||
          outcome.verdict === 'revoked-during-request') &&
        tally.revokedAnswers.length < REVOKED_DETAILS
      ) {
        tally.revokedAnswers.push({
          container: entry.container,
          verdict: outcome.verdict,
          sentAtMs: entry.sentAt - this.startedAt,
          receivedAtMs: entry.receivedAt - this.startedAt,
          revokedAtMs:
            typeof outcome.revokedAt === 'number' ? outcome.revokedAt - this.startedAt : null,
        });
      }
      switch (outcome.verdict) {
        case 'valid':
          tally.valid += 1;
          break;
        case 'revoked-before-request': {
          tally.revokedBeforeRequest += 1;
          bump(tally.revokedByContainer, String(entry.container));
          const at = entry.receivedAt - this.startedAt;
          tally.firstRevokedAtMs = tally.firstRevokedAtMs === null ? at : tally.firstRevokedAtMs;
          tally.lastRevokedAtMs = at;
          break;
        }
        case 'revoked-during-request':
          tally.revokedDuringRequest += 1;
          break;
        case 'expired':
          tally.expired += 1;
          break;
        case 'unknown':
          tally.unknownTokens += 1;
          break;
      }
    }
    tally.latencyMs = {
      p50: percentile(latencies, 50),
      p99: percentile(latencies, 99),
      max: percentile(latencies, 100),
    };
    return tally;
  }

  /** Per-bucket counts over the run, for the JSON report. */
  timeline(bucketMs: number, durationMs: number, issuanceTimes: readonly number[]) {
    const buckets = Array.from(
      { length: Math.max(1, Math.ceil(durationMs / bucketMs)) },
      (_, i) => ({
        t: (i * bucketMs) / 1000,
        issuances: 0,
        served: 0,
        revoked: 0,
        errors: 0,
        unanswered: 0,
      }),
    );
    const at = (time: number) =>
      buckets[
        Math.min(buckets.length - 1, Math.max(0, Math.floor((time - this.startedAt) / bucketMs)))
      ];
    for (const time of issuanceTimes) {
      const bucket = at(time);
      if (bucket) bucket.issuances += 1;
    }
    for (const entry of this.#entries) {
      const bucket = at(entry.receivedAt);
      if (!bucket) continue;
      if (entry.outcome.kind === 'token') {
        bucket.served += 1;
        if (entry.outcome.verdict === 'revoked-before-request') bucket.revoked += 1;
      } else if (entry.outcome.kind === 'error') bucket.errors += 1;
      else bucket.unanswered += 1;
    }
    return buckets;
  }
}

/**
 * Refreshes that landed after the token they replace had expired (issue 17): the issuance
 * came more than a lifetime after the previous one.
 */
export const refreshesAfterExpiry = (times: readonly number[], lifetimeMs: number): number => {
  let late = 0;
  for (let i = 1; i < times.length; i += 1) {
    if ((times[i] ?? 0) - (times[i - 1] ?? 0) > lifetimeMs) late += 1;
  }
  return late;
};

/**
 * The slowest answer (ms) to a request sent around a cut-over: within `beforeMs` before and
 * `afterMs` after each refresh's issuance (the first issuance, the cold start, is not one).
 * Containers under a fault at the time are left out: their callers wait for the fault.
 */
export const slowestAtCutOver = (
  entries: readonly LedgerEntry[],
  issuances: readonly number[],
  faulted: (container: number, at: number) => boolean,
  beforeMs: number,
  afterMs: number,
): number => {
  let slowest = 0;
  for (const at of issuances.slice(1)) {
    for (const entry of entries) {
      if (entry.sentAt < at - beforeMs || entry.sentAt > at + afterMs) continue;
      if (faulted(entry.container, entry.sentAt)) continue;
      slowest = Math.max(slowest, entry.receivedAt - entry.sentAt);
    }
  }
  return slowest;
};

/** Issuances closer than `minGapMs` to the previous one: a second mint for one lifetime. */
export const duplicateIssuances = (times: readonly number[], minGapMs: number): number => {
  let duplicates = 0;
  for (let i = 1; i < times.length; i += 1) {
    const gap = (times[i] ?? 0) - (times[i - 1] ?? 0);
    if (gap < minGapMs) duplicates += 1;
  }
  return duplicates;
};

/**
 * A token answer's reuse grant (`maxAgeMs`): a caller's cache may use the token until
 * `sentAt + maxAgeMs` on the caller's clock (here the harness's, which the upstream shares).
 */
export interface ReuseGrant {
  readonly digest: string;
  readonly sentAt: number;
  readonly maxAgeMs: number;
}

/** The guarantee where the token is used: grants judged against the upstream's revocations. */
export interface ReuseTally {
  /** Answers that let the caller reuse the token (`maxAgeMs` > 0). */
  grants: number;
  /** Mean `maxAgeMs` of those, ms. */
  meanMaxAgeMs: number;
  /**
   * Grants that outlived their token: the upstream revoked it after the request was sent and
   * before the grant ran out, so a caller's cache obeying it could have used a revoked token.
   * Tokens a caller had reported with `invalidate` are counted apart (the documented bound).
   */
  pastRevocation: number;
  pastRevocationReported: number;
  /** The longest a grant outlived its token's revocation (reported tokens aside), ms. */
  maxOverrunMs: number;
}

export const tallyReuse = (
  grants: readonly ReuseGrant[],
  histories: ReadonlyMap<string, TokenHistory | undefined>,
  reported: ReadonlySet<string>,
): ReuseTally => {
  const tally: ReuseTally = {
    grants: 0,
    meanMaxAgeMs: 0,
    pastRevocation: 0,
    pastRevocationReported: 0,
    maxOverrunMs: 0,
  };
  let total = 0;
  for (const grant of grants) {
    if (grant.maxAgeMs <= 0) continue;
    tally.grants += 1;
    total += grant.maxAgeMs;
    const revokedAt = histories.get(grant.digest)?.revokedAt ?? null;
    const until = grant.sentAt + grant.maxAgeMs;
    // Revoked before the request was sent: the answer itself is counted (revoked-before-request).
    if (revokedAt === null || revokedAt < grant.sentAt || revokedAt >= until) continue;
    if (reported.has(grant.digest)) {
      tally.pastRevocationReported += 1;
      continue;
    }
    tally.pastRevocation += 1;
    tally.maxOverrunMs = Math.max(tally.maxOverrunMs, until - revokedAt);
  }
  tally.meanMaxAgeMs = tally.grants === 0 ? 0 : total / tally.grants;
  return tally;
};
