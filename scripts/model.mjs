// `npm run model [-- --runs N] [-- --seed=S --path P]`: the model-based test of the fleet
// (test/model/fleet.model.test.ts) with more drawn sequences than CI runs, or one replayed.
// A failure prints the seed and path that replay it; a replay runs that one sequence only
// (fast-check would go on from it to `--runs` otherwise), `--trace` tells what happened in it.
import { spawnSync } from 'node:child_process';
import { parseArgs } from 'node:util';

let values;
try {
  ({ values } = parseArgs({
    options: {
      runs: { type: 'string' },
      seed: { type: 'string' },
      path: { type: 'string' },
      trace: { type: 'boolean', default: false },
    },
  }));
} catch (error) {
  process.stderr.write(
    `model: ${error.message}\nusage: npm run model -- [--runs N] [--seed=S --path P] [--trace]\n`,
  );
  process.exit(2);
}
values.runs ??= values.path === undefined ? '2000' : '1';
if (!/^\d+$/.test(values.runs) || (values.seed !== undefined && !/^-?\d+$/.test(values.seed))) {
  process.stderr.write('model: --runs takes a whole number, --seed an integer\n');
  process.exit(2);
}
const env = {
  ...process.env,
  MODEL_RUNS: values.runs,
  ...(values.seed === undefined ? {} : { MODEL_SEED: values.seed }),
  ...(values.path === undefined ? {} : { MODEL_PATH: values.path }),
  ...(values.trace ? { MODEL_TRACE: '1' } : {}),
};
const result = spawnSync(
  'npx',
  ['vitest', 'run', 'test/model/', '--reporter=default', '--testTimeout=3600000'],
  { stdio: 'inherit', env },
);
process.exit(result.status ?? 1);
