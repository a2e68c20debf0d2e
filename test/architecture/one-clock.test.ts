/**
 * One clock (issue 27): in `lib/`, time is read only through the Clock port (`lib/clock.ts`),
 * so every duration and deadline can run on the monotonic clock and every test can drive time.
 * Comments may name the globals; code may not call them.
 */
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const LIB = resolve(import.meta.dirname, '../../lib');
const CLOCK = join(LIB, 'clock.ts');

/** Reads of the time that bypass the port: the wall clock, a new Date of now, the monotonic. */
const BYPASS = [/\bDate\.now\b/, /\bnew Date\(\s*\)/, /\bperformance\.now\b/];

const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });

/** `file:line: text` of every line of code in `file` that reads the time itself. */
const clockBypasses = (file: string, root = LIB): string[] =>
  readFileSync(file, 'utf8')
    .split('\n')
    .flatMap((text, index) => {
      const code = text.trim();
      const comment = code.startsWith('*') || code.startsWith('/*') || code.startsWith('//');
      return !comment && BYPASS.some((pattern) => pattern.test(code))
        ? [`lib/${relative(root, file)}:${index + 1}: ${code}`]
        : [];
    });

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
