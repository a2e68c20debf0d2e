import * as z from 'zod/mini';
import { ConfigError, printable } from './errors.js';
import './schema.js';
import {
  DEFAULT_SIGNING,
  SIGNING_ENCODINGS,
  type SigningConfig,
  type SigningEncoding,
  templateProblem,
} from './upstream/signing.js';

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
   * connection signs with {@link DEFAULT_SIGNING}, as a configured one does.
   */
  readonly signing?: SigningConfig | false;
}

/** The whole, validated, frozen configuration. Built once per container by {@link loadConfig}. */
export interface BrokerConfig {
  readonly tableName: string;
  readonly connections: ReadonlyMap<string, ConnectionConfig>;
  /** Validity a token must still have when a caller gives no `minValidity`. */
  readonly defaultMinValiditySeconds: number;
  /** The warm-up re-issues tokens that expire within this window. */
  readonly refreshWindowSeconds: number;
  /** How long a token held in memory is served before DynamoDB is read again. */
  readonly memoryRecheckSeconds: number;
  /** Upper bound accepted for the upstream `expiresIn`; larger values are rejected. */
  readonly maxTokenLifetimeSeconds: number;
  /** Time limit of one upstream HTTP request (further bounded by the Lambda deadline). */
  readonly upstreamTimeoutMs: number;
  /**
   * Connection and request time limit of each AWS call (DynamoDB, Secrets Manager, KMS), per
   * attempt: a stalled connection fails in this time instead of the SDK's defaults (none).
   */
  readonly awsTimeoutMs: number;
  /**
   * A reported token younger than this is not dropped: however many callers report tokens,
   * a connection is re-issued at most once per this many seconds on their word.
   */
  readonly invalidateMinAgeSeconds: number;
  /**
   * A token issued on a caller's word (a forcing `minValidity`, an invalidate report) is not
   * replaced on a caller's word before it is this old; undefined: its refresh window (the
   * configured window, at most half its lifetime). So no caller replaces tokens more than once
   * per window.
   */
  readonly forcedMinAgeSeconds: number | undefined;
  /**
   * How long past its last confirmation a token in memory may still be served while DynamoDB
   * cannot be read. 0 keeps the fleet guarantee (a container cut off from DynamoDB cannot know
   * that another replaced, and so revoked, its token); more trades it for availability.
   */
  readonly storeOutageGraceSeconds: number;
  /** How long a secret read from Secrets Manager is reused. */
  readonly secretMaxAgeSeconds: number;
  /** While Secrets Manager fails, the last secret read is used for at most this long. */
  readonly secretStaleMaxSeconds: number;
  /** KMS key (id, ARN or alias) for application-level token encryption; undefined: none. */
  readonly kmsKeyId: string | undefined;
}

export type Env = Readonly<Record<string, string | undefined>>;

const CONNECTION_NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;
const TABLE_NAME = /^[A-Za-z0-9_.-]{3,255}$/;
const FIELD_NAME = /^[A-Za-z_][A-Za-z0-9_]{0,63}$/;

const isLoopbackHost = (hostname: string): boolean =>
  hostname === 'localhost' || hostname === '[::1]' || /^127(\.\d{1,3}){3}$/.test(hostname);

const baseUrlSchema = z.pipe(
  z.string(),
  z.transform((value: string, ctx) => {
    const fail = (message: string) => {
      ctx.issues.push({ code: 'custom', message, input: value });
      return z.NEVER;
    };
    let url: URL;
    try {
      url = new URL(value);
    } catch {
      return fail('must be an absolute URL');
    }
    if (url.protocol !== 'https:' && !(url.protocol === 'http:' && isLoopbackHost(url.hostname))) {
      return fail('must use https:// (plain http:// is accepted only for loopback hosts)');
    }
    if (url.search || url.hash || url.username || url.password) {
      return fail('must not carry credentials, a query or a fragment');
    }
    return `${url.origin}${url.pathname.replace(/\/+$/, '')}`;
  }),
);

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
  // Checked by `parseSigning`, which names the exact sub-field and problem.
  signing: z.optional(z.unknown()),
});

/** The fields a connection takes, for the message about one it does not. */
const CONNECTION_FIELDS = Object.keys(connectionSchema.shape);

