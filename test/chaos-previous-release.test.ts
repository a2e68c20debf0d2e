/**
 * The previous release built from git for the chaos scenario two-releases
 * (`chaos/previous-release.ts`), with the real git and the old tree's own build script: a ref
 * git does not know is refused in one line, and the pinned 0.1.0 builds offline, once.
 */
import { mkdtempSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, describe, expect, it } from 'vitest';
import {
  buildPreviousRelease,
  PINNED_PREVIOUS,
  PreviousReleaseError,
} from '../chaos/previous-release.js';

describe('Function: buildPreviousRelease', () => {
  const cacheDir = mkdtempSync(join(tmpdir(), 'previous-release-test-'));
  afterAll(() => rmSync(cacheDir, { recursive: true, force: true }));

  it('refuses a ref that names no commit, saying how to name another', async () => {
    const attempt = buildPreviousRelease({ ref: 'no-such-release-ref', repoDir: '.', cacheDir });
    await expect(attempt).rejects.toBeInstanceOf(PreviousReleaseError);
    await expect(attempt).rejects.toThrow(
      /'no-such-release-ref' is no commit of this repository.*--previous <ref>/,
    );
  });

  it('builds the pinned 0.1.0 from git into the cache, and finds it there the next time', async () => {
    const built = await buildPreviousRelease({
      ref: PINNED_PREVIOUS.commit,
      repoDir: '.',
      cacheDir,
    });
    expect(built).toMatchObject({
      commit: PINNED_PREVIOUS.commit,
      label: '0.1.0 (a5f1bf2)',
      fromCache: false,
      drift: [],
    });
    expect(built.bundle).toBe(join(cacheDir, PINNED_PREVIOUS.commit, 'broker', 'index.mjs'));
    expect(statSync(built.bundle).size).toBeGreaterThan(100_000);

    const again = await buildPreviousRelease({ ref: 'a5f1bf2', repoDir: '.', cacheDir });
    expect(again).toMatchObject({ commit: PINNED_PREVIOUS.commit, fromCache: true });
    expect(again.bundle).toBe(built.bundle);
  });
});
