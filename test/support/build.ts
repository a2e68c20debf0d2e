/**
 * The built artefacts a process test runs: the one build that the `process` project makes
 * before any of its files runs (./global-build.ts), read only. A file that writes files keeps
 * them in a directory of its own; one that must build differently (`npm start` builds for
 * itself) gives that build a directory of its own too, so that no two files race on one
 * directory (nor on dist/).
 */
import { join, resolve } from 'node:path';
import { inject } from 'vitest';

export const root = resolve(import.meta.dirname, '../..');

export interface Build {
  readonly outdir: string;
  readonly bundle: string;
  readonly container: string;
  readonly start: string;
  /** `local/lambda-env/bootstrap.mjs`: an emulated execution environment's runtime. */
  readonly bootstrap: string;
  /** The client package's CLI (`client/esm/cli.js`). */
  readonly cli: string;
}

const pathsIn = (outdir: string): Build => ({
  outdir,
  bundle: join(outdir, 'broker/index.mjs'),
  container: join(outdir, 'local/container.mjs'),
  start: join(outdir, 'local/start.mjs'),
  bootstrap: join(outdir, 'local/lambda-env/bootstrap.mjs'),
  cli: join(outdir, 'client/esm/cli.js'),
});

/** The process project's one build (read only: write nothing into it). */
export const sharedBuild = (): Build => {
  const outdir = inject('buildDir');
  if (!outdir) throw new Error('no shared build: this file runs in the process project only');
  return pathsIn(outdir);
};
