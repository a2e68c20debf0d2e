// A local serverless plugin: points the aliases `live` and `url` (infra/rollout.yml) at the
// version this package publishes, and provisions `live` when the stage asks. Plain
// CloudFormation cannot name that version: osls gives it a logical ID with a hash of the code
// and configuration (BrokerLambdaVersion<hash>), new whenever either changes, which is what
// makes each release a new version and each deploy a CodeDeploy deployment of each alias.
// osls's own alias (set by `provisionedConcurrency` on a function) would be a third alias,
// named `provisioned`, outside CodeDeploy: the stage's `provisionedConcurrency` is put on
// `live` here instead.
const FUNCTION = 'broker';
/** The alias direct invokers and the warm-up invoke: the one provisioned. */
const ALIAS = 'BrokerLiveAlias';
/** Every alias of a release: live, and the Function URL's (issue 37). */
const ALIASES = [ALIAS, 'BrokerUrlAlias'];

class LiveAlias {
  constructor(serverless) {
    const fail = (message) => {
      throw new serverless.classes.Error(message, 'BROKER_LIVE_ALIAS');
    };
    const point = () => {
      const resources = serverless.service.provider.compiledCloudFormationTemplate.Resources;
      for (const id of ALIASES) {
        if (resources[id] === undefined)
          fail(`${id} is missing: serverless.yml must include infra/rollout.yml`);
      }
      const { versionLogicalId } = serverless.service.getFunction(FUNCTION);
      if (versionLogicalId === undefined || resources[versionLogicalId] === undefined) {
        fail(
          `The ${FUNCTION} function publishes no version: keep provider.versionFunctions on (the aliases live and url need one)`,
        );
      }
      for (const id of ALIASES) {
        resources[id].Properties.FunctionVersion = { 'Fn::GetAtt': [versionLogicalId, 'Version'] };
      }
      const alias = resources[ALIAS];
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
