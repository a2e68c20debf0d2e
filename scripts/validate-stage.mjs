// `npm run validate -- --stage <stage>`: builds infra/validate-stage.ts (it uses the broker's
// own configuration code, lib/config.ts) into .build-tools/ and runs it with the arguments.
import { runInfraTool } from './run-infra-tool.mjs';

await runInfraTool('validate-stage', { entryPoints: ['infra/validate-stage.ts'] });
