// A local serverless plugin: points the alias `live` (infra/rollout.yml) at the version this
// package publishes, and provisions it when the stage asks. Plain CloudFormation cannot name
// that version: osls gives it a logical ID with a hash of the code and configuration
// (BrokerLambdaVersion<hash>), new whenever either changes, which is what makes each release
// a new version and each deploy a CodeDeploy deployment of the alias.
// osls's own alias (set by `provisionedConcurrency` on a function) would be a second alias,
// named `provisioned`, outside CodeDeploy: the stage's `provisionedConcurrency` is put on
// `live` here instead.
const FUNCTION = 'broker';
const ALIAS = 'BrokerLiveAlias';

class LiveAlias {
  constructor(serverless) {
    const fail = (message) => {
      throw new serverless.classes.Error(message, 'BROKER_LIVE_ALIAS');
    };
    const point = () => {
      const resources = serverless.service.provider.compiledCloudFormationTemplate.Resources;
      const alias = resources[ALIAS];
      if (alias === undefined)
        fail(`${ALIAS} is missing: serverless.yml must include infra/rollout.yml`);
      const { versionLogicalId } = serverless.service.getFunction(FUNCTION);
      if (versionLogicalId === undefined || resources[versionLogicalId] === undefined) {
        fail(
          `The ${FUNCTION} function publishes no version: keep provider.versionFunctions on (the alias live needs one)`,
        );
      }
      alias.Properties.FunctionVersion = { 'Fn::GetAtt': [versionLogicalId, 'Version'] };
      const provisioned = serverless.service.custom?.liveAlias?.provisionedConcurrency;
      if (provisioned !== undefined && provisioned !== null && provisioned !== '') {
        // `--param` gives text; npm run validate has checked it is a whole number.
        alias.Properties.ProvisionedConcurrencyConfig = {
          ProvisionedConcurrentExecutions: Number(provisioned),
        };
      }
    };
    this.hooks = {
      // After `resources` (infra/rollout.yml) joined the compiled template, before it is saved.
      'after:aws:package:finalize:mergeCustomProviderResources': point,
    };
  }
}

module.exports = LiveAlias;
