/**
 * What a caller may ask, checked once for both doors: a direct invoke event, and an HTTP
 * request (route + path + query + body) turned into the same request object first. A typo such
 * as `minvalidity` is refused by either door with 400 `BAD_REQUEST` naming the field, never
 * ignored. The client (client/src/index.ts) applies the same limits before it sends.
 *
 * A valid request is recognised in plain code ({@link plainRequest}); anything else goes to the
 * zod schema (`request-schema.ts`, loaded then), which judges it and whose issue the refusal
 * names. So a cold start's first request loads no schema library (issue 25).
 */
import { BadRequestError, givenName } from '../../lib/errors.js';

export const REQUEST_LIMITS = {
  connectionLength: 200,
  accessTokenLength: 8192,
  maxMinValidity: 1_000_000_000,
} as const;

/** The rule of each field, in the words every refusal uses (zod's own name the type only). */
const RULES: Readonly<Record<string, string>> = {
  action: 'must be "getToken", "invalidate", "status", "warmUp" or "ready"',
  connection: `must be a string of 1 to ${REQUEST_LIMITS.connectionLength} characters`,
  minValidity: `must be a whole number of seconds from 0 to ${REQUEST_LIMITS.maxMinValidity}`,
  accessToken: `must be a string of 1 to ${REQUEST_LIMITS.accessTokenLength} characters`,
};

/** What a caller may ask (`request-schema.ts` holds the schema to the same shapes). */
export type BrokerRequest =
  | { action: 'getToken'; connection: string; minValidity?: number | undefined }
  | { action: 'invalidate'; connection: string; accessToken: string }
  | { action: 'status' }
  | { action: 'warmUp' }
  | { action: 'ready' };
export type Action = BrokerRequest['action'];

const isLength = (value: unknown, max: number): value is string =>
  typeof value === 'string' && value.length >= 1 && value.length <= max;

/** Exactly these keys (`action` among them), none missing. */
const hasKeys = (value: object, required: readonly string[], optional: readonly string[] = []) => {
  const keys = Object.keys(value);
  return (
    required.every((key) => keys.includes(key)) &&
    keys.every((key) => required.includes(key) || optional.includes(key))
  );
};

/**
 * The request `candidate` is, when the schema would accept it as it stands: the same object
 * comes out. Undefined when it is not plainly valid: the schema judges it then.
 * `test/functions/request-check.test.ts` holds the two to the same answers.
 */
export const plainRequest = (candidate: unknown): BrokerRequest | undefined => {
  if (typeof candidate !== 'object' || candidate === null || Array.isArray(candidate)) {
    return undefined;
  }
  const fields = candidate as Record<string, unknown>;
  const { action, connection } = fields;
  switch (action) {
    case 'getToken': {
      if (!hasKeys(candidate, ['action', 'connection'], ['minValidity'])) return undefined;
      if (!isLength(connection, REQUEST_LIMITS.connectionLength)) return undefined;
      if (!('minValidity' in fields)) return { action, connection };
      const { minValidity } = fields;
      if (
        typeof minValidity !== 'number' ||
        !Number.isSafeInteger(minValidity) ||
        minValidity < 0 ||
        minValidity > REQUEST_LIMITS.maxMinValidity
      ) {
        return undefined;
      }
      return { action, connection, minValidity };
    }
    case 'invalidate': {
      const { accessToken } = fields;
      if (!hasKeys(candidate, ['action', 'connection', 'accessToken'])) return undefined;
      if (!isLength(connection, REQUEST_LIMITS.connectionLength)) return undefined;
      if (!isLength(accessToken, REQUEST_LIMITS.accessTokenLength)) return undefined;
      return { action, connection, accessToken };
    }
    case 'status':
    case 'warmUp':
    case 'ready':
      return hasKeys(candidate, ['action']) ? { action } : undefined;
    default:
      return undefined;
  }
};

/** Where a field came from, for the message: `"x"` (invoke), `query parameter "x"`, … */
type Place = (field: string) => string;

const check = async (
  candidate: unknown,
  prefix: string,
  place: Place,
  unknown: Place = place,
): Promise<BrokerRequest> => {
  const plain = plainRequest(candidate);
  if (plain !== undefined) return plain;
  const result = (await import('./request-schema.js')).judgeRequest(candidate);
  if ('data' in result) return result.data;
  const { issue } = result;
  if (issue?.code === 'unrecognized_keys') {
    throw new BadRequestError(`${prefix}: unknown ${unknown(String(issue.keys[0]))}`);
  }
  const field = issue?.path[0];
  if (field === undefined) throw new BadRequestError(`${prefix}: ${issue?.message ?? 'invalid'}`);
  // zod's messages name the expected type, never the received value.
  const rule = RULES[String(field)] ?? issue?.message ?? 'invalid';
  throw new BadRequestError(`${prefix}: ${place(String(field))}: ${rule}`);
};

