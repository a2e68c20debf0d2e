/** Builds a private copy of dist/ for one test file (tests must not race on the shared one). */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';

export const root = resolve(import.meta.dirname, '../..');

export interface PrivateBuild {
  readonly outdir: string;
  readonly bundle: string;
  readonly container: string;
  readonly start: string;
  remove(): void;
}

export const buildPrivate = (name: string): PrivateBuild => {
  const outdir = join(root, '.build-test', `${name}-${process.pid}`);
  mkdirSync(outdir, { recursive: true });
  execFileSync(process.execPath, ['scripts/build.mjs'], {
    cwd: root,
    env: { ...process.env, BUILD_OUTDIR: outdir },
  });
  return {
    outdir,
    bundle: join(outdir, 'broker/index.mjs'),
    container: join(outdir, 'local/container.mjs'),
    start: join(outdir, 'local/start.mjs'),
    remove: () => rmSync(outdir, { recursive: true, force: true }),
  };
};
