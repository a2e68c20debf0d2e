/**
 * The function's timeout against the settings (issue 24). Lambda tells a function its timeout
 * only through an invocation's time left: at an environment's first invocation, that is the
 * timeout. If a refresh's countdown and POST cannot fit it (`timeoutProblem`, the rule
 * `npm run validate` applies to serverless.yml's `timeout`), every warm-up and refresh would
 * fail with "Not enough time left…": the environment refuses every invocation instead, with an
 * error that names both settings, as a bad configuration is refused at cold start.
 */
import type { Context } from 'aws-lambda';
import { type TimeoutSettings, timeoutProblem } from '../../lib/config/settings-check.js';
import { FunctionTimeoutTooShortError } from '../../lib/errors.js';

/**
 * Throws the refusal, if any. Judged at each invocation until one has fitted: the time left at a
 * first invocation is the timeout, but an invocation that reached the function late (an init
 * Lambda counted against it) reads less, and must not condemn the environment for good.
 */
export type TimeoutGate = (context: Pick<Context, 'getRemainingTimeInMillis'>) => void;

export const timeoutGate = (settings: TimeoutSettings | undefined): TimeoutGate => {
  let fitted = settings === undefined;
  return (context) => {
    if (fitted || !settings || typeof context.getRemainingTimeInMillis !== 'function') return;
    const problem = timeoutProblem(settings, context.getRemainingTimeInMillis());
    if (problem) throw new FunctionTimeoutTooShortError(problem);
    fitted = true;
  };
};
