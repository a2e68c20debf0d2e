/**
 * The process tier's one build (vitest `globalSetup` of the `process` project): `scripts/build.mjs`
 * once, into .build-test/shared-<pid>/, before any of its files runs, removed after the last.
 * Files that only read the build get its directory by `inject('buildDir')` (`sharedBuild()` in
 * ./build.ts); nothing may write into it (a file that needs to write, or to build differently,
 * uses a directory of its own).
 */
import { execFileSync } from 'node:child_process';
import { mkdirSync, rmSync } from 'node:fs';
import { join, resolve } from 'node:path';
import type { TestProject } from 'vitest/node';

const root = resolve(import.meta.dirname, '../..');

declare module 'vitest' {
  export interface ProvidedContext {
    /** The shared build's output directory (read only). */
    buildDir: string;
  }
}

export default function setup(project: TestProject) {
  const outdir = join(root, '.build-test', `shared-${process.pid}`);
  mkdirSync(outdir, { recursive: true });
  execFileSync(process.execPath, ['scripts/build.mjs'], {
    cwd: root,
    env: { ...process.env, BUILD_OUTDIR: outdir },
    stdio: ['ignore', 'ignore', 'inherit'],
  });
  project.provide('buildDir', outdir);
  return () => rmSync(outdir, { recursive: true, force: true });
}
