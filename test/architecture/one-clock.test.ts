/**
 * One clock (issue 27): in `lib/`, time is read only through the Clock port (`lib/clock.ts`),
 * so every duration and deadline can run on the monotonic clock and every test can drive time.
 * Comments may name the globals; code may not call them.
 *
 * And a deadline stays monotonic end to end: made at the edge from the time an invocation has
 * left (`TokenBroker.deadlineIn`), it is a `Deadline` through every port and signature of
 * `lib/` and `functions/`, never epoch ms, and is never converted to or from the wall clock.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const LIB = resolve(import.meta.dirname, '../../lib');
const FUNCTIONS = resolve(import.meta.dirname, '../../functions');
const ROOT = resolve(import.meta.dirname, '../..');
const CLOCK = join(LIB, 'clock.ts');

/** Reads of the time that bypass the port: the wall clock, a new Date of now, the monotonic. */
const BYPASS = [/\bDate\.now\b/, /\bnew Date\(\s*\)/, /\bperformance\.now\b/];

const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });

/**
 * A deadline crossing between the clocks: made from an epoch or turned into one, or a deadline
 * (a field or parameter named `deadline` or `workUntil`) typed as a number.
 */
const CONVERSION = [
  /\bfromEpoch\b/,
  /\.epoch\(\)/,
  /\b(deadline|workUntil)\??\s*:\s*number\b/,
  /\bdeadlineOf\b.*\):\s*number\b/,
];

/** `file:line: text` of every line of code in `file` that matches one of `patterns`. */
const codeLines = (file: string, patterns: RegExp[], root: string): string[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((text, index) => {
      const code = text.trim();
      const comment = code.startsWith('*') || code.startsWith('/*') || code.startsWith('//');
      return !comment && patterns.some((pattern) => pattern.test(code))
        ? [`${relative(root, file)}:${index + 1}: ${code}`]
        : [];
    });

/** `file:line: text` of every line of code in `file` that reads the time itself. */
const clockBypasses = (file: string, root = LIB): string[] =>
  codeLines(file, BYPASS, root).map((line) => `lib/${line}`);

describe('Architecture: one clock', () => {
  it('reads Date.now, new Date() and performance.now nowhere in lib/ but lib/clock.ts', () => {
    const found = sources(LIB)
      .filter((file) => file !== CLOCK)
      .flatMap((file) => clockBypasses(file));
    expect(
      found,
      `read the time through the Clock port (lib/clock.ts):\n${found.join('\n')}`,
    ).toEqual([]);
  });

  it('keeps deadlines monotonic: no Deadline made from or read as an epoch, none a number', () => {
    const found = [...sources(LIB), ...sources(FUNCTIONS)].flatMap((file) =>
      codeLines(file, CONVERSION, ROOT),
    );
    expect(
      found,
      `pass a Deadline (lib/clock.ts), made with TokenBroker.deadlineIn or Deadline.in:\n${found.join('\n')}`,
    ).toEqual([]);
  });

  it('names the file and line of a conversion', () => {
    const root = mkdtempSync(join(tmpdir(), 'one-clock-'));
    const file = join(root, 'load.ts');
    writeFileSync(
      file,
      [
        '/** Not `Deadline.fromEpoch`: a Deadline. */',
        'const by = Deadline.fromEpoch(clock, at);',
        'const at = by.epoch();',
        'load(deadline: number, workUntil?: number) {}',
        'const ms = by.leftMs();',
      ].join('\n'),
    );
    expect(codeLines(file, CONVERSION, root)).toEqual([
      'load.ts:2: const by = Deadline.fromEpoch(clock, at);',
      'load.ts:3: const at = by.epoch();',
      'load.ts:4: load(deadline: number, workUntil?: number) {}',
    ]);
    rmSync(root, { recursive: true });
  });

  it('names the file and line of a bypass, and lets comments name the globals', () => {
    const root = mkdtempSync(join(tmpdir(), 'one-clock-'));
    const file = join(root, 'stamp.ts');
    writeFileSync(
      file,
      ['/** Not `Date.now()`: the port. */', '// performance.now', 'const t = Date.now();'].join(
        '\n',
      ),
    );
    expect(clockBypasses(file, root)).toEqual(['lib/stamp.ts:3: const t = Date.now();']);
    rmSync(root, { recursive: true });
  });
});
