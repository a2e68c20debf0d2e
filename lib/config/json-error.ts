/**
 * Where a JSON text breaks, said without quoting it: JSON.parse's own message quotes the text
 * around the error (`Unexpected token … "{"clientSecret": "…`), and the texts read here may hold
 * secrets (`BROKER_LOCAL_SECRETS_FILE`) or are configuration shown in logs
 * (`BROKER_CONNECTIONS`).
 */

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
