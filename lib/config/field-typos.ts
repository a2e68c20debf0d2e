/** Naming a field a connection does not take, with the known field it is most likely a typo of. */
import { printable } from '../errors.js';

/** Edit distance of two short strings (insertions, deletions, substitutions). */
export const distance = (a: string, b: string): number => {
  let previous = Array.from({ length: b.length + 1 }, (_, j) => j);
  for (let i = 1; i <= a.length; i += 1) {
    const current = [i];
    for (let j = 1; j <= b.length; j += 1) {
      current[j] = Math.min(
        (previous[j] ?? 0) + 1,
        (current[j - 1] ?? 0) + 1,
        (previous[j - 1] ?? 0) + (a[i - 1] === b[j - 1] ? 0 : 1),
      );
    }
    previous = current;
  }
  return previous[b.length] ?? 0;
};

/**
 * The known name `name` is most likely a typo of: the same but for case, or the closest within
 * `maxDistance` edits (the first such in `known` on a tie); undefined when none is that close.
 */
export const nearest = (
  name: string,
  known: readonly string[],
  maxDistance = 2,
): string | undefined => {
  const same = known.find((k) => k.toLowerCase() === name.toLowerCase());
  if (same !== undefined) return same;
  let best: string | undefined;
  let bestDistance = maxDistance + 1;
  for (const candidate of known) {
    const d = distance(candidate, name);
    if (d < bestDistance) [best, bestDistance] = [candidate, d];
  }
  return best;
};

/**
 * The first key of `value` that is not one of `known`, and what to say of it: "unknown field",
 * with the known field it is most likely a typo of, and the known fields. Undefined when every
 * key is known (or `value` is no object).
 */
export const unknownKey = (
  value: unknown,
  known: readonly string[],
): { readonly key: string; readonly message: string } | undefined => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const key = Object.keys(value).find((k) => !known.includes(k));
  if (key === undefined) return undefined;
  const near = nearest(key, known);
  return {
    key,
    message: `unknown field${near ? ` (did you mean "${near}"?)` : ''}; known: ${known.join(', ')}`,
  };
};

/**
 * The first field of `value` that is not one of `known`, with the known field it is most
 * likely a typo of: a typo in a required field (`secretID`) is named as such, not reported as
 * the required field missing. Undefined when every field is known (or `value` is no object).
 */
export const unknownField = (value: unknown, known: readonly string[]): string | undefined => {
  const unknown = unknownKey(value, known);
  return unknown && `field "${printable(unknown.key, 40)}": ${unknown.message}`;
};
