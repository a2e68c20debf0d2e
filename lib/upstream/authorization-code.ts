/**
 * The authorization code as the upstream client hands it to the core: sealed, so that only
 * this client reads it back, and shown as `[authorization code]` wherever it is printed,
 * logged or serialised by mistake (a template string, `JSON.stringify`, `util.inspect`).
 */
import { InternalError } from '../errors.js';
import type { AuthorizationCode } from '../ports.js';

const SHOWN = '[authorization code]';

class SealedCode {
  readonly #value: string;

  constructor(value: string) {
    this.#value = value;
    Object.freeze(this);
  }

  static open(code: unknown): string | undefined {
    return code instanceof SealedCode ? code.#value : undefined;
  }

  toString(): string {
    return SHOWN;
  }

  toJSON(): string {
    return SHOWN;
  }

  [Symbol.for('nodejs.util.inspect.custom')](): string {
    return SHOWN;
  }
}

/** Seals a code the upstream handed out. */
export const sealCode = (value: string): AuthorizationCode =>
  new SealedCode(value) as unknown as AuthorizationCode;

/**
 * The code inside, for the access-token request.
 *
 * @throws {InternalError} when `code` was not sealed here (a programming error).
 */
export const openCode = (code: AuthorizationCode): string => {
  const value = SealedCode.open(code);
  if (value === undefined) {
    throw new InternalError('The authorization code was not made by the Open API client');
  }
  return value;
};
