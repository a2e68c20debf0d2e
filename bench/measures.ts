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

/**
 * Each container's slowest request sent from `beforeMs` before to `afterMs` after a refresh's
 * issuance (ms), cut-over by cut-over, containers in order; the fleet's first issuance apart.
 * At a cut-over a busy container has about one caller that waits for the successor, the rest
 * served from memory in a few ms: the p99 of all callers then lands on the shortest of those
 * few waits or below them by how many callers came (4 containers and 2 cut-overs: 8 waits,
 * the p99 of 799 callers is the 8th slowest, of 800 the 9th). This figure does not.
 */
export const slowestPerContainerAtCutOver = (
  calls: readonly { readonly container: number; readonly at: number; readonly took: number }[],
  issuances: readonly number[],
  { beforeMs, afterMs }: { readonly beforeMs: number; readonly afterMs: number },
): number[] =>
  issuances.slice(1).flatMap((issued) => {
    const slowest = new Map<number, number>();
    for (const { container, at, took } of calls) {
      if (at < issued - beforeMs || at > issued + afterMs) continue;
      slowest.set(container, Math.max(took, slowest.get(container) ?? 0));
    }
    return [...slowest].sort(([a], [b]) => a - b).map(([, took]) => took);
  });

/**
 * One item's reads at scale: the main item's (`token#…`), or the copies' (`copy#<i>#token#…`,
 * read at random) shared by `copies`, whichever is more.
 */
export const itemLoad = (byItem: ReadonlyMap<string, number>, copies: number): number => {
  let main = 0;
  let copied = 0;
  for (const [item, count] of byItem) {
    if (item.startsWith('copy#')) copied += count;
    else main = Math.max(main, count);
  }
  return Math.max(main, copies > 0 ? copied / copies : copied);
};