/** Edit distance of two short strings (insertions, deletions, substitutions). */
const distance = (a: string, b: string): number => {
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
 * The first field of a connection that is not one it takes, with the known field it is most
 * likely a typo of: a typo in a required field (`secretID`) is named as such, not reported as
 * the required field missing.
 */
const unknownField = (value: unknown): string | undefined => {
  if (typeof value !== 'object' || value === null || Array.isArray(value)) return undefined;
  const key = Object.keys(value).find((k) => !CONNECTION_FIELDS.includes(k));
  if (key === undefined) return undefined;
  const near = CONNECTION_FIELDS.find(
    (known) => known.toLowerCase() === key.toLowerCase() || distance(known, key) <= 2,
  );
  return `field "${printable(key, 40)}": unknown field${near ? ` (did you mean "${near}"?)` : ''}; known: ${CONNECTION_FIELDS.join(', ')}`;
};

/** A problem in a connection's settings: the field (dotted path) and what is wrong with it. */
class FieldProblem {
  constructor(
    readonly field: string,
    readonly message: string,
  ) {}
}

/** The `signing` field: `false`, or `{ stringToSign?, encoding? }` over {@link DEFAULT_SIGNING}. */
const parseSigning = (value: unknown): SigningConfig | false => {
  if (value === undefined) return DEFAULT_SIGNING;
  if (value === false) return false;
  if (typeof value !== 'object' || value === null || Array.isArray(value)) {
    throw new FieldProblem(
      'signing',
      'must be false (no signing) or an object { "stringToSign"?, "encoding"? }',
    );
  }
  const { stringToSign = DEFAULT_SIGNING.stringToSign, encoding = DEFAULT_SIGNING.encoding } =
    value as Record<string, unknown>;
  const unknown = Object.keys(value).find((key) => key !== 'stringToSign' && key !== 'encoding');
  if (unknown !== undefined) {
    throw new FieldProblem(
      `signing.${printable(unknown, 40)}`,
      'unknown field (known: stringToSign, encoding)',
    );
  }
  if (typeof stringToSign !== 'string') {
    throw new FieldProblem('signing.stringToSign', 'must be a string template');
  }
  const problem = templateProblem(stringToSign);
  if (problem !== undefined) throw new FieldProblem('signing.stringToSign', problem);
  if (!(SIGNING_ENCODINGS as readonly unknown[]).includes(encoding)) {
    throw new FieldProblem('signing.encoding', 'must be "hex" or "base64"');
  }
  return Object.freeze({ stringToSign, encoding: encoding as SigningEncoding });
};

const describePath = (path: readonly PropertyKey[]): string => {
  const [connection, field, ...rest] = path.map(String);
  if (connection === undefined) return '';
  const fieldPath = [field, ...rest].filter((p) => p !== undefined).join('.');
  return `connection "${connection}"${fieldPath ? `, field "${fieldPath}"` : ''}: `;
};

const parseConnections = (raw: string | undefined): Map<string, ConnectionConfig> => {
  const variable = 'BROKER_CONNECTIONS';
  if (raw === undefined || raw.trim() === '') {
    throw new ConfigError(`${variable} is required: a JSON object of connection name → settings`);
  }
  let parsed: unknown;
  try {
    parsed = JSON.parse(raw);
  } catch {
    // The parser's own message quotes the input; it is left out on purpose.
    throw new ConfigError(`${variable} is not valid JSON`);
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new ConfigError(`${variable} must be a JSON object of connection name → settings`);
  }
  const entries = Object.entries(parsed);
  if (entries.length === 0) {
    throw new ConfigError(`${variable} must configure at least one connection`);
  }
  const connections = new Map<string, ConnectionConfig>();
  for (const [name, value] of entries) {
    if (!CONNECTION_NAME.test(name)) {
      throw new ConfigError(
        `${variable}: connection "${name.slice(0, 80)}": the name must be 1-64 characters of letters, digits, '.', '_' or '-'`,
      );
    }
    const typo = unknownField(value);
    if (typo !== undefined) throw new ConfigError(`${variable}: connection "${name}", ${typo}`);
    const result = connectionSchema.safeParse(value);
    if (!result.success) {
      const issue = result.error.issues[0];
      const where = describePath([name, ...(issue?.path ?? [])]);
      throw new ConfigError(`${variable}: ${where}${issue?.message ?? 'invalid'}`);
    }
    const { variant, baseUrl, secretId, callers, forceCallers, codeField, revokesOnReissue } =
      result.data;
    for (const [field, present] of [
      ['codeField', codeField !== undefined],
      ['signing', result.data.signing !== undefined],
    ] as const) {
      if (present && variant !== 'v3') {
        throw new ConfigError(
          `${variable}: connection "${name}", field "${field}": only applies to variant "v3"`,
        );
      }
    }
    let signing: SigningConfig | false;
    try {
      signing = variant === 'v3' ? parseSigning(result.data.signing) : false;
    } catch (error) {
      if (!(error instanceof FieldProblem)) throw error;
      throw new ConfigError(
        `${variable}: connection "${name}", field "${error.field}": ${error.message}`,
      );
    }
    connections.set(
      name,
      Object.freeze({
        name,
        variant,
        baseUrl,
        secretId,
        callers: callers ? Object.freeze([...callers]) : undefined,
        forceCallers: forceCallers ? Object.freeze([...forceCallers]) : undefined,
        codeField: codeField ?? 'code',
        revokesOnReissue: revokesOnReissue ?? true,
        signing,
      }),
    );
  }
  return connections;
};

const integer = (env: Env, variable: string, fallback: number, min: number, max: number) => {
  const raw = env[variable];
  if (raw === undefined || raw.trim() === '') return fallback;
  const value = Number(raw);
  if (!Number.isInteger(value) || value < min || value > max) {
    throw new ConfigError(`${variable} must be a whole number from ${min} to ${max}`);
  }
  return value;
};

const kmsKeyId = (raw: string | undefined): string | undefined => {
  const value = raw?.trim();
  if (!value) return undefined;
  if (
    !/^(arn:aws[a-z-]*:kms:[a-z0-9-]+:\d{12}:(key|alias)\/[A-Za-z0-9/_+=,.@-]+|alias\/[A-Za-z0-9/_-]+|[0-9a-f-]{36}|mrk-[0-9a-f]{32})$/.test(
      value,
    )
  ) {
    throw new ConfigError(
      'BROKER_KMS_KEY_ID must be a KMS key id, key ARN, alias name or alias ARN',
    );
  }
  return value;
};

/**
 * Reads and validates the broker's configuration from the environment, once, at cold start.
 *
 * @throws {ConfigError} naming the variable (and, for `BROKER_CONNECTIONS`, the connection and
 *   the field) whose value is missing or malformed.
 */
export const loadConfig = (env: Env): BrokerConfig => {
  const tableName = env.BROKER_TABLE_NAME?.trim();
  if (!tableName) throw new ConfigError('BROKER_TABLE_NAME is required');
  if (!TABLE_NAME.test(tableName)) {
    throw new ConfigError('BROKER_TABLE_NAME is not a valid DynamoDB table name');
  }
  const connections = parseConnections(env.BROKER_CONNECTIONS);
  const day = 86_400;
  const maxTokenLifetimeSeconds = integer(
    env,
    'BROKER_MAX_TOKEN_LIFETIME_SECONDS',
    30 * day,
    60,
    365 * day,
  );
  const refreshWindowSeconds = integer(env, 'BROKER_REFRESH_WINDOW_SECONDS', 600, 0, day);
  const defaultMinValiditySeconds = integer(env, 'BROKER_DEFAULT_MIN_VALIDITY_SECONDS', 60, 0, day);
  if (refreshWindowSeconds >= maxTokenLifetimeSeconds) {
    // A window as long as the lifetime would re-issue on every warm-up, forever.
    throw new ConfigError(
      'BROKER_REFRESH_WINDOW_SECONDS must be shorter than BROKER_MAX_TOKEN_LIFETIME_SECONDS',
    );
  }
  return Object.freeze({
    tableName,
    connections,
    defaultMinValiditySeconds,
    refreshWindowSeconds,
    // At most 100 s: the 100 ms margin between a reader's proof and a POST then covers a 0.1 %
    // rate difference between two containers' clocks (docs/protocol.md, assumptions).
    memoryRecheckSeconds: integer(env, 'BROKER_MEMORY_RECHECK_SECONDS', 5, 0, 100),
    maxTokenLifetimeSeconds,
    upstreamTimeoutMs: integer(env, 'BROKER_UPSTREAM_TIMEOUT_MS', 5000, 100, 60_000),
    awsTimeoutMs: integer(env, 'BROKER_AWS_TIMEOUT_MS', 1000, 50, 30_000),
    invalidateMinAgeSeconds: integer(env, 'BROKER_INVALIDATE_MIN_AGE_SECONDS', 2, 0, 3600),
    forcedMinAgeSeconds: env.BROKER_FORCED_MIN_AGE_SECONDS?.trim()
      ? integer(env, 'BROKER_FORCED_MIN_AGE_SECONDS', 0, 0, day)
      : undefined,
    storeOutageGraceSeconds: integer(env, 'BROKER_STORE_OUTAGE_GRACE_SECONDS', 0, 0, day),
    secretMaxAgeSeconds: integer(env, 'BROKER_SECRET_MAX_AGE_SECONDS', 300, 0, day),
    secretStaleMaxSeconds: integer(env, 'BROKER_SECRET_STALE_MAX_SECONDS', 3600, 0, 7 * day),
    kmsKeyId: kmsKeyId(env.BROKER_KMS_KEY_ID),
  });
};
