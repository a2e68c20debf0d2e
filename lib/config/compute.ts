/**
 * How Lambda runs this environment, from what Lambda itself sets: the one place the broker
 * decides it (issue 37). `AWS_LAMBDA_INITIALIZATION_TYPE` is `lambda-managed-instances` on Lambda
 * Managed Instances, where Node.js runs the function in worker threads, many invocations at once
 * in each, each in the runtime's InvokeStore context; nothing is frozen between invocations, an
 * extension's INVOKE registration is refused, and timeouts are reported, not enforced. Anything
 * else (`on-demand`, `provisioned-concurrency`, `snap-start`, unset outside Lambda) is Lambda's
 * own model: one invocation at a time, frozen in between.
 */
import type { Env } from './variables.js';

export type Compute = 'lambda' | 'managed-instances';

export const computeOf = (env: Env): Compute =>
  env.AWS_LAMBDA_INITIALIZATION_TYPE?.trim() === 'lambda-managed-instances'
    ? 'managed-instances'
    : 'lambda';
