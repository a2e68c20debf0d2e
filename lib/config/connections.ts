/**
 * `BROKER_CONNECTIONS`: the upstream accounts the broker issues for, a JSON object of
 * connection name → settings, each checked field by field.
 */
import * as z from 'zod/mini';
import { ConfigError } from '../errors.js';
import '../schema.js';
import type { SigningConfig } from '../upstream/signing.js';
import { baseUrlSchema } from './base-url.js';
import { unknownField } from './field-typos.js';
import { type ProbeConfig, parseProbe } from './probe-field.js';
import { FieldProblem, parseSigning } from './signing-field.js';

export type { ProbeConfig } from './probe-field.js';

/** Which path variant of the Open API a connection speaks. */
export type Variant = 'v3' | 'legacy';

/** One configured upstream account, keyed by its name in `BROKER_CONNECTIONS`. */
export interface ConnectionConfig {
  readonly name: string;
  readonly variant: Variant;
  /** Normalised: no trailing slash, no query, no fragment. */
  readonly baseUrl: string;
  /** Secrets Manager id or ARN whose SecretString is `{ clientId, clientSecret }`. */
  readonly secretId: string;
  /** IAM ARN globs (`*`, `?`) allowed to call over HTTP; `undefined` means anyone IAM let in. */
  readonly callers: readonly string[] | undefined;
  /**
   * IAM ARN globs of the HTTP callers that may force a replacement (a `minValidity` the current
   * token cannot give); `undefined` means every caller, `[]` none. Direct invoke carries no
   * identity: it may force only when this is `undefined`. Reporting a rejected token
   * (invalidate) is everyone's right and needs no listing.
   */
  readonly forceCallers?: readonly string[] | undefined;
  /** v3 only: the field of the authorize response's `data` that holds the authorization code. */
  readonly codeField: string;
  /**
   * Whether the upstream revokes earlier tokens when it issues a new one. When true (the
   * default: the spec does not say), a refresh drains and callers wait through the cut-over
   * rather than receive a token that may already be revoked.
   */
  readonly revokesOnReissue: boolean;
  /**
   * v3 only: how access-token requests are signed for the Open API's Strict Access Token Mode
   * (`X-Timestamp`, `X-Signature`), or `false` for no signing. `loadConfig` always sets it
   * (`false` on legacy connections); when a connection built in code leaves it out, a v3
   * connection signs with `DEFAULT_SIGNING` (`upstream/signing.ts`), as a configured one does.
   */
  readonly signing?: SigningConfig | false;
  /**
   * How a caller's invalidate report is checked with the Open API before it is acted on (an
   * authenticated GET answered 401 for a revoked token); `undefined`: reports are bounded by
   * age alone (`broker/observer/caller-bounds.ts`).
   */
  readonly probe?: ProbeConfig | undefined;
}

const VARIABLE = 'BROKER_CONNECTIONS';
const CONNECTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

const nonEmpty = (message: string) => z.string().check(z.trim(), z.minLength(1, message));

const connectionSchema = z.strictObject({
  variant: z.enum(['v3', 'legacy']),
  baseUrl: baseUrlSchema,
  secretId: nonEmpty('must be a non-empty Secrets Manager id or ARN'),
  callers: z.optional(
    z
      .array(nonEmpty('must be a non-empty IAM ARN pattern'))
      .check(
        z.minLength(
          1,
          'must list at least one IAM ARN pattern (omit the field to allow every caller)',
        ),
      ),
  ),
  // Empty is meaningful here: nobody may force.
  forceCallers: z.optional(z.array(nonEmpty('must be a non-empty IAM ARN pattern'))),
  codeField: z.optional(z.string().check(z.regex(FIELD_NAME, 'must be a plain JSON field name'))),
  revokesOnReissue: z.optional(z.boolean()),
  // Checked by `parseSigning` and `parseProbe`, which name the exact sub-field and problem.
  signing: z.optional(z.unknown()),
  probe: z.optional(z.unknown()),
});

/** The fields a connection takes, for the message about one it does not. */
const CONNECTION_FIELDS = Object.keys(connectionSchema.shape);

const describePath = (path: readonly PropertyKey[]): string => {
  const [connection, field, ...rest] = path.map(String);
  if (connection === undefined) return '';
  const fieldPath = [field, ...rest].filter((p) => p !== undefined).join('.');
  return `connection "${connection}"${fieldPath ? `, field "${fieldPath}"` : ''}: `;
};

/** One connection's settings, checked and frozen. */
const parseConnection = (name: string, value: unknown): ConnectionConfig => {
  if (!CONNECTION_NAME.test(name)) {
    throw new ConfigError(
      `${VARIABLE}: connection "${name.slice(0, 80)}": the name must be 1-64 characters of letters, digits, '.', '_' or '-'`,
    );
  }
  const typo = unknownField(value, CONNECTION_FIELDS);
  if (typo !== undefined) throw new ConfigError(`${VARIABLE}: connection "${name}", ${typo}`);
  const result = connectionSchema.safeParse(value);
  if (!result.success) {
    const issue = result.error.issues[0];
    const where = describePath([name, ...(issue?.path ?? [])]);
    throw new ConfigError(`${VARIABLE}: ${where}${issue?.message ?? 'invalid'}`);
  }
  const { variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue } =
    result.data;
  for (const [field, present] of [
    ['codeField', codeField !== undefined],
    ['signing', result.data.signing !== undefined],
  ] as const) {
    if (present && variant !== 'v3') {
      throw new ConfigError(
        `${VARIABLE}: connection "${name}", field "${field}": only applies to variant "v3"`,
      );
    }
  }
  let signing: SigningConfig | false;
  let probe: ProbeConfig | undefined;
  try {
    signing = variant === 'v3' ? parseSigning(result.data.signing) : false;
    probe = parseProbe(result.data.probe);
  } catch (error) {
    if (!(error instanceof FieldProblem)) throw error;
    throw new ConfigError(
      `${VARIABLE}: connection "${name}", field "${error.field}": ${error.message}`,
    );
  }
  return Object.freeze({
    name,
    variant,
    baseUrl,
    secretId,
    callers: callers ? Object.freeze([...callers]) : undefined,
    forceCallers: forceCallers ? Object.freeze([...forceCallers]) : undefined,
    codeField: codeField ?? 'code',
    revokesOnReissue: revokesOnReissue ?? true,
    signing,
    probe,
  });
};

/**
 * Reads `BROKER_CONNECTIONS`.
 *
 * @throws {ConfigError} naming the connection and the field whose value is missing or malformed.
 */
export const parseConnections = (raw: string | undefined): Map<string, ConnectionConfig> => {
  if (raw === undefined || raw.trim() === '') {
    throw new ConfigError(`${VARIABLE} is required: a JSON object of connection name → settings`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // The parser's own message quotes the input; it is left out on purpose.
    throw new ConfigError(`${VARIABLE} is not valid JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(`${VARIABLE} must be a JSON object of connection name → settings`);
  }
  const entries = Object.entries(parsed);
  if (entries.length === 0) {
    throw new ConfigError(`${VARIABLE} must configure at least one connection`);
  }
  const connections = new Map<string, ConnectionConfig>();
  for (const [name, value] of entries) connections.set(name, parseConnection(name, value));
  return connections;
};
