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

/** Throws the refusal, if any; decided once, at the first invocation it sees. */
export type TimeoutGate = (context: Pick<Context, 'getRemainingTimeInMillis'>) => void;

export const timeoutGate = (settings: TimeoutSettings | undefined): TimeoutGate => {
  // undefined: not decided yet; null: fits.
  let refusal: FunctionTimeoutTooShortError | null | undefined = settings ? undefined : null;
  return (context) => {
    if (refusal === undefined) {
      const problem =
        settings && typeof context.getRemainingTimeInMillis === 'function'
          ? timeoutProblem(settings, context.getRemainingTimeInMillis())
          : undefined;
      refusal = problem ? new FunctionTimeoutTooShortError(problem) : null;
    }
    if (refusal) throw refusal;
  };
};
