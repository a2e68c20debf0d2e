/**
 * Reading the Open API's answers: plain `Response`s in, typed errors or validated fields out,
 * so that every parser can be tested without a network. No error message ever contains a
 * credential: values the upstream echoes back are redacted before use, and bodies are read
 * only up to a limit.
 */
import { type Clock, systemClock } from '../clock.js';
import {
  printable,
  UpstreamBadResponseError,
  UpstreamRejectedError,
  UpstreamUnavailableError,
} from '../errors.js';
import type { IssuedToken } from '../ports.js';

export const V3_SUCCESS_CODE = '000000';
/** Bodies larger than this are not protocol responses; refuse to buffer them. */
const MAX_BODY_BYTES = 64 * 1024;

export type Step = 'authorize' | 'access-token';
export type Json = Record<string, unknown>;

/** Limits applied while parsing a token response. */
export interface TokenLimits {
  /** Largest accepted `expiresIn`, in seconds. */
  readonly maxLifetimeSeconds: number;
}

/** Values that must never appear in an error message built from upstream text. */
export type Sensitive = readonly string[];

/**
 * Long runs of hex or base64 characters in what the upstream says are masked whatever they
 * are: an upstream that echoes our signature may do so in another case or encoding, or only
 * in part, which the exact values below would miss. Codes and words are far shorter.
 */
const OPAQUE_RUN = /[0-9a-f]{24,}|[0-9a-z+/_-]{32,}={0,2}/gi;

/**
 * Shortest part of a sensitive value that is masked wherever it appears: an upstream may echo a
 * secret URL-encoded, in another case, or cut. Eight characters of a secret say little of it,
 * and words of a message rarely match eight in a row by chance.
 */
const ECHO_PART = 8;

/**
 * Masks every echo of the `sensitive` values in `text`: whole, URL-encoded, in any case, and
 * any run of {@link ECHO_PART} characters or more of them (values shorter than that: whole,
 * in any case); then long opaque runs whatever they are.
 */
/**
 * Lower case, one UTF-16 unit for one: a character whose lower case is longer (`İ` becomes two)
 * is kept, so that an index into the result is an index into `text`.
 */
const lowerInPlace = (text: string): string =>
  Array.from(text.split(''), (unit) => {
    const lower = unit.toLowerCase();
    return lower.length === 1 ? lower : unit;
  }).join('');

const redact = (text: string, sensitive: Sensitive): string => {
  const lower = lowerInPlace(text);
  const masked = new Array<boolean>(text.length).fill(false);
  const mask = (from: number, length: number) => masked.fill(true, from, from + length);
  for (const value of sensitive) {
    if (value.length < 4) continue;
    // Exactly as given, too: a value whose own lower case differs in length is matched whole.
    for (let at = text.indexOf(value); at >= 0; at = text.indexOf(value, at + 1)) {
      mask(at, value.length);
    }
    for (const form of new Set([value, encodeURIComponent(value)].map(lowerInPlace))) {
      if (form.length < ECHO_PART) {
        for (let at = lower.indexOf(form); at >= 0; at = lower.indexOf(form, at + 1)) {
          mask(at, form.length);
        }
        continue;
      }
      const parts = new Set<string>();
      for (let i = 0; i + ECHO_PART <= form.length; i += 1) parts.add(form.slice(i, i + ECHO_PART));
      for (let i = 0; i + ECHO_PART <= lower.length; i += 1) {
        if (parts.has(lower.slice(i, i + ECHO_PART))) mask(i, ECHO_PART);
      }
    }
  }
  let out = '';
  for (let i = 0; i < text.length; i += 1) {
    if (!masked[i]) out += text[i];
    else if (i === 0 || !masked[i - 1]) out += '[redacted]';
  }
  return printable(out.replace(OPAQUE_RUN, '[redacted]'), 200);
};

export const isObject = (value: unknown): value is Json =>
  typeof value === 'object' && value !== null && !Array.isArray(value);

const describeFields = (value: Json): string => {
  const keys = Object.keys(value);
  return keys.length > 0 ? keys.map((k) => printable(k, 40)).join(', ') : 'none';
};

