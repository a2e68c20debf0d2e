/**
 * The function's timeout against the settings (issue 24, issue 37). Lambda tells a function its
 * timeout only through an invocation's time left: at an environment's first invocation, that is
 * the timeout. If a refresh's countdown and POST cannot fit it (`timeoutProblem`, the rule
 * `npm run validate` applies to serverless.yml's `timeout`), no issuance could succeed: the
 * broker is told to refuse every one (`FUNCTION_TIMEOUT_TOO_SHORT`, counted as
 * `IssuanceRefused`, which an alarm watches), and goes on serving what it holds. One setting
 * changed in the console must not take every caller down, as refusing every invocation did.
 */
import type { Logger } from '@aws-lambda-powertools/logger';
import type { Context } from 'aws-lambda';
import { type TimeoutSettings, timeoutProblem } from '../../lib/config/settings-check.js';
import { ErrorCode } from '../../lib/errors.js';

/**
 * Judges an invocation's time left. Judged at each invocation until one has fitted: the time
 * left at a first invocation is the timeout, but an invocation that reached the function late
 * (an init Lambda counted against it) reads less, and must not condemn the environment for good.
 */
export type TimeoutGate = (context: Pick<Context, 'getRemainingTimeInMillis'>) => void;

export interface TimeoutGateDeps {
  /** Told the problem while the timeout is too short, and undefined once an invocation fits. */
  readonly refuse: (problem: string | undefined) => void;
  readonly logger: Pick<Logger, 'error'>;
}

export const timeoutGate = (
  settings: TimeoutSettings | undefined,
  { refuse, logger }: TimeoutGateDeps,
): TimeoutGate => {
  let fitted = settings === undefined;
  let said = false;
  return (context) => {
    if (fitted || !settings || typeof context.getRemainingTimeInMillis !== 'function') return;
    const problem = timeoutProblem(settings, context.getRemainingTimeInMillis());
    refuse(problem);
    if (problem === undefined) {
      fitted = true;
      return;
    }
    if (said) return;
    said = true;
    logger.error(
      'The function timeout is too short for a refresh: tokens are served, issuances refused',
      {
        error: { code: ErrorCode.FUNCTION_TIMEOUT_TOO_SHORT, message: problem },
      },
    );
  };
};
