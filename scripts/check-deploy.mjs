// `npm run check:deploy`: builds infra/check-deploy.ts (the stacks checked offline as AWS would
// judge them: IAM against the Service Authorization Reference, cfn-lint, cfn-guard) into
// .build-tools/ and runs it with the arguments.
import { runInfraTool } from './run-infra-tool.mjs';

await runInfraTool('check-deploy', { entryPoints: ['infra/check-deploy.ts'] });
