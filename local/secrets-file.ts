/**
 * `BROKER_LOCAL_SECRETS_FILE`: the secrets the loopback Secrets Manager serves, read from a
 * JSON file of secret ID → value. The file holds client secrets, so nothing here ever quotes
 * it: JSON.parse's own message does (`Unexpected token … "{"clientSecret": "…` ), and is never
 * shown; where the JSON breaks is found by {@link jsonErrorAt} and said as a line and column.
 */
import { readFileSync } from 'node:fs';
import { jsonErrorAt } from '../lib/config/json-error.js';

export { type JsonErrorPosition, jsonErrorAt } from '../lib/config/json-error.js';

const VARIABLE = 'BROKER_LOCAL_SECRETS_FILE';

/** A path or code in one line: control characters replaced, cut at `max`. */
const printable = (value: string, max: number): string => {
  // biome-ignore lint/suspicious/noControlCharactersInRegex: replacing them is the point
  const clean = value.replace(/[\u0000-\u001f\u007f]/g, '?');
  return clean.length > max ? `${clean.slice(0, max)}…` : clean;
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
