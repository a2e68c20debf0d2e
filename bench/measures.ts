/** The figures every benchmark run computes the same way, from its callers and issuances. */

/** The p-th percentile (nearest rank) of `values`; 0 for none. */
export const percentile = (values: readonly number[], p: number): number => {
  if (values.length === 0) return 0;
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.min(sorted.length - 1, Math.ceil((p / 100) * sorted.length) - 1)] ?? 0;
};

/**
 * Refreshes that landed after the token they replace had expired, as the chaos suite counts
 * them (an issuance more than a lifetime after the one before), plus a token left to expire
 * before the run's end with no successor.
 */
export const refreshesAfterExpiry = (
  issuances: readonly number[],
  lifetimeMs: number,
  endedAt: number,
): number => {
  let late = 0;
  for (let i = 1; i < issuances.length; i += 1) {
    if ((issuances[i] ?? 0) - (issuances[i - 1] ?? 0) > lifetimeMs) late += 1;
  }
  const last = issuances.at(-1);
  return late + (last !== undefined && endedAt - last > lifetimeMs ? 1 : 0);
};

/** The chaos suite's cut-over (chaos/harness.ts): 5 s before a refresh's issuance, 1 s after. */
export const CHAOS_CUT_OVER = { beforeMs: 5_000, afterMs: 1_000 } as const;

/**
 * The waits (ms) of requests sent from `beforeMs` before to `afterMs` after a refresh's
 * issuance; the first issuance, the fleet's first token, is not a cut-over.
 */
export const waitsAtCutOver = (
  calls: readonly { readonly at: number; readonly took: number }[],
  issuances: readonly number[],
  { beforeMs, afterMs }: { readonly beforeMs: number; readonly afterMs: number },
): number[] => {
  const cutovers = issuances.slice(1);
  return calls
    .filter(({ at }) =>
      cutovers.some((issued) => at >= issued - beforeMs && at <= issued + afterMs),
    )
    .map(({ took }) => took);
};
