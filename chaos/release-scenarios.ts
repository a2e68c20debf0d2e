/**
 * Issue 25: two releases in one fleet, as during a deploy's canary (docs/operations.md,
 * "Rollout"): containers 0 and 2 run the previous release's bundle, built from git
 * (`chaos/previous-release.ts`, `--previous <ref>`), 1 and 3 this tree's, against one table and
 * one upstream. The guarantee (I2, I3 and the reuse grants; docs/protocol.md) is checked as in
 * every scenario; what the two releases do to each other is the measure.
 */
import type { RunResult, Scenario } from './harness.js';

/** Even containers run the previous release, odd ones this tree: half and half, interleaved. */
const half = (index: number) => (index % 2 === 0 ? 'previous' : 'current');

/**
 * Replacements beyond I4's bound, from the issuance times alone: I4 allows one replacement on a
 * caller's word per refresh window, plus one right after each natural issuance, so two gaps in
 * a row shorter than a window (a replacement of a replacement) exceed it. Each such second gap
 * counts once.
 */
export const replacementsBeyondI4 = (issuanceTimesMs: readonly number[], windowMs: number) => {
  let beyond = 0;
  for (let i = 2; i < issuanceTimesMs.length; i += 1) {
    const previousGap = (issuanceTimesMs[i - 1] ?? 0) - (issuanceTimesMs[i - 2] ?? 0);
    const gap = (issuanceTimesMs[i] ?? 0) - (issuanceTimesMs[i - 1] ?? 0);
    if (previousGap < windowMs && gap < windowMs) beyond += 1;
  }
  return beyond;
};

const i4Goal = (result: RunResult): string[] => {
  const beyond = replacementsBeyondI4(
    result.issuanceTimesMs,
    result.settings.refreshWindowSeconds * 1000,
  );
  return beyond === 0
    ? []
    : [
        `I4: ${beyond} replacements on a caller's word beyond one per refresh window ` +
          `(issuances at ${result.issuanceTimesMs.map((ms) => (ms / 1000).toFixed(1)).join(', ')} s)`,
      ];
};

export const RELEASE_SCENARIOS: readonly Scenario[] = [
  {
    name: 'two-releases',
    injects:
      'no fault: a deploy caught halfway, containers 0 and 2 on the previous release (built from git, `--previous <ref>`, default 0.1.0), 1 and 3 on this tree, one table; 40 s: the cold start and two refreshes',
    settings: { durationMs: 40_000 },
    release: half,
  },
  {
    name: 'two-releases-forcing-caller',
    injects:
      'the same mixed fleet (0 and 2 previous, 1 and 3 this tree), and one extra caller asking minValidity = lifetime - 1 s every 2 s, in turn on each container (forcing-caller)',
    predicted:
      'issue 25: releases before the caller bounds ignore `forced` and `reportedDigest`: the previous release replaces the token on every forcing request it gets (I4)',
    knownGap:
      'a previous release before the caller bounds (0.1.0, the default) replaces the token on forcing minValidity requests and marks none `forced`, so this tree takes them for natural issuances: during a canary from it, I4 does not hold; nothing in this release can change the old one',
    release: half,
    extra: async (context, invoke) => {
      let turn = 0;
      while (context.running()) {
        await context.sleep(2_000);
        if (!context.running()) break;
        const node = turn % context.nodes.length;
        context.inject('getToken minValidity = lifetime - 1', node);
        await invoke(node, {
          action: 'getToken',
          connection: 'sandbox',
          minValidity: context.settings.lifetimeSeconds - 1,
        });
        turn += 1;
      }
    },
    goals: i4Goal,
  },
];
