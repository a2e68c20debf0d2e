// The seed of every fast-check property during a mutation run (vitest.stryker.config.ts).
import fc from 'fast-check';

fc.configureGlobal({ seed: 20261121 });
