/**
 * `BROKER_LOCAL_SECRETS_FILE`: the secrets the loopback Secrets Manager serves, read from a
 * JSON file of secret ID → value. The file holds client secrets, so nothing here ever quotes
 * it: JSON.parse's own message does (`Unexpected token … "{"clientSecret": "…` ), and is never
 * shown; where the JSON breaks is found by {@link jsonErrorAt} and said as a line and column.
 */
import { readFileSync } from 'node:fs';

const VARIABLE = 'BROKER_LOCAL_SECRETS_FILE';

/** A path or code in one line: control characters replaced, cut at `max`. */
const printable = (value: string, max: number): string => {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: replacing them is the point
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
};

/** Where a JSON text stops being JSON, and what was expected there (never what was found). */
export interface JsonErrorPosition {
  /** 0-based offset in UTF-16 code units, as JSON.parse counts. */
  readonly offset: number;
  /** 1-based. */
  readonly line: number;
  /** 1-based. */
  readonly column: number;
  readonly expected: string;
}

/**
 * The first place where `text` breaks the JSON grammar (RFC 8259), or `undefined` if it
 * follows it. Used only once JSON.parse has refused the text, to say where without quoting it.
 */
export const jsonErrorAt = (text: string): JsonErrorPosition | undefined => {
  let i = 0;
  class Stop {
    constructor(readonly expected: string) {}
  }
  const fail = (expected: string): never => {
    throw new Stop(i >= text.length ? `${expected}, but the text ends` : expected);
  };
  const space = () => {
    while (i < text.length && ' \t\n\r'.includes(text.charAt(i))) i += 1;
  };
  const string = () => {
    i += 1; // the opening quote
    for (;;) {
      if (i >= text.length) fail('a closing double quote');
      const c = text.charCodeAt(i);
      if (c === 0x22) {
        i += 1;
        return;
      }
      if (c < 0x20) fail('no control character inside a string');
      if (c === 0x5c) {
        i += 1;
        const escaped = text.charAt(i);
        if ('"\\/bfnrt'.includes(escaped) && escaped !== '') i += 1;
        else if (escaped === 'u') {
          i += 1;
          for (let hex = 0; hex < 4; hex += 1) {
            if (!/^[0-9a-fA-F]$/.test(text.charAt(i))) fail('four hexadecimal digits after \\u');
            i += 1;
          }
        } else fail('a valid escape sequence');
      } else {
        i += 1;
      }
    }
  };
  const isDigit = (c: string) => c >= '0' && c <= '9' && c !== '';
  const digits = (expected: string) => {
    if (!isDigit(text.charAt(i))) fail(expected);
    while (isDigit(text.charAt(i))) i += 1;
  };
  const number = () => {
    if (text.charAt(i) === '-') i += 1;
    if (text.charAt(i) === '0') i += 1;
    else digits('a digit');
    if (text.charAt(i) === '.') {
      i += 1;
      digits('a digit after the decimal point');
    }
    if (text.charAt(i) === 'e' || text.charAt(i) === 'E') {
      i += 1;
      if (text.charAt(i) === '+' || text.charAt(i) === '-') i += 1;
      digits('a digit in the exponent');
    }
  };
  const value = (): void => {
    space();
    const c = text.charAt(i);
    if (c === '{') {
      i += 1;
      space();
      if (text.charAt(i) === '}') {
        i += 1;
        return;
      }
      for (;;) {
        space();
        if (text.charAt(i) !== '"') fail('a property name in double quotes');
        string();
        space();
        if (text.charAt(i) !== ':') fail("':' after a property name");
        i += 1;
        value();
        space();
        if (text.charAt(i) === ',') i += 1;
        else if (text.charAt(i) === '}') {
          i += 1;
          return;
        } else fail("',' or '}' after a property value");
      }
    }
    if (c === '[') {
      i += 1;
      space();
      if (text.charAt(i) === ']') {
        i += 1;
        return;
      }
      for (;;) {
        value();
        space();
        if (text.charAt(i) === ',') i += 1;
        else if (text.charAt(i) === ']') {
          i += 1;
          return;
        } else fail("',' or ']' after an array element");
      }
    }
    if (c === '"') {
      string();
      return;
    }
    if (c === '-' || isDigit(c)) {
      number();
      return;
    }
    // A literal is checked letter by letter, as JSON.parse does: `nul!` fails at the `!`.
    const literal = ['true', 'false', 'null'].find((word) => word[0] === c);
    if (literal) {
      for (const letter of literal) {
        if (text.charAt(i) !== letter) fail(`'${literal}'`);
        i += 1;
      }
      return;
    }
    fail('a value');
  };
  try {
    value();
    space();
    if (i < text.length) fail('nothing after the JSON value');
    return undefined;
  } catch (stop) {
    if (!(stop instanceof Stop)) throw stop;
    const before = text.slice(0, i);
    const line = before.split('\n').length;
    const column = i - (before.lastIndexOf('\n') + 1) + 1;
    return { offset: i, line, column, expected: stop.expected };
  }
};

/** What a read failure's code means, said without the system's message (which repeats the path). */
const READ_FAILURES: Readonly<Record<string, string>> = {
  ENOENT: 'no such file',
  EACCES: 'not readable (permission denied)',
  EPERM: 'not readable (permission denied)',
  EISDIR: 'a directory, not a file',
  ENOTDIR: 'a path through something that is not a directory',
};

/**
 * The secrets in `path`: each value as Secrets Manager's SecretString (an object is stored as
 * its JSON text).
 *
 * @throws {Error} one line naming the variable, the file and what is wrong (for JSON, the line,
 * column and offset), never any of the file's content.
 */
export const readSecretsFile = (
  path: string,
  read: (path: string) => string = (file) => readFileSync(file, 'utf8'),
): Record<string, string> => {
  const where = `${VARIABLE} ${printable(path, 200)}`;
  let text: string;
  try {
    text = read(path);
  } catch (error) {
    const code = (error as NodeJS.ErrnoException | undefined)?.code;
    const reason = typeof code === 'string' ? (READ_FAILURES[code] ?? 'not readable') : undefined;
    throw new Error(
      reason
        ? `${where}: ${reason} (${printable(code ?? '', 40)})`
        : `${where}: not readable (${(error as Error | undefined)?.name ?? 'unknown error'})`,
    );
  }
  // A byte-order mark (an editor's) is not JSON, but nothing is lost by dropping it.
  if (text.startsWith('\uFEFF')) text = text.slice(1);
  let parsed: unknown;
  try {
    parsed = JSON.parse(text);
  } catch {
    // JSON.parse's message quotes the text around the error: a client secret, often.
    const at = jsonErrorAt(text);
    throw new Error(
      at
        ? `${where}: not valid JSON at line ${at.line}, column ${at.column} (offset ${at.offset}): expected ${at.expected}`
        : `${where}: not valid JSON`,
    );
  }
  if (typeof parsed !== 'object' || parsed === null || Array.isArray(parsed)) {
    throw new Error(
      `${where}: must hold a JSON object of secret ID → value (it holds ${Array.isArray(parsed) ? 'an array' : parsed === null ? 'null' : `a ${typeof parsed}`})`,
    );
  }
  const secrets: Record<string, string> = {};
  for (const [id, value] of Object.entries(parsed)) {
    secrets[id] = typeof value === 'string' ? value : JSON.stringify(value);
  }
  return secrets;
};
