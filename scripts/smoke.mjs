// `npm run smoke -- --stage <stage> [--region <region>]` or `-- --endpoint <url>`: builds
// infra/smoke.ts (it uses the project's own client, client/src) into .build-tools/ and runs it
// with the arguments. After a deploy: whether the stage works (docs/operations.md, Deploy).
import { runInfraTool } from './run-infra-tool.mjs';

await runInfraTool('smoke', {
  stdin: {
    contents:
      "import { main } from './infra/smoke.ts';\nprocess.exitCode = await main(process.argv.slice(2));\n",
    resolveDir: process.cwd(),
    sourcefile: 'smoke-entry.ts',
    loader: 'ts',
  },
});
