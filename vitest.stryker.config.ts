import { defineConfig } from 'vitest/config';

// The tests Stryker runs against each mutant of the protocol modules (stryker.config.mjs): the
// broker's unit tests and the fleet model, without coverage or the JSON report of `npm test`.
// Property tests run on one fixed seed, so a mutant's result is the same from run to run.
export default defineConfig({
  test: {
    include: ['test/lib/broker/**/*.test.ts', 'test/model/fleet.model.test.ts'],
    pool: 'forks',
    setupFiles: ['./vitest.stryker.setup.ts'],
    env: { MODEL_SEED: '20261121' },
    testTimeout: 30_000,
    hookTimeout: 60_000,
    coverage: { enabled: false },
  },
});
