/**
 * Which kind of event each qualifier serves (issue 37). A Function URL builds its event itself,
 * naming the caller SigV4 authenticated (`requestContext.authorizer.iam.userArn`); Lambda's
 * Invoke API delivers any payload, so a direct invoker can send the same event naming anyone.
 * Nothing in the event tells the two apart; the qualifier the function was invoked with does
 * (`context.invokedFunctionArn`): the URL serves an alias of its own, which callers are granted
 * only through the URL (`lambda:InvokedViaFunctionUrl`). So an HTTP request is served only
 * through that alias, and that alias serves nothing else. Pure: the handler refuses what this
 * returns.
 */
import { printable, WrongQualifierError } from '../../lib/errors.js';

/**
 * The qualifier of an invoked function ARN (`arn:<partition>:lambda:<region>:<account>:
 * function:<name>[:<qualifier>]`): an alias, a version or `$LATEST`; undefined when unqualified.
 */
export const qualifierOf = (invokedFunctionArn: string | undefined): string | undefined => {
  const parts = (invokedFunctionArn ?? '').split(':');
  return parts.length === 8 ? parts[7] : undefined;
};

/** How the refusal names the qualifier: quoted and cut, or that there was none. */
const through = (qualifier: string | undefined) =>
  qualifier === undefined ? 'without a qualifier' : `through '${printable(qualifier, 130)}'`;

/**
 * The refusal of an event invoked through `invokedFunctionArn`, or undefined when that qualifier
 * serves its kind. `urlQualifier` undefined: every qualifier serves every kind (tests in process).
 *
 * @param claimedCaller the IAM ARN an HTTP-shaped event names, kept for the log only.
 */
export const wrongQualifier = (
  http: boolean,
  invokedFunctionArn: string | undefined,
  urlQualifier: string | undefined,
  claimedCaller?: unknown,
): WrongQualifierError | undefined => {
  if (urlQualifier === undefined) return undefined;
  const qualifier = qualifierOf(invokedFunctionArn);
  const viaUrl = qualifier === urlQualifier;
  if (http === viaUrl) return undefined;
  const details = {
    qualifier: qualifier === undefined ? '(none)' : printable(qualifier, 130),
    ...(http && typeof claimedCaller === 'string'
      ? { claimedCaller: printable(claimedCaller, 200) }
      : {}),
  };
  return http
    ? new WrongQualifierError(
        `An HTTP request was invoked directly (${through(qualifier)}): HTTP requests are served only through the Function URL's alias '${urlQualifier}', for only the URL's request context says who called. By direct invoke, send {"action": …}`,
        { details },
      )
    : new WrongQualifierError(
        `The alias '${urlQualifier}' serves the Function URL's HTTP requests only: invoke another alias directly (the stack's is live)`,
        { details },
      );
};
