/**
 * Request signing for the Open API's "Strict Access Token Mode" (v3 access-token requests).
 *
 * In that mode every token request carries `X-Timestamp` (Unix seconds) and `X-Signature`, an
 * HMAC-SHA256 keyed with the client secret over a string built from the POST body. The provider
 * does not publish the exact string-to-sign, so it is a template (connection field `signing`):
 * `{params}` (body fields sorted by key, `key=value` joined by `&`), `{timestamp}` and `{body}`.
 *
 * Pure and dependency-free (node:crypto only): the template is validated once at cold start,
 * and nothing here logs. The signature and the string-to-sign are as sensitive as the secret
 * for a request's lifetime; they are never put in an error message.
 */
import { createHmac } from 'node:crypto';

export type SigningEncoding = 'hex' | 'base64';

/** How a connection signs its v3 access-token requests. */
export interface SigningConfig {
  /** Template of the string to sign; see {@link SIGNING_PLACEHOLDERS}. */
  readonly stringToSign: string;
  readonly encoding: SigningEncoding;
}

/** The scheme of the provider predecessor's public clients, used when a connection says nothing. */
export const DEFAULT_SIGNING: SigningConfig = Object.freeze({
  stringToSign: '{params}',
  encoding: 'hex',
});

export const SIGNING_ENCODINGS: readonly SigningEncoding[] = ['hex', 'base64'];
export const SIGNING_PLACEHOLDERS = ['params', 'timestamp', 'body'] as const;
type Placeholder = (typeof SIGNING_PLACEHOLDERS)[number];

export const TIMESTAMP_HEADER = 'x-timestamp';
export const SIGNATURE_HEADER = 'x-signature';

// Anything in braces is a placeholder, so that a typo such as `{param}` or `{ params }` is a
// config error rather than literal text that silently breaks every signature.
const PLACEHOLDER = /\{([^{}]*)\}/g;

const isPlaceholder = (name: string): name is Placeholder =>
  (SIGNING_PLACEHOLDERS as readonly string[]).includes(name);

/**
 * Checks a `stringToSign` template.
 *
 * @returns a message saying what is wrong, or `undefined` when the template is usable.
 */
export const templateProblem = (template: string): string | undefined => {
  if (template.length === 0) return 'must not be empty';
  for (const [, name = ''] of template.matchAll(PLACEHOLDER)) {
    if (!isPlaceholder(name)) {
      const shown = name.length > 20 ? `${name.slice(0, 20)}…` : name;
      return `unknown placeholder "{${shown}}" (known: ${SIGNING_PLACEHOLDERS.map((p) => `{${p}}`).join(', ')})`;
    }
  }
  return undefined;
};

const byteOrder = (a: string, b: string): number => Buffer.compare(Buffer.from(a), Buffer.from(b));

/** A body value as sent: strings unquoted, anything else as its JSON text. */
const sentValue = (value: unknown): string =>
  typeof value === 'string' ? value : (JSON.stringify(value) ?? '');

/**
 * `{params}`: the body's top-level fields sorted by key in byte (UTF-8) order, each as
 * `key=value` with the value as sent (no quoting, no URL-encoding), joined by `&`.
 */
export const paramsString = (body: Readonly<Record<string, unknown>>): string =>
  Object.keys(body)
    // JSON.stringify leaves undefined fields out of the body; the string-to-sign does too.
    .filter((key) => body[key] !== undefined)
    .sort(byteOrder)
    .map((key) => `${key}=${sentValue(body[key])}`)
    .join('&');

/** What one signed request is made of. */
export interface SigningInput {
  /** The parsed POST body (its top-level fields make `{params}`). */
  readonly body: Readonly<Record<string, unknown>>;
  /** The exact JSON text sent as the body (`{body}`). */
  readonly bodyText: string;
  /** The `X-Timestamp` value (`{timestamp}`). */
  readonly timestamp: string;
}

/** Fills the template in one pass: a value that contains a placeholder is not expanded again. */
export const stringToSign = (template: string, input: SigningInput): string =>
  template.replace(PLACEHOLDER, (match, name: string) => {
    switch (name) {
      case 'params':
        return paramsString(input.body);
      case 'timestamp':
        return input.timestamp;
      case 'body':
        return input.bodyText;
      default:
        // Validated at cold start; a template built in code gets the same check here.
        throw new TypeError(`Unknown signing placeholder ${match.slice(0, 24)}`);
    }
  });

/** HMAC-SHA256 of the filled template, keyed with the client secret (both UTF-8). */
export const signature = (
  clientSecret: string,
  config: SigningConfig,
  input: SigningInput,
): string =>
  createHmac('sha256', Buffer.from(clientSecret, 'utf8'))
    .update(Buffer.from(stringToSign(config.stringToSign, input), 'utf8'))
    .digest(config.encoding);

/** The headers of one signed request. `nowMs` is the clock of that attempt. */
export const signingHeaders = (
  clientSecret: string,
  config: SigningConfig,
  request: Omit<SigningInput, 'timestamp'>,
  nowMs: number,
): { readonly 'x-timestamp': string; readonly 'x-signature': string } => {
  const timestamp = String(Math.floor(nowMs / 1000));
  return {
    [TIMESTAMP_HEADER]: timestamp,
    [SIGNATURE_HEADER]: signature(clientSecret, config, { ...request, timestamp }),
  };
};

/** Describes a connection's scheme for an operator: the settings, never a value. */
export const describeSigning = (config: SigningConfig): string =>
  `stringToSign ${JSON.stringify(config.stringToSign)}, encoding "${config.encoding}"`;
