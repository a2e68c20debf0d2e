/**
 * Issue 25: two releases in one fleet, as during a deploy's canary (docs/operations.md,
 * "Rollout"): half the containers run the previous release's bundle, built from git
 * (`chaos/previous-release.ts`, `--previous <ref>`), half this tree's, against one table and one
 * upstream. No fault: what is measured is what the two releases do to each other. The guarantee
 * (I1-I4, docs/protocol.md) is checked as in every scenario.
 */
import type { Scenario } from './harness.js';

export const RELEASE_SCENARIOS: readonly Scenario[] = [
  {
    name: 'two-releases',
    injects:
      'no fault: a deploy caught halfway, containers 0 and 2 on the previous release (built from git, `--previous <ref>`; default 0.1.0), 1 and 3 on this tree, one table; 40 s: the cold start and two refreshes',
    settings: { durationMs: 40_000 },
    release: (index) => (index % 2 === 0 ? 'previous' : 'current'),
  },
];
