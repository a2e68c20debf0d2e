/**
 * A connection's `probe` field: an authenticated GET of the business API that the Open API
 * answers 401 for a revoked token, with which the broker checks a caller's invalidate report
 * before acting on it (docs/protocol.md, "A verified report").
 */
import { printable } from '../errors.js';
import { unknownKey } from './field-typos.js';
import { FieldProblem } from './signing-field.js';

/** How a connection's reports are checked. */
export interface ProbeConfig {
  /**
   * Path (and query, if any) of the GET, appended to the connection's `baseUrl`; sent with the
   * reported token in `x-access-token`.
   */
  readonly path: string;
  /**
   * A container probes a given token at most once per this many seconds; reports in between
   * reuse the verdict (a storm of reports costs one probe).
   */
  readonly intervalSeconds: number;
}

export const DEFAULT_PROBE_INTERVAL_SECONDS = 5;
/** Longer than this, a verdict of "valid" would hide a revocation for too long. */
export const MAX_PROBE_INTERVAL_SECONDS = 60;

const PROBE_FIELDS = ['path', 'intervalSeconds'];

/** Printable ASCII without spaces, `#` or `\`: a path and query that need no encoding. */
const PATH = /^\/[!-"$-[\]-~]*$/;

/**
 * The `probe` field: `{ "path", "intervalSeconds"? }`, or undefined when absent.
 *
 * @throws {FieldProblem} naming the exact sub-field and what is wrong with it.
 */
export const parseProbe = (value: unknown): ProbeConfig | undefined => {
  if (value === undefined) return undefined;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new FieldProblem('probe', 'must be an object { "path", "intervalSeconds"? }');
  }
  const unknown = unknownKey(value, PROBE_FIELDS);
  if (unknown !== undefined) {
    throw new FieldProblem(`probe.${printable(unknown.key, 40)}`, unknown.message);
  }
  const { path, intervalSeconds = DEFAULT_PROBE_INTERVAL_SECONDS } = value as Record<
    string,
    unknown
  >;
  if (typeof path !== 'string' || !PATH.test(path) || path.startsWith('//')) {
    throw new FieldProblem(
      'probe.path',
      'must be a path starting with "/" (relative to baseUrl, e.g. "/open-api/v3/ping"), without spaces or a fragment',
    );
  }
  if (path.split(/[/?]/).includes('..')) {
    throw new FieldProblem('probe.path', 'must not contain ".." segments');
  }
  if (
    typeof intervalSeconds !== 'number' ||
    !Number.isInteger(intervalSeconds) ||
    intervalSeconds < 1 ||
    intervalSeconds > MAX_PROBE_INTERVAL_SECONDS
  ) {
    throw new FieldProblem(
      'probe.intervalSeconds',
      `must be a whole number of seconds from 1 to ${MAX_PROBE_INTERVAL_SECONDS}`,
    );
  }
  return Object.freeze({ path, intervalSeconds });
};
