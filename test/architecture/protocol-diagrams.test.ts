/**
 * The observer's diagram in docs/protocol.md against `decide()` (issue 27): every arrow out of
 * `Read` is one return of `decide()`, labelled with its numbered step, and goes to the kind of
 * `Decision` it returns. A return added, removed or moved to another kind without the diagram
 * following fails here. (The holder's diagram and table are checked against its reducer in
 * test/lib/broker/holder-table.test.ts.)
 */
import { readFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { describe, expect, it } from 'vitest';

const root = resolve(import.meta.dirname, '../..');
const doc = readFileSync(resolve(root, 'docs/protocol.md'), 'utf8');
const observer = readFileSync(resolve(root, 'lib/broker/observer/observer.ts'), 'utf8');

/** The mermaid block that follows the paragraph starting with `heading`. */
const diagramAfter = (heading: string): string => {
  const at = doc.indexOf(heading);
  expect(at, `docs/protocol.md has "${heading}"`).toBeGreaterThanOrEqual(0);
  const start = doc.indexOf('```mermaid', at);
  return doc.slice(start, doc.indexOf('```\n', start + 10));
};

/** `step kind` of each arrow out of Read: `3 refuse`, `6 acquire`, … (sorted). */
const diagramReturns = (): string[] =>
  [...diagramAfter('**The observer**').matchAll(/^\s*Read --> (\w+): (\d+)\./gm)]
    .map(([, target, step]) => `${step} ${(target ?? '').replace('_', '-')}`)
    .sort();

/** `step kind` of each return of `decide()`, by the numbered step comment above it (sorted). */
const codeReturns = (): string[] => {
  const body = observer.slice(
    observer.indexOf('export const decide'),
    observer.indexOf('\n};\n', observer.indexOf('export const decide')),
  );
  const steps = [...body.matchAll(/^\s*\/\/ (\d+)\./gm)].map((m) => ({ at: m.index, step: m[1] }));
  const found: string[] = [];
  for (const m of body.matchAll(/return (?:refuse\(|\{\s*do: '([\w-]+)')/g)) {
    const step = steps.filter((s) => s.at < m.index).at(-1)?.step ?? '?';
    found.push(`${step} ${m[1] ?? 'refuse'}`);
  }
  return found.sort();
};

describe('docs/protocol.md: the observer diagram', () => {
  it('has one arrow out of Read per return of decide(), to the Decision kind it returns, at its step', () => {
    const code = codeReturns();
    // Each of decide()'s kinds and its six refusals are there to be compared.
    expect(new Set(code.map((r) => r.split(' ')[1]))).toEqual(
      new Set(['serve', 'reread', 'let-go', 'refuse', 'acquire', 'wait']),
    );
    expect(code.filter((r) => r.endsWith('refuse'))).toHaveLength(6);
    expect(diagramReturns()).toEqual(code);
  });

  it('names no state that is not a Decision kind, the start, the holder or the end', () => {
    const states = new Set(
      [...diagramAfter('**The observer**').matchAll(/(\w+|\[\*\]) --> (\w+|\[\*\])/g)].flatMap(
        ([, from, to]) => [from, to],
      ),
    );
    expect([...states].sort()).toEqual(
      ['Holder', 'Read', '[*]', 'acquire', 'let_go', 'refuse', 'reread', 'serve', 'wait'].sort(),
    );
  });
});
