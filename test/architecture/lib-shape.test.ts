/**
 * The shape of `lib/`, machine-checked: no import cycles (type-only imports count too: a cycle
 * of types is still two modules that cannot be read apart), and the broker's dependency rule
 * (issue 27): `lib/broker/` is laid out by side, each side a folder with an entry module
 * (`index.ts`); a side imports another only through its entry, and only the sides below it in
 * `SIDES`. This rule replaced the 300-line cap per file, which had been met by mechanical cuts.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const LIB = resolve(import.meta.dirname, '../../lib');

/**
 * The broker's sides, each with the sides it may import (docs/protocol.md, "Layout"). The
 * broker's root holds the facade (`index.ts`) and two leaves every side may import
 * (`types.ts`, `single-flight.ts`).
 */
const SIDES: Readonly<Record<string, readonly string[]>> = {
  timing: [],
  issuance: [],
  view: ['timing'],
  observer: ['timing', 'view', 'issuance'],
  holder: ['timing', 'view', 'issuance', 'observer'],
  callers: ['timing', 'view', 'issuance', 'observer'],
  fleet: ['timing', 'view', 'issuance', 'observer', 'holder'],
};
const ROOT_LEAVES = ['broker/types.ts', 'broker/single-flight.ts'];

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

/** The side of a path relative to `lib/` (`broker/holder/state.ts` → `holder`), if any. */
const sideOf = (path: string): string | undefined => {
  const parts = path.split('/');
  return parts[0] === 'broker' && parts.length > 2 ? parts[1] : undefined;
};

/**
 * The imports that break the dependency rule, as `from → to: why`, for a graph of paths
 * relative to `lib/`.
 */
const ruleBreaks = (
  graph: ReadonlyMap<string, readonly string[]>,
  sides: Readonly<Record<string, readonly string[]>>,
): string[] =>
  [...graph].flatMap(([from, imports]) =>
    imports.flatMap((to) => {
      if (!to.startsWith('broker/') || ROOT_LEAVES.includes(to)) return [];
      const mine = sideOf(from);
      const theirs = sideOf(to);
      if (to === 'broker/index.ts') {
        return from.startsWith('broker/')
          ? [`${from} → ${to}: the facade is for outside callers`]
          : [];
      }
      if (theirs === undefined) return [`${from} → ${to}: not in a side`];
      if (mine === theirs) return [];
      if (!to.endsWith(`broker/${theirs}/index.ts`)) {
        return [`${from} → ${to}: another side is entered through its index.ts`];
      }
      if (mine === undefined) return [];
      const allowed = sides[mine];
      if (allowed === undefined) return [`${from} → ${to}: ${mine} is not a declared side`];
      return allowed.includes(theirs) ? [] : [`${from} → ${to}: ${mine} may not import ${theirs}`];
    }),
  );

describe('Architecture: lib/', () => {
  const files = sources(LIB);
  const graph = new Map(
    files.map((file) => [relative(LIB, file), importsOf(file).map((to) => relative(LIB, to))]),
  );

  it('has no import cycles', () => {
    expect(cycles(graph)).toEqual([]);
  });

  it("keeps the broker's dependency rule: sides enter each other through index.ts, downwards only", () => {
    expect(ruleBreaks(graph, SIDES)).toEqual([]);
  });

  it('has a folder for every declared side and declares every folder of the broker', () => {
    const folders = readdirSync(join(LIB, 'broker'), { withFileTypes: true })
      .filter((entry) => entry.isDirectory())
      .map((entry) => entry.name)
      .sort();
    expect(folders).toEqual(Object.keys(SIDES).sort());
    for (const side of folders) expect(graph.has(`broker/${side}/index.ts`)).toBe(true);
  });

  it('finds the imports, the cycles and the rule breaks there are (the checker itself)', () => {
    expect(importsOf(join(LIB, 'broker', 'holder', 'held-lease.ts'))).toContain(
      join(LIB, 'broker', 'holder', 'state.ts'),
    );
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', ['c']],
          ['c', ['a', 'd']],
          ['d', []],
        ]),
      ),
    ).toEqual([['a', 'b', 'c']]);
    expect(
      cycles(
        new Map([
          ['a', ['b']],
          ['b', []],
        ]),
      ),
    ).toEqual([]);
    const broken = new Map([
      ['broker/view/a.ts', ['broker/holder/index.ts', 'broker/types.ts']],
      ['broker/holder/b.ts', ['broker/observer/c.ts', 'broker/holder/d.ts']],
      ['broker/observer/c.ts', ['broker/index.ts', 'broker/timing/index.ts']],
      ['adapters/e.ts', ['broker/index.ts', 'broker/holder/d.ts']],
    ]);
    expect(ruleBreaks(broken, SIDES)).toEqual([
      'broker/view/a.ts → broker/holder/index.ts: view may not import holder',
      'broker/holder/b.ts → broker/observer/c.ts: another side is entered through its index.ts',
      'broker/observer/c.ts → broker/index.ts: the facade is for outside callers',
      'adapters/e.ts → broker/holder/d.ts: another side is entered through its index.ts',
    ]);
  });
});
