/** A connection's `signing` field: how its v3 access-token requests are signed, if at all. */
import { printable } from '../errors.js';
import {
  DEFAULT_SIGNING,
  SIGNING_ENCODINGS,
  type SigningConfig,
  type SigningEncoding,
  templateProblem,
} from '../upstream/signing.js';

/** A problem in a connection's settings: the field (dotted path) and what is wrong with it. */
export class FieldProblem {
  constructor(
    readonly field: string,
    readonly message: string,
  ) {}
}

/**
 * The `signing` field: `false`, or `{ stringToSign?, encoding? }` over {@link DEFAULT_SIGNING}.
 *
 * @throws {FieldProblem} naming the exact sub-field and what is wrong with it.
 */
export const parseSigning = (value: unknown): SigningConfig | false => {
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
