/**
 * `BROKER_CONNECTIONS`: the upstream accounts the broker issues for, a JSON object of
 * connection name → settings, each checked field by field.
 *
 * This module has no schema library in it (issue 25): a cold start checks a valid
 * configuration with {@link plainFields}, plain code that answers only for values it is sure
 * of; anything else (an invalid value, or one it is unsure of) is checked again by the zod
 * schema (`connection-schema.ts`, loaded then), whose messages name the connection and the field.
 */
import { ConfigError } from '../errors.js';
import type { SigningConfig } from '../upstream/signing.js';
import { normaliseBaseUrl } from './base-url.js';
import { unknownField } from './field-typos.js';
import { jsonErrorAt } from './json-error.js';
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
export const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

/** The fields a connection takes (`connection-schema.ts` holds its schema to them). */
export const CONNECTION_FIELDS = [
  'variant',
  'baseUrl',
  'secretId',
  'callers',
  'forceCallers',
  'codeField',
  'revokesOnReissue',
  'signing',
  'probe',
] as const;

/** A connection's fields once checked (trimmed and normalised); `signing` and `probe` as given. */
export interface ConnectionFields {
  readonly variant: Variant;
  readonly baseUrl: string;
  readonly secretId: string;
  readonly callers?: string[] | undefined;
  readonly forceCallers?: string[] | undefined;
  readonly codeField?: string | undefined;
  readonly revokesOnReissue?: boolean | undefined;
  readonly signing?: unknown;
  readonly probe?: unknown;
}

/**
 * Checks one connection's fields (its keys are known fields already): the checked fields, or
 * the first problem with its path under the connection.
 */
export type FieldCheck = (
  value: unknown,
) =>
  | { readonly data: ConnectionFields }
  | { readonly problem: { readonly path: readonly PropertyKey[]; readonly message: string } };

/** {@link plainFields} could not tell: the schema must judge (`loadConfigAtInit`). */
export class UnsureOfFields extends Error {}

const isRecord = (value: unknown): value is Record<string, unknown> =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

/** A trimmed, non-empty string, or undefined. */
const trimmed = (value: unknown): string | undefined => {
  if (typeof value !== 'string') return undefined;
  const text = value.trim();
  return text === '' ? undefined : text;
};

/** A list of trimmed, non-empty strings, or undefined. */
const trimmedList = (value: unknown): string[] | undefined => {
  if (!Array.isArray(value)) return undefined;
  const list = value.map(trimmed);
  return list.every((item) => item !== undefined) ? (list as string[]) : undefined;
};

/**
 * The schema's checks (`connection-schema.ts`) in plain code, for values they accept: the same
 * fields come out. Anything else throws {@link UnsureOfFields}: the schema then judges, and names
 * the problem. `test/lib/config-plain-fields.test.ts` holds the two to the same answers.
 */
export const plainFields: FieldCheck = (value) => {
  const unsure = () => {
    throw new UnsureOfFields();
  };
  if (!isRecord(value)) return unsure();
  const { variant, baseUrl, callers, forceCallers, codeField, revokesOnReissue } = value;
  if (variant !== 'v3' && variant !== 'legacy') return unsure();
  if (typeof baseUrl !== 'string') return unsure();
  const url = normaliseBaseUrl(baseUrl);
  if (!('url' in url)) return unsure();
  const secretId = trimmed(value.secretId);
  if (secretId === undefined) return unsure();
  const callerList = callers === undefined ? undefined : trimmedList(callers);
  if (callers !== undefined && (callerList === undefined || callerList.length === 0)) {
    return unsure();
  }
  const forceList = forceCallers === undefined ? undefined : trimmedList(forceCallers);
  if (forceCallers !== undefined && forceList === undefined) return unsure();
  if (codeField !== undefined && (typeof codeField !== 'string' || !FIELD_NAME.test(codeField))) {
    return unsure();
  }
  if (revokesOnReissue !== undefined && typeof revokesOnReissue !== 'boolean') return unsure();
  const data: Record<string, unknown> = { variant, baseUrl: url.url, secretId };
  // The schema leaves out an absent field (and one given as undefined, as JSON never does).
  if (callerList !== undefined) data.callers = callerList;
  if (forceList !== undefined) data.forceCallers = forceList;
  if (codeField !== undefined) data.codeField = codeField;
  if (revokesOnReissue !== undefined) data.revokesOnReissue = revokesOnReissue;
  if ('signing' in value) data.signing = value.signing;
  if ('probe' in value) data.probe = value.probe;
  return { data: data as unknown as ConnectionFields };
};

const describePath = (path: readonly PropertyKey[]): string => {
  const [connection, field, ...rest] = path.map(String);
  if (connection === undefined) return '';
  const fieldPath = [field, ...rest].filter((p) => p !== undefined).join('.');
  return `connection "${connection}"${fieldPath ? `, field "${fieldPath}"` : ''}: `;
};

/** One connection's settings, checked and frozen. */
const parseConnection = (name: string, value: unknown, check: FieldCheck): ConnectionConfig => {
  if (!CONNECTION_NAME.test(name)) {
    throw new ConfigError(
      `${VARIABLE}: connection "${name.slice(0, 80)}": the name must be 1-64 characters of letters, digits, '.', '_' or '-'`,
    );
  }
  const typo = unknownField(value, CONNECTION_FIELDS);
  if (typo !== undefined) throw new ConfigError(`${VARIABLE}: connection "${name}", ${typo}`);
  const result = check(value);
  if ('problem' in result) {
    const where = describePath([name, ...result.problem.path]);
    throw new ConfigError(`${VARIABLE}: ${where}${result.problem.message}`);
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
 * Reads `BROKER_CONNECTIONS`, each connection's fields checked by `check`
 * (`connection-schema.ts`'s `parseConnections` checks them with the schema).
 *
 * @throws {ConfigError} naming the connection and the field whose value is missing or malformed.
 * @throws {UnsureOfFields} from {@link plainFields}.
 */
export const parseConnectionsWith = (
  raw: string | undefined,
  check: FieldCheck,
): Map<string, ConnectionConfig> => {
  if (raw === undefined || raw.trim() === '') {
    throw new ConfigError(`${VARIABLE} is required: a JSON object of connection name → settings`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // The parser's own message quotes the input; it is left out on purpose: where it breaks,
    // and what was expected there, are found without it.
    const at = jsonErrorAt(raw);
    throw new ConfigError(
      at
        ? `${VARIABLE} is not valid JSON at line ${at.line}, column ${at.column} (offset ${at.offset}): expected ${at.expected}`
        : `${VARIABLE} is not valid JSON`,
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(`${VARIABLE} must be a JSON object of connection name → settings`);
  }
  const entries = Object.entries(parsed);
  if (entries.length === 0) {
    throw new ConfigError(`${VARIABLE} must configure at least one connection`);
  }
  const connections = new Map<string, ConnectionConfig>();
  for (const [name, value] of entries) connections.set(name, parseConnection(name, value, check));
  return connections;
};
