/**
 * Lambda entry point. It sends the extension's registration (./after-response.ts) first, then
 * loads and runs the rest of init (./init.ts): the registration's round trip to the Extensions
 * API overlaps that work instead of following it (issue 25).
 */
import { startRegistration } from './after-response.js';

// BROKER_LAMBDA_EXTENSION=off: none (for comparison; see docs/configuration.md).
const runtimeApi =
  process.env.BROKER_LAMBDA_EXTENSION?.trim() === 'off'
    ? undefined
    : process.env.AWS_LAMBDA_RUNTIME_API;
const registration = startRegistration(runtimeApi);

export const handler = await (await import('./init.js')).init(runtimeApi, registration);