/**
 * Retry-After in seconds. An HTTP date is an epoch the upstream states: it is compared with the
 * wall clock once, here, and travels on as a duration.
 */
const retryAfterSeconds = (response: Response, clock: Pick<Clock, 'now'>): number | undefined => {
  const header = response.headers.get('retry-after');
  if (header === null) return undefined;
  const seconds = Number(header);
  if (Number.isFinite(seconds) && seconds >= 0) return Math.ceil(seconds);
  const date = Date.parse(header);
  return Number.isNaN(date) ? undefined : Math.max(0, Math.ceil((date - clock.now()) / 1000));
};

/** Upstream error fields, when a body carries them (envelope or flat). */
const upstreamErrorFields = (body: unknown, sensitive: Sensitive) => {
  if (!isObject(body)) return { code: undefined, message: undefined };
  const code = body.code ?? body.error ?? body.errorCode;
  const message = body.message ?? body.error_description ?? body.msg;
  return {
    code:
      typeof code === 'string' || typeof code === 'number'
        ? redact(String(code), sensitive)
        : undefined,
    message: typeof message === 'string' ? redact(message, sensitive) : undefined,
  };
};

/**
 * The body as text, read only up to MAX_BODY_BYTES whatever `content-length` said (or did not
 * say: a chunked body declares nothing), so a hostile upstream cannot make us buffer it all.
 */
const readCapped = async (response: Response, step: Step): Promise<string> => {
  if (!response.body) return '';
  const chunks: Uint8Array[] = [];
  let size = 0;
  for await (const chunk of response.body) {
    size += chunk.byteLength;
    if (size > MAX_BODY_BYTES) {
      await response.body.cancel().catch(() => undefined);
      throw new UpstreamBadResponseError(
        `Open API ${step} response is too large (over ${MAX_BODY_BYTES} bytes)`,
      );
    }
    chunks.push(chunk);
  }
  return Buffer.concat(chunks).toString('utf8');
};

/**
 * Reads a response body as JSON, turning transport-level outcomes into typed errors:
 * 429/5xx → unavailable, 3xx (a redirect, never followed) and other non-2xx → rejected,
 * non-JSON 2xx → bad response.
 */
export const readJsonBody = async (
  response: Response,
  step: Step,
  sensitive: Sensitive = [],
  clock: Pick<Clock, 'now'> = systemClock,
): Promise<unknown> => {
  const { status } = response;
  if (status === 429 || status >= 500) {
    await response.body?.cancel();
    const retryAfter = retryAfterSeconds(response, clock);
    throw new UpstreamUnavailableError(`Open API ${step} answered HTTP ${status}`, {
      retryAfterSeconds: retryAfter,
      upstreamStatus: status,
      upstreamRetryAfterSeconds: retryAfter,
      // A token request answered 5xx (a gateway's 502 or 504, say) may have been processed
      // behind it: only a 429 (and a 501/505, which no server processes) says it was not.
      outcomeUnknown: step === 'access-token' && status >= 500 && status !== 501 && status !== 505,
    });
  }
  if (status >= 300 && status < 400) {
    // Not followed (the requests say `redirect: 'manual'`), nor its Location repeated: the
    // request was not processed here, and a moved upstream is the operator's to check.
    await response.body?.cancel();
    const notFollowed = `HTTP ${status} (a redirect, not followed: check the connection's baseUrl)`;
    // A 303 (and a 302, by old habit) answers a POST that was processed, pointing at its result:
    // the token may have been issued there, an answer that cannot be read (its outcome
    // unknown). 301, 307 and 308 say the request was not processed here.
    if (step === 'access-token' && (status === 302 || status === 303)) {
      throw new UpstreamBadResponseError(`Open API ${step} answered ${notFollowed}`, {
        outcomeUnknown: true,
      });
    }
    throw new UpstreamRejectedError(`Open API rejected the ${step} request: ${notFollowed}`, {
      upstreamStatus: status,
    });
  }
  const declared = Number(response.headers.get('content-length') ?? '0');
  if (declared > MAX_BODY_BYTES) {
    await response.body?.cancel();
    throw new UpstreamBadResponseError(
      `Open API ${step} response is too large (${declared} bytes)`,
    );
  }
  const text = await readCapped(response, step);
  let body: unknown;
  let isJson = true;
  try {
    body = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the body, which may hold a token: say only what it was.
    isJson = false;
  }
  if (status < 200 || status >= 300) {
    const { code, message } = upstreamErrorFields(body, sensitive);
    const said = [code && `code ${code}`, message].filter(Boolean).join(': ');
    throw new UpstreamRejectedError(
      `Open API rejected the ${step} request: HTTP ${status}${said ? `, ${said}` : ''}`,
      { upstreamStatus: status, upstreamCode: code, upstreamMessage: message },
    );
  }
  if (!isJson) {
    const type = printable(response.headers.get('content-type') ?? 'none', 60);
    throw new UpstreamBadResponseError(
      `Open API ${step} response is not JSON (HTTP ${status}, content-type ${type}, ${text.length} characters)`,
    );
  }
  return body;
};

