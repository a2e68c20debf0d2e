/**
 * `BROKER_LOCAL_SECRETS_FILE`: a file that holds client secrets is refused, when it must be,
 * with where and why, and none of its content. (The process-level check, `npm start` with such
 * a file, is in local-start.test.ts.)
 */
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { afterAll, describe, expect, it } from 'vitest';
import { jsonErrorAt, readSecretsFile } from '../local/secrets-file.js';

const SECRET = 'sk-live-0123456789abcdef';
const dir = mkdtempSync(join(tmpdir(), 'secrets-file-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));
const file = (name: string, text: string) => {
  const path = join(dir, name);
  writeFileSync(path, text);
  return path;
};
const refusal = (path: string) => {
  try {
    readSecretsFile(path);
  } catch (error) {
    return (error as Error).message;
  }
  throw new Error('expected a refusal');
};

describe('Function: readSecretsFile', () => {
  it('refuses a malformed file with its line, column and offset, and none of its content', () => {
    // A trailing comma after the secret: V8's SyntaxError quotes the text around it.
    const path = file(
      'trailing.json',
      `{\n  "s1": {"clientId": "a", "clientSecret": "${SECRET}",}\n}\n`,
    );
    const message = refusal(path);
    expect(message).toBe(
      `BROKER_LOCAL_SECRETS_FILE ${path}: not valid JSON at line 2, column 70 (offset 71): expected a property name in double quotes`,
    );
    expect(message).not.toContain(SECRET);
  });

  it('refuses a missing file, a directory and a file that is not an object, in one line each', () => {
    const missing = join(dir, 'missing.json');
    expect(refusal(missing)).toBe(`BROKER_LOCAL_SECRETS_FILE ${missing}: no such file (ENOENT)`);
    expect(refusal(dir)).toBe(`BROKER_LOCAL_SECRETS_FILE ${dir}: a directory, not a file (EISDIR)`);
    const array = file('array.json', JSON.stringify([SECRET]));
    expect(refusal(array)).toBe(
      `BROKER_LOCAL_SECRETS_FILE ${array}: must hold a JSON object of secret ID → value (it holds an array)`,
    );
  });

  it('reads objects as their JSON text, strings as they are, past a byte-order mark', () => {
    const path = file(
      'good.json',
      `\uFEFF${JSON.stringify({ a: { clientId: 'x', clientSecret: SECRET }, b: 'plain' })}`,
    );
    expect(readSecretsFile(path)).toEqual({
      a: JSON.stringify({ clientId: 'x', clientSecret: SECRET }),
      b: 'plain',
    });
  });
});

describe('Function: jsonErrorAt', () => {
  /** V8's own offset, where its message gives one. */
  const v8Offset = (text: string): number | 'valid' | undefined => {
    try {
      JSON.parse(text);
      return 'valid';
    } catch (error) {
      const match = /at position (\d+)/.exec((error as Error).message);
      return match ? Number(match[1]) : undefined;
    }
  };

  it('agrees with JSON.parse on what is JSON, and on the offset wherever V8 gives one', () => {
    // Near-JSON texts: JSON values with a few characters inserted, deleted or replaced.
    const nearJson = fc
      .tuple(
        fc.json(),
        fc.array(
          fc.tuple(
            fc.nat(),
            fc.nat(3),
            fc.constantFrom(...'{}[]",:\\ \n-0e.tfnu\u0001x'.split('')),
          ),
          { maxLength: 3 },
        ),
      )
      .map(([text, edits]) =>
        edits.reduce((t, [at, del, ch]) => {
          const i = at % (t.length + 1);
          return t.slice(0, i) + ch + t.slice(i + del);
        }, text),
      );
    fc.assert(
      fc.property(nearJson, (text) => {
        const expected = v8Offset(text);
        const found = jsonErrorAt(text);
        if (expected === 'valid') expect(found).toBeUndefined();
        else {
          expect(found).toBeDefined();
          if (expected !== undefined) expect(found?.offset).toBe(expected);
        }
      }),
      { numRuns: 2000 },
    );
  });

  it('counts lines and columns from 1, and says when the text ends early', () => {
    expect(jsonErrorAt('{\n "a": 1,\n "b" 2}')).toEqual({
      offset: 16,
      line: 3,
      column: 6,
      expected: "':' after a property name",
    });
    expect(jsonErrorAt('{"a": "unterminated')).toMatchObject({
      offset: 19,
      expected: 'a closing double quote, but the text ends',
    });
    expect(jsonErrorAt('')).toMatchObject({ offset: 0, expected: 'a value, but the text ends' });
  });
});