/** A direct invoke event, e.g. `{ "action": "getToken", "connection": "…" }`. */
export const parseInvokeRequest = (event: unknown): Promise<BrokerRequest> =>
  check(
    event,
    'Invalid direct invoke',
    (field) => givenName(field, '"'),
    (field) => `field ${givenName(field, '"')}`,
  );

/** The parts of an HTTP event the checks read (payload format 2.0). */
export interface HttpRequestParts {
  readonly pathParameters?: Readonly<Record<string, string | undefined>> | undefined;
  readonly queryStringParameters?: Readonly<Record<string, string | undefined>> | undefined;
  /** Parsed JSON for the routes that take a body; the raw text (or nothing) for the others. */
  readonly body?: unknown;
  readonly isBase64Encoded?: boolean | undefined;
}

/** The query parameters each route takes; none for the others. */
const QUERY: Readonly<Partial<Record<Action | 'health', readonly string[]>>> = {
  getToken: ['minValidity'],
};
/** The body fields each route takes; the others take no body. */
const BODY: Readonly<Partial<Record<Action, readonly string[]>>> = {
  invalidate: ['accessToken'],
};

/**
 * A route that takes no body refuses one, as direct invoke refuses an unknown field: nothing,
 * blanks or `{}` pass; a JSON object is refused naming its first field; anything else, saying
 * that the route takes no body.
 */
const checkNoBody = (event: HttpRequestParts, prefix: string) => {
  let body = event.body;
  if (body === undefined || body === null) return;
  if (typeof body === 'string') {
    const text = (
      event.isBase64Encoded ? Buffer.from(body, 'base64').toString('utf8') : body
    ).trim();
    if (text === '') return;
    try {
      body = JSON.parse(text) as unknown;
    } catch {
      body = undefined;
    }
  }
  if (typeof body !== 'object' || body === null || Array.isArray(body)) {
    throw new BadRequestError(`${prefix}: this route takes no body`);
  }
  const [field] = Object.keys(body);
  if (field !== undefined) {
    throw new BadRequestError(`${prefix}: unknown body field ${givenName(field, '"')}`);
  }
};

/**
 * An HTTP request as the same request object a direct invoke sends, checked the same way.
 * `health` has no request object: only its query is checked.
 */
export function parseHttpRequest(action: 'health', event: HttpRequestParts): Promise<undefined>;
export function parseHttpRequest<A extends Action>(
  action: A,
  event: HttpRequestParts,
): Promise<Extract<BrokerRequest, { action: A }>>;
export async function parseHttpRequest(
  action: Action | 'health',
  event: HttpRequestParts,
): Promise<BrokerRequest | undefined> {
  const prefix = 'Invalid request';
  const query = event.queryStringParameters ?? {};
  const allowedQuery = QUERY[action] ?? [];
  const candidate: Record<string, unknown> = {};
  for (const [name, value] of Object.entries(query)) {
    if (!allowedQuery.includes(name)) {
      throw new BadRequestError(`${prefix}: unknown query parameter ${givenName(name, '"')}`);
    }
    // The query is text: a whole number is digits only (no sign, point, exponent or blank).
    if (name === 'minValidity') {
      if (!/^\d{1,10}$/.test(value ?? '')) {
        throw new BadRequestError(`${prefix}: query parameter "minValidity": ${RULES.minValidity}`);
      }
      candidate.minValidity = Number(value);
    }
  }
  const allowedBody = action === 'health' ? undefined : BODY[action];
  if (!allowedBody) checkNoBody(event, prefix);
  if (action === 'health') return undefined;

  if (allowedBody) {
    const body = event.body;
    if (typeof body !== 'object' || body === null || Array.isArray(body)) {
      throw new BadRequestError(
        `${prefix}: the body must be a JSON object with ${allowedBody.map((f) => `"${f}"`).join(', ')}`,
      );
    }
    for (const name of Object.keys(body)) {
      if (!allowedBody.includes(name)) {
        throw new BadRequestError(`${prefix}: unknown body field ${givenName(name, '"')}`);
      }
      candidate[name] = (body as Record<string, unknown>)[name];
    }
  }
  const connectionName = event.pathParameters?.connection;
  return check(
    {
      ...candidate,
      action,
      ...(connectionName === undefined ? {} : { connection: connectionName }),
    },
    prefix,
    (field) =>
      field === 'connection'
        ? 'path parameter "connection"'
        : allowedBody?.includes(field)
          ? `body field "${field}"`
          : `query parameter "${field}"`,
  );
}
