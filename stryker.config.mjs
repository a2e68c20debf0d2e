// Mutation testing of the lease-protocol modules: `npm run mutation`, run by hand, not in CI.
// 1,749 mutants since issue 27: a whole run at concurrency 1 takes an estimated 1.5 to 2 hours
// on this 2-core machine when it is shared (docs/benchmarks.md, "Mutation testing"); the report
// is written to reports/mutation/ (HTML and JSON), which git ignores. `--incremental` redoes
// only the mutants that changed code or tests reach; `--mutate <file>:<line>-<line>` one part.
/** @type {import('@stryker-mutator/api/core').PartialStrykerOptions} */
export default {
  testRunner: 'vitest',
  vitest: { configFile: 'vitest.stryker.config.ts', related: false, pool: 'forks' },
  // Each mutant runs only the tests that reached it in the dry run.
  coverageAnalysis: 'perTest',
  // The protocol modules, by side (docs/protocol.md, "Design"). The DynamoDB adapter is left
  // out: its tests need DynamoDB servers.
  mutate: [
    'lib/broker/observer/observer.ts',
    'lib/broker/observer/obtain.ts',
    'lib/broker/observer/caller-bounds.ts',
    'lib/broker/holder/state.ts',
    'lib/broker/holder/held-lease.ts',
    'lib/broker/holder/issue-under-lease.ts',
    'lib/broker/fleet/leased-issuance.ts',
    'lib/broker/timing/protocol-timing.ts',
    'lib/broker/timing/bounds.ts',
    'lib/broker/timing/estimates.ts',
    'lib/broker/view/connection-state.ts',
    'lib/broker/view/serving.ts',
  ],
  // One worker: the machine has 2 cores and is shared.
  concurrency: 1,
  reporters: ['clear-text', 'progress-append-only', 'html', 'json'],
  htmlReporter: { fileName: 'reports/mutation/mutation.html' },
  jsonReporter: { fileName: 'reports/mutation/mutation.json' },
  clearTextReporter: { allowColor: false, maxTestsToLog: 0 },
  tempDirName: '.stryker-tmp',
  // Stryker rewrites the `extends` and `references` of this file in its sandbox through the
  // TypeScript compiler API, which TypeScript 7 no longer has (the run fails with
  // "ts.parseConfigFileTextToJson is not a function"). tsconfig.json has neither, so Stryker is
  // pointed at a file that does not exist and leaves the tsconfig alone.
  tsconfigFile: 'tsconfig.stryker-none.json',
  cleanTempDir: true,
};
