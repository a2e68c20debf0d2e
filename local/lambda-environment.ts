/**
 * What Lambda sets in a function's environment before its code loads, and that the bundle's
 * libraries read: Powertools reports `cold_start` only when AWS_LAMBDA_INITIALIZATION_TYPE is
 * `on-demand` (without it, every log line said `cold_start: false`, the first one included).
 * Set before the bundle is imported, and only where the caller has not set it.
 */
export const applyLambdaEnvironment = (env: NodeJS.ProcessEnv = process.env): void => {
  env.AWS_LAMBDA_INITIALIZATION_TYPE ??= 'on-demand';
};
