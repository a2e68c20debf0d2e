// A local serverless plugin: packaging ships the prebuilt bundle (dist/broker/, see `package`
// in serverless.yml) and builds nothing itself. Without a build, osls only said "No file
// matches include / exclude patterns"; this says what is missing and what to run.
const { existsSync } = require('node:fs');
const { join } = require('node:path');

const BUNDLE = 'dist/broker/index.mjs';

class RequireBuild {
  constructor(serverless) {
    const check = () => {
      if (existsSync(join(serverless.serviceDir, BUNDLE))) return;
      throw new serverless.classes.Error(
        `${BUNDLE} is missing: run \`npm run build\` before packaging or deploying (the package ships the prebuilt bundle, and builds nothing).`,
        'BROKER_BUNDLE_MISSING',
      );
    };
    this.hooks = {
      'before:package:createDeploymentArtifacts': check,
      'before:package:function:package': check,
    };
  }
}

module.exports = RequireBuild;
