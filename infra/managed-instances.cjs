// A local serverless plugin (issue 37): with the stage's `compute: managed-instances`
// (serverless.yml params; default `lambda`, where this plugin changes nothing), the function runs
// on Lambda Managed Instances. It adds
// - BrokerCapacityProvider (AWS::Lambda::CapacityProvider) in the stage's `vpc` (its subnets and
//   security groups: the instances run there), of the function's architecture, scaling on its own
//   up to `managedInstancesMaxVCpu` vCPUs, the fleet's cost ceiling;
// - BrokerCapacityProviderOperatorRole, which Lambda assumes to run the EC2 instances: AWS's
//   managed policy AWSLambdaManagedEC2ResourceOperator, for this account only;
// and puts the function on it: its CapacityProviderConfig (2 GiB per vCPU), 2,048 MB (the
// smallest function Lambda Managed Instances runs, one vCPU), AWS_LAMBDA_NODEJS_WORKER_COUNT=1
// (one worker thread: one broker, one memory cache and one lease holder per environment; its
// 64 concurrent invocations wait on I/O, not on the CPU). The function's own VpcConfig goes, and
// with it the role's VPC access policy: the instances are in the VPC, the function makes no
// network interfaces of its own. `npm run validate` refuses the settings this cannot take
// (no `vpc`, reserved or provisioned concurrency, an unknown `compute`); this plugin refuses the
// first and the last too, so that no package is made without them.
const FUNCTION = 'broker';
const PROVIDER = 'BrokerCapacityProvider';
const OPERATOR_ROLE = 'BrokerCapacityProviderOperatorRole';
/** Lambda Managed Instances' smallest function: 2 GB and one vCPU. */
const MEMORY_MB = 2048;
const GIB_PER_VCPU = 2;

class ManagedInstances {
  constructor(serverless) {
    const fail = (message) => {
      throw new serverless.classes.Error(message, 'BROKER_MANAGED_INSTANCES');
    };
    const apply = () => {
      const settings = serverless.service.custom?.managedInstances ?? {};
      const compute = settings.compute ?? 'lambda';
      if (compute === 'lambda') return;
      if (compute !== 'managed-instances') {
        fail(`params.compute '${compute}' must be 'lambda' or 'managed-instances'`);
      }
      const provider = serverless.getProvider('aws');
      const resources = serverless.service.provider.compiledCloudFormationTemplate.Resources;
      const fn = resources[provider.naming.getLambdaLogicalId(FUNCTION)]?.Properties;
      if (fn === undefined) fail(`The ${FUNCTION} function is missing from the template`);
      const vpc = fn.VpcConfig;
      if (!vpc?.SubnetIds?.length || !vpc.SecurityGroupIds) {
        fail(
          "compute: managed-instances needs the stage's vpc (subnetIds, securityGroupIds): the capacity provider runs its instances there",
        );
      }
      resources[OPERATOR_ROLE] = {
        Type: 'AWS::IAM::Role',
        Properties: {
          AssumeRolePolicyDocument: {
            Version: '2012-10-17',
            Statement: [
              {
                Effect: 'Allow',
                Principal: { Service: 'lambda.amazonaws.com' },
                Action: 'sts:AssumeRole',
                Condition: { StringEquals: { 'aws:SourceAccount': { Ref: 'AWS::AccountId' } } },
              },
            ],
          },
          ManagedPolicyArns: [
            {
              'Fn::Join': [
                '',
                [
                  'arn:',
                  { Ref: 'AWS::Partition' },
                  ':iam::aws:policy/service-role/AWSLambdaManagedEC2ResourceOperator',
                ],
              ],
            },
          ],
        },
      };
      resources[PROVIDER] = {
        Type: 'AWS::Lambda::CapacityProvider',
        Properties: {
          CapacityProviderName: `${serverless.service.service}-${provider.getStage()}`,
          VpcConfig: { SubnetIds: vpc.SubnetIds, SecurityGroupIds: vpc.SecurityGroupIds },
          PermissionsConfig: {
            CapacityProviderOperatorRoleArn: { 'Fn::GetAtt': [OPERATOR_ROLE, 'Arn'] },
          },
          InstanceRequirements: { Architectures: fn.Architectures ?? ['x86_64'] },
          CapacityProviderScalingConfig: {
            ScalingMode: 'Auto',
            // `--param` gives text; npm run validate has checked it is a whole number.
            MaxVCpuCount: Number(settings.maxVCpuCount),
          },
        },
      };
      fn.CapacityProviderConfig = {
        LambdaManagedInstancesCapacityProviderConfig: {
          CapacityProviderArn: { 'Fn::GetAtt': [PROVIDER, 'Arn'] },
          ExecutionEnvironmentMemoryGiBPerVCpu: GIB_PER_VCPU,
        },
      };
      fn.MemorySize = Math.max(fn.MemorySize ?? 0, MEMORY_MB);
      fn.Environment ??= { Variables: {} };
      fn.Environment.Variables.AWS_LAMBDA_NODEJS_WORKER_COUNT = '1';
      delete fn.VpcConfig;
      const role = resources.IamRoleLambdaExecution?.Properties;
      if (role?.ManagedPolicyArns) {
        role.ManagedPolicyArns = role.ManagedPolicyArns.filter(
          (arn) => !JSON.stringify(arn).includes('AWSLambdaVPCAccessExecutionRole'),
        );
        if (role.ManagedPolicyArns.length === 0) delete role.ManagedPolicyArns;
      }
    };
    this.hooks = {
      // After `resources` joined the compiled template, before it is saved (as live-alias.cjs).
      'after:aws:package:finalize:mergeCustomProviderResources': apply,
    };
  }
}

module.exports = ManagedInstances;
