/**
 * A connection's fields as a zod schema: the judge of every value the plain check
 * (`connections.ts`, `plainFields`) is unsure of, with the messages that name the field and the
 * problem. Loaded at cold start only when the plain check was unsure (issue 25).
 */
import * as z from 'zod/mini';
import '../schema.js';
import { normaliseBaseUrl } from './base-url.js';
import {
  CONNECTION_FIELDS,
  type ConnectionConfig,
  FIELD_NAME,
  type FieldCheck,
  parseConnectionsWith,
} from './connections.js';

const nonEmpty = (message: string) => z.string().check(z.trim(), z.minLength(1, message));

/** An absolute `https://` URL …, normalised (`normaliseBaseUrl`). */
const baseUrlSchema = z.pipe(
  z.string(),
  z.transform((value: string, ctx) => {
    const result = normaliseBaseUrl(value);
    if ('url' in result) return result.url;
    ctx.issues.push({ code: 'custom', message: result.problem, input: value });
    return z.NEVER;
  }),
);

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

// The plain check's list of fields and the schema's are one list.
if (Object.keys(connectionSchema.shape).join() !== CONNECTION_FIELDS.join()) {
  throw new Error('connection-schema.ts: the schema and CONNECTION_FIELDS differ');
}

/** A connection's fields as the schema judges them. */
export const schemaFields: FieldCheck = (value) => {
  const result = connectionSchema.safeParse(value);
  if (result.success) return { data: result.data };
  const issue = result.error.issues[0];
  return { problem: { path: issue?.path ?? [], message: issue?.message ?? 'invalid' } };
};

/**
 * Reads `BROKER_CONNECTIONS`, every field judged by the schema.
 *
 * @throws {ConfigError} naming the connection and the field whose value is missing or malformed.
 */
export const parseConnections = (raw: string | undefined): Map<string, ConnectionConfig> =>
  parseConnectionsWith(raw, schemaFields);
