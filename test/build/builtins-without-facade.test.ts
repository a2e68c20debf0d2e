/**
 * The esbuild plugin that takes node:http and node:timers without their ESM facades (scripts/esbuild-node.mjs,
 * issue 25): an ESM import of node:http, static or dynamic, becomes `process.getBuiltinModule`,
 * what it exports works, a `require` is left alone, and an import of a lazy member (one that
 * loads undici) fails the build.
 */
import { execFileSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { build } from 'esbuild';
import { afterAll, describe, expect, it } from 'vitest';
// @ts-expect-error: a plain .mjs build script, without types
import { NODE_ESM } from '../../scripts/esbuild-node.mjs';

const dir = mkdtempSync(join(tmpdir(), 'builtins-without-facade-'));
afterAll(() => rmSync(dir, { recursive: true, force: true }));

const bundle = async (name: string, source: string) => {
  const entry = join(dir, `${name}.mjs`);
  writeFileSync(entry, source);
  const outfile = join(dir, `${name}.out.mjs`);
  await build({ ...NODE_ESM, entryPoints: [entry], outfile, logLevel: 'silent' });
  return outfile;
};

describe('node:http and node:timers in an ESM bundle', () => {
  it('is taken without its facade, so undici stays unloaded, and serves what is imported', async () => {
    const outfile = await bundle(
      'plain',
      `import { STATUS_CODES, request } from 'node:http';
       import * as http from 'http';
       import { setTimeout as later } from 'node:timers';
       const dynamic = await import('node:http');
       const undici = process.moduleLoadList.some((name) => name.includes('undici'));
       const timersPromises = process.moduleLoadList.some((name) => name.includes('timers/promises'));
       console.log(JSON.stringify({
         ok: STATUS_CODES[200], request: typeof request, agent: typeof http.globalAgent,
         same: dynamic.request === request, undici, later: typeof later, timersPromises,
       }));`,
    );
    const output = execFileSync(process.execPath, [outfile], { encoding: 'utf8' });
    expect(JSON.parse(output)).toEqual({
      ok: 'OK',
      request: 'function',
      agent: 'object',
      same: true,
      undici: false,
      later: 'function',
      timersPromises: false,
    });
  });

  it('fails the build on an import of a lazy member, which would load undici', async () => {
    await expect(
      bundle('lazy', `import { WebSocket } from 'node:http'; console.log(WebSocket);`),
    ).rejects.toThrow(/No matching export .* "WebSocket"/);
  });

  it('leaves a require alone', async () => {
    const outfile = await bundle(
      'required',
      `const http = require('node:http'); console.log(typeof http.WebSocket);`,
    );
    expect(execFileSync(process.execPath, [outfile], { encoding: 'utf8' }).trim()).toBe('function');
  });

  it('gives each importer its own copy, so a split bundle loads no extra file for it', async () => {
    // Two entries share node:http: a shared module would be a chunk of its own, one more file
    // for every cold start to resolve and load (about 0.15 ms each, issue 25).
    const sources = {
      a: `import { STATUS_CODES } from 'node:http'; export const a = STATUS_CODES[200];`,
      b: `import { METHODS } from 'node:http'; export const b = METHODS.length;`,
      main: `import { a } from './a.mjs'; const { b } = await import('./b.mjs'); console.log(a, b > 0);`,
    };
    for (const [name, source] of Object.entries(sources))
      writeFileSync(join(dir, `${name}.mjs`), source);
    const outdir = join(dir, 'split');
    await build({
      ...NODE_ESM,
      entryPoints: [join(dir, 'main.mjs')],
      outdir,
      splitting: true,
      logLevel: 'silent',
    });
    const files = readdirSync(outdir);
    expect(files.filter((f) => f.startsWith('chunk-'))).toEqual([]);
    expect(
      execFileSync(process.execPath, [join(outdir, 'main.js')], { encoding: 'utf8' }).trim(),
    ).toBe('OK true');
    // The banner's require comes without an ESM import of node:module (no facade either).
    expect(readFileSync(join(outdir, 'main.js'), 'utf8')).not.toMatch(/from\s*["']node:module["']/);
  });
});
