/**
 * The broker's side entries, machine-checked (issue 36): each `lib/broker/<side>/index.ts` names
 * its exports (no `export *`), and exports only what code outside the side imports from it, so
 * that an entry says what the side offers and nothing more. Code outside a side (the other
 * sides, the facade, the rest of `lib/`, `functions/`, `local/`, `chaos/`, `bench/`, `infra/`,
 * `scripts/`, `client/`) enters it only through its entry; `lib-shape.test.ts` checks that rule
 * inside `lib/`, this one everywhere else. Tests may import a side's module files, and do not
 * count as users of its entry: an export kept for tests alone would outgrow what the side offers.
 */
import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const ROOT = resolve(import.meta.dirname, '../..');
const BROKER = join(ROOT, 'lib', 'broker');
/** Where code that is not a test lives (`test/` is the one place allowed inside a side). */
const CODE = ['lib', 'functions', 'local', 'chaos', 'bench', 'infra', 'scripts', 'client/src'];

const sources = (dir: string): string[] =>
  existsSync(dir)
    ? readdirSync(dir, { withFileTypes: true }).flatMap((entry) => {
        const path = join(dir, entry.name);
        if (entry.isDirectory()) return entry.name === 'node_modules' ? [] : sources(path);
        return /\.(ts|mts|cts|js|mjs|cjs)$/.test(entry.name) && !entry.name.endsWith('.d.ts')
          ? [path]
          : [];
      })
    : [];

/** `text` without comments, so that an import quoted in a comment is not read as one. */
const code = (text: string): string =>
  text.replace(/\/\*[\s\S]*?\*\//g, '').replace(/^\s*\/\/.*$/gm, '');

/** The names in a `{ a, type B, c as d }` list, as the module exporting them spells them. */
const listed = (list: string): string[] =>
  list
    .split(',')
    .map((item) => item.trim().replace(/^type\s+/, ''))
    .filter(Boolean)
    .map((item) => item.split(/\s+as\s+/)[0] as string);

/** One import (or re-export) of a relative module: who, which file, and the names it takes. */
interface Use {
  readonly from: string;
  readonly target: string;
  /** The names taken; `*` for a namespace import or an `export *`. */
  readonly names: readonly string[];
}

/** The relative imports and re-exports in `text` of the file at `file` (paths from the root). */
const usesIn = (file: string, text: string): Use[] =>
  [
    ...code(text).matchAll(
      /(?:^|\n)\s*(?:import|export)\s+(?:type\s+)?([^;]*?)\s*from\s+'(\.[^']+)'/g,
    ),
  ].map((match) => {
    const clause = match[1] as string;
    const braces = clause.match(/\{([^}]*)\}/);
    return {
      from: relative(ROOT, file),
      target: relative(ROOT, resolve(dirname(file), (match[2] as string).replace(/\.js$/, '.ts'))),
      names: [...(braces ? listed(braces[1] as string) : []), ...(/\*/.test(clause) ? ['*'] : [])],
    };
  });

/** The side a path from the root lies in (`lib/broker/holder/state.ts` → `holder`), if any. */
const sideOf = (path: string): string | undefined =>
  path.match(/^lib\/broker\/([^/]+)\/[^/]+$/)?.[1];

/** What an entry exports, by name; `export *` and declarations are reported, not followed. */
const entryExports = (text: string): { names: string[]; unlisted: string[] } => {
  const body = code(text);
  const names = [...body.matchAll(/^export\s+(?:type\s+)?\{([^}]*)\}/gm)].flatMap((match) =>
    (match[1] as string)
      .split(',')
      .map((item) => item.trim().replace(/^type\s+/, ''))
      .filter(Boolean)
      // `a as b` exports `b`.
      .map((item) => item.split(/\s+as\s+/).at(-1) as string),
  );
  const unlisted = [
    ...body.matchAll(
      /^export\s+(\*.*|(?:declare\s+|default\s+)?(?:const|let|var|function|class|interface|type|enum)\s+\w+)/gm,
    ),
  ].map((match) => (match[1] as string).trim());
  return { names, unlisted };
};

