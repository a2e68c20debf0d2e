/**
 * Caller allowlist: IAM ARN globs as IAM writes them (`*` any run of characters, `?` one),
 * matched against the whole ARN, case-sensitively.
 */
const compiled = new Map<string, RegExp>();

const toRegExp = (pattern: string): RegExp => {
  let regExp = compiled.get(pattern);
  if (!regExp) {
    const body = pattern
      .split('')
      .map((ch) =>
        ch === '*' ? '.*' : ch === '?' ? '.' : ch.replace(/[.+^${}()|[\]\\/]/g, '\\$&'),
      )
      .join('');
    regExp = new RegExp(`^${body}$`, 's');
    compiled.set(pattern, regExp);
  }
  return regExp;
};

/**
 * Whether `callerArn` may use a connection. `patterns` undefined means every caller IAM let in;
 * a caller without an identity never matches a configured allowlist.
 */
export const allowsCaller = (
  patterns: readonly string[] | undefined,
  callerArn: string | undefined | null,
): boolean => {
  if (patterns === undefined) return true;
  if (!callerArn) return false;
  return patterns.some((pattern) => toRegExp(pattern).test(callerArn));
};

/**
 * Whether a caller may force a replacement on `connection` (its `forceCallers`): an HTTP caller
 * by its IAM ARN; a direct invoke (`callerArn` undefined, no identity) only where every caller
 * may.
 */
export const mayForce = (
  connection: { readonly forceCallers?: readonly string[] | undefined },
  callerArn: string | undefined | null,
): boolean => allowsCaller(connection.forceCallers, callerArn);
