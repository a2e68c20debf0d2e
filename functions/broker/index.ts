/**
 * Lambda entry point. It sends the extension's registration (./after-response.ts) first, then
 * loads and runs the rest of init (./init.ts): the registration's round trip to the Extensions
 * API overlaps that work instead of following it (issue 25).
 */
import { extensionApiOf, startRegistration } from './after-response.js';

// None with BROKER_LAMBDA_EXTENSION=off (for comparison) and on Lambda Managed Instances.
const runtimeApi = extensionApiOf(process.env);
const registration = startRegistration(runtimeApi);

export const handler = await (await import('./init.js')).init(runtimeApi, registration);