/**
 * What is wrong with the entries, given every import outside them: `side: name …` for an
 * export nothing outside the side imports from its entry, `file → target` for code that enters
 * a side past its entry, and any `export *` or declaration in an entry.
 */
const entryBreaks = (entries: ReadonlyMap<string, string>, uses: readonly Use[]): string[] => {
  const imported = new Map<string, Set<string>>();
  const breaks: string[] = [];
  for (const use of uses) {
    const side = sideOf(use.target);
    if (side === undefined || sideOf(use.from) === side || !entries.has(side)) continue;
    if (use.from.startsWith('test/')) continue;
    if (!use.target.endsWith('/index.ts')) {
      breaks.push(`${use.from} → ${use.target}: enter ${side}/ through its index.ts`);
      continue;
    }
    const names = imported.get(side) ?? new Set<string>();
    for (const name of use.names) names.add(name);
    imported.set(side, names);
  }
  for (const [side, text] of entries) {
    const { names, unlisted } = entryExports(text);
    for (const line of unlisted) breaks.push(`${side}: '${line}' (name each export instead)`);
    const used = imported.get(side) ?? new Set<string>();
    if (used.has('*')) continue;
    for (const name of names) {
      if (!used.has(name))
        breaks.push(`${side}: ${name} is exported but nothing outside imports it`);
    }
  }
  return breaks;
};

describe('Architecture: the side entries', () => {
  const sides = readdirSync(BROKER, { withFileTypes: true })
    .filter((entry) => entry.isDirectory())
    .map((entry) => entry.name);
  const entries = new Map(
    sides.map((side) => [side, readFileSync(join(BROKER, side, 'index.ts'), 'utf8')] as const),
  );
  const uses = CODE.flatMap((dir) => sources(join(ROOT, dir))).flatMap((file) =>
    usesIn(file, readFileSync(file, 'utf8')),
  );

  it('export by name only what code outside their side imports, and are the only way in', () => {
    expect(entryBreaks(entries, uses)).toEqual([]);
  });

  it('finds the exports, the imports and the breaks there are (the checker itself)', () => {
    expect(uses.length).toBeGreaterThan(100);
    expect(
      usesIn(
        join(ROOT, 'bench/x.ts'),
        "import { a, type B } from 'node:fs';\nimport {\n  c as d,\n  type E,\n} from '../lib/broker/timing/index.js';\n// import { f } from '../lib/broker/view/index.js';\nexport * from './y.js';",
      ),
    ).toEqual([
      { from: 'bench/x.ts', target: 'lib/broker/timing/index.ts', names: ['c', 'E'] },
      { from: 'bench/x.ts', target: 'bench/y.ts', names: ['*'] },
    ]);
    const fake = new Map([
      [
        'timing',
        "/** doc */\nexport { a, type B } from './a.js';\nexport { c as d } from './c.js';",
      ],
      ['view', "export * from './serving.js';\nexport const e = 1;"],
    ]);
    const fakeUses: Use[] = [
      { from: 'lib/broker/view/x.ts', target: 'lib/broker/timing/index.ts', names: ['a'] },
      // Within the side, and a test: neither counts.
      { from: 'lib/broker/timing/y.ts', target: 'lib/broker/timing/index.ts', names: ['B'] },
      { from: 'test/z.test.ts', target: 'lib/broker/timing/index.ts', names: ['d'] },
      { from: 'test/z.test.ts', target: 'lib/broker/timing/a.ts', names: ['a'] },
      { from: 'chaos/h.ts', target: 'lib/broker/timing/a.ts', names: ['a'] },
    ];
    expect(entryBreaks(fake, fakeUses)).toEqual([
      'chaos/h.ts → lib/broker/timing/a.ts: enter timing/ through its index.ts',
      'timing: B is exported but nothing outside imports it',
      'timing: d is exported but nothing outside imports it',
      "view: '* from './serving.js';' (name each export instead)",
      "view: 'const e' (name each export instead)",
    ]);
  });
});
