/**
 * The shape issue 18 asked of `lib/`, machine-checked: no source file over 300 lines (a module
 * that can be read whole), and no import cycles (type-only imports count too: a cycle of types
 * is still two modules that cannot be read apart).
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const LIB = resolve(import.meta.dirname, '../../lib');
const MAX_LINES = 300;

const sources = (dir: string): string[] =>
  readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
    const path = join(dir, entry.name);
    if (entry.isDirectory()) return sources(path);
    return entry.name.endsWith('.ts') ? [path] : [];
  });

/** The files of `lib/` a file imports (relative specifiers, `.js` → `.ts`). */
const importsOf = (file: string): string[] => {
  const text = readFileSync(file, 'utf8');
  const specifiers = [...text.matchAll(/(?:import|export)[^'"]*?from\s+'(\.[^']+)'/g)].map(
    (match) => match[1] as string,
  );
  return specifiers.map((specifier) => resolve(dirname(file), specifier.replace(/\.js$/, '.ts')));
};

/** Every cycle of `graph` found by a depth-first walk, each as the list of nodes around it. */
const cycles = (graph: ReadonlyMap<string, readonly string[]>): string[][] => {
  const found: string[][] = [];
  const state = new Map<string, 'visiting' | 'done'>();
  const stack: string[] = [];
  const visit = (file: string) => {
    state.set(file, 'visiting');
    stack.push(file);
    for (const next of graph.get(file) ?? []) {
      if (!graph.has(next)) continue;
      if (state.get(next) === 'visiting') found.push(stack.slice(stack.indexOf(next)));
      else if (!state.has(next)) visit(next);
    }
    stack.pop();
    state.set(file, 'done');
  };
  for (const file of graph.keys()) if (!state.has(file)) visit(file);
  return found;
};

describe('Architecture: lib/', () => {
  const files = sources(LIB);

  it(`holds no source file over ${MAX_LINES} lines`, () => {
    const long = files
      .map((file) => ({
        file: relative(LIB, file),
        lines: readFileSync(file, 'utf8').split('\n').length - 1,
      }))
      .filter(({ lines }) => lines > MAX_LINES);
    expect(long).toEqual([]);
  });

  it('has no import cycles', () => {
    const graph = new Map(
      files.map((file) => [relative(LIB, file), importsOf(file).map((to) => relative(LIB, to))]),
    );
    expect(cycles(graph)).toEqual([]);
  });

  it('finds the imports and the cycles there are (the checker itself)', () => {
    expect(importsOf(join(LIB, 'broker', 'held-lease.ts'))).toContain(
      join(LIB, 'broker', 'holder-state.ts'),
    );
    const graph = new Map([
      ['a', ['b']],
      ['b', ['c']],
      ['c', ['a', 'd']],
      ['d', []],
    ]);
    expect(cycles(graph)).toEqual([['a', 'b', 'c']]);
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', []],
        ]),
      ),
    ).toEqual([]);
  });
});