/**
 * Checks a v3 envelope and returns its `data`. The provider's error answers may carry `code` as
 * a number (`0`, `100401`); success is only ever the string `000000`.
 */
export const unwrapV3Envelope = (body: unknown, step: Step, sensitive: Sensitive): Json => {
  if (
    !isObject(body) ||
    !(
      typeof body.code === 'string' ||
      (typeof body.code === 'number' && Number.isFinite(body.code))
    )
  ) {
    throw new UpstreamBadResponseError(
      `Open API ${step} response is not a v3 envelope: expected a string or number "code" (fields present: ${isObject(body) ? describeFields(body) : typeof body})`,
    );
  }
  if (body.code !== V3_SUCCESS_CODE) {
    const { code, message } = upstreamErrorFields(body, sensitive);
    throw new UpstreamRejectedError(
      `Open API rejected the ${step} request: code ${code}${message ? `: ${message}` : ''}`,
      { upstreamCode: code, upstreamMessage: message },
    );
  }
  if (!isObject(body.data)) {
    throw new UpstreamBadResponseError(
      `Open API ${step} envelope has code ${V3_SUCCESS_CODE} but no "data" object`,
    );
  }
  return body.data;
};

export const authorizationCode = (payload: Json, field: string, where: string): string => {
  const code = payload[field];
  if (typeof code !== 'string' || code.length === 0) {
    throw new UpstreamBadResponseError(
      `Open API authorize response has no authorization code in ${where}.${field} (fields present: ${describeFields(payload)}); ${
        where === 'data'
          ? `the provider's documented v3 example has no code field while working clients read data.code: set the connection's "codeField" (default "code") to the field your provider sends`
          : 'the legacy variant carries it in "code"'
      }`,
    );
  }
  return code;
};

/** Validates the token fields shared by both variants (the v3 `data`, the legacy body). */
export const tokenFromPayload = (
  payload: Json,
  limits: TokenLimits,
): Omit<IssuedToken, 'requestedAt'> => {
  const { accessToken, expiresIn, timestamp } = payload;
  if (typeof accessToken !== 'string' || accessToken.length === 0) {
    throw new UpstreamBadResponseError(
      `Open API access-token response has no string "accessToken" (fields present: ${describeFields(payload)})`,
    );
  }
  if (typeof expiresIn !== 'number' || !Number.isInteger(expiresIn) || expiresIn <= 0) {
    throw new UpstreamBadResponseError(
      `Open API access-token response has no positive whole "expiresIn" (got ${typeof expiresIn === 'number' ? expiresIn : typeof expiresIn})`,
    );
  }
  if (expiresIn > limits.maxLifetimeSeconds) {
    throw new UpstreamBadResponseError(
      `Open API access-token response has expiresIn ${expiresIn}s, above the accepted maximum of ${limits.maxLifetimeSeconds}s (BROKER_MAX_TOKEN_LIFETIME_SECONDS)`,
    );
  }
  return {
    accessToken,
    expiresIn,
    upstreamTimestamp:
      typeof timestamp === 'number' && Number.isFinite(timestamp) ? timestamp : undefined,
  };
};
