/**
 * The previous release's Lambda bundle, built from git (issue 25: a chaos scenario runs it and
 * this tree's bundle in one fleet, against one table). Reproducible and offline:
 *
 * 1. the ref (`--previous <ref>`, `CHAOS_PREVIOUS_REF`, else the highest version tag reachable
 *    from HEAD, else {@link PINNED_PREVIOUS}, release 0.1.0) is resolved to a commit;
 * 2. that commit's tree is extracted with `git archive` into a temporary directory, with this
 *    checkout's `node_modules` linked into it: nothing is downloaded. Every package the old
 *    tree depends on must be installed here; a version that differs is recorded as drift;
 * 3. the old tree's own `scripts/build.mjs broker` builds its bundle, with this checkout's
 *    esbuild, into `<cacheDir>/<commit>/broker/index.mjs`;
 * 4. `release.json` beside it, written last, marks a finished build: a re-run with the same
 *    commit and the same installed versions uses it as is.
 */
import { execFileSync } from 'node:child_process';
import { existsSync, mkdtempSync, readFileSync, renameSync, rmSync, symlinkSync } from 'node:fs';
import { writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * The previous release when the repository has no version tag: 0.1.0 (CHANGELOG.md), the tree
 * before the first change listed under "Unreleased" (b092be4, `maxAgeMs`).
 */
export const PINNED_PREVIOUS = {
  commit: 'a5f1bf283db99dc7f5bde1bbfc8967b31109451b',
  release: '0.1.0',
} as const;

/** A previous release that cannot be built: the message says why and what to do. */
export class PreviousReleaseError extends Error {
  constructor(message: string) {
    super(message);
    this.name = 'PreviousReleaseError';
  }
}

export interface PreviousRelease {
  /** As asked for (a tag, a commit, a branch). */
  readonly ref: string;
  readonly commit: string;
  /** `0.1.0 (a5f1bf2)`: how the report names it. */
  readonly label: string;
  /** The built bundle (`broker/index.mjs`). */
  readonly bundle: string;
  /** Whether the bundle was already built (`release.json` found, same installed versions). */
  readonly fromCache: boolean;
  /** Packages of the old tree whose installed version differs from the one it pinned. */
  readonly drift: readonly string[];
}

/** Runs git in `repoDir`; its stdout, trimmed. Injectable so that the logic is tested alone. */
export type Git = (args: readonly string[]) => string;

export const gitIn =
  (repoDir: string): Git =>
  (args) =>
    execFileSync('git', ['-C', repoDir, ...args], {
      encoding: 'utf8',
      stdio: ['ignore', 'pipe', 'pipe'],
    }).trim();

const VERSION_TAG = /^v?(\d+)\.(\d+)\.(\d+)$/;

/** The highest plain version tag (`1.2.3` or `v1.2.3`; pre-releases aside), if any. */
export const latestVersionTag = (tags: readonly string[]): string | undefined => {
  const versions = tags.flatMap((tag) => {
    const match = VERSION_TAG.exec(tag.trim());
    return match ? [{ tag: tag.trim(), parts: match.slice(1, 4).map(Number) }] : [];
  });
  versions.sort((a, b) => {
    for (let i = 0; i < 3; i += 1) {
      const d = (b.parts[i] ?? 0) - (a.parts[i] ?? 0);
      if (d !== 0) return d;
    }
    return 0;
  });
  return versions[0]?.tag;
};

/**
 * The ref to build when none is asked for: the latest version tag reachable from HEAD but not on
 * it (the release a deploy of this tree rolls from; a tag on HEAD is this tree itself), else
 * the pinned 0.1.0 commit.
 */
export const defaultPreviousRef = (git: Git): string => {
  const here = new Set(git(['tag', '--points-at', 'HEAD']).split('\n'));
  const before = git(['tag', '--merged', 'HEAD'])
    .split('\n')
    .filter((tag) => !here.has(tag));
  return latestVersionTag(before) ?? PINNED_PREVIOUS.commit;
};

/** The commit `ref` names, or a {@link PreviousReleaseError} that says what to do. */
export const resolveCommit = (git: Git, ref: string): string => {
  const hint =
    'Name a tag or commit of this repository with `npm run chaos -- --previous <ref>` or ' +
    'CHAOS_PREVIOUS_REF (chaos/README.md, "two-releases"); a shallow clone lacks the history: ' +
    '`git fetch --unshallow --tags`.';
  if (ref.trim() === '' || ref.startsWith('-')) {
    throw new PreviousReleaseError(`the previous release '${ref}' is not a git ref. ${hint}`);
  }
  try {
    return git(['rev-parse', '--verify', '--quiet', `${ref}^{commit}`]);
  } catch {
    throw new PreviousReleaseError(
      `the previous release '${ref}' is no commit of this repository. ${hint}`,
    );
  }
};

/** The packages an old tree's build needs from node_modules: its runtime ones, and esbuild. */
export const buildNeeds = (manifest: {
  dependencies?: Record<string, string>;
  devDependencies?: Record<string, string>;
}): Record<string, string> => ({
  ...manifest.dependencies,
  ...(manifest.devDependencies?.esbuild ? { esbuild: manifest.devDependencies.esbuild } : {}),
});

/**
 * Compares what the old tree pinned with what is installed (`installed(name)`: its version, or
 * undefined). A missing package cannot be fetched (no network): an error that names them. A
 * different version is built with anyway and reported as drift.
 */
export const checkInstalled = (
  needs: Record<string, string>,
  installed: (name: string) => string | undefined,
  label: string,
): string[] => {
  const missing: string[] = [];
  const drift: string[] = [];
  for (const [name, wanted] of Object.entries(needs)) {
    const have = installed(name);
    if (have === undefined) missing.push(`${name}@${wanted}`);
    else if (have !== wanted) drift.push(`${name}: ${wanted} pinned, ${have} installed`);
  }
  if (missing.length > 0) {
    throw new PreviousReleaseError(
      `the previous release ${label} needs ${missing.join(', ')}, not installed in this ` +
        "checkout's node_modules, and its build downloads nothing. Pick a later release " +
        '(--previous <ref>), or add the package to package.json and npm install it.',
    );
  }
  return drift;
};

const installedIn =
  (nodeModules: string) =>
  (name: string): string | undefined => {
    try {
      const manifest = JSON.parse(readFileSync(join(nodeModules, name, 'package.json'), 'utf8'));
      return typeof manifest.version === 'string' ? manifest.version : undefined;
    } catch {
      return undefined;
    }
  };

interface Marker {
  readonly ref: string;
  readonly commit: string;
  readonly installed: Record<string, string | null>;
  readonly drift: readonly string[];
  readonly builtAt: string;
}

const readMarker = (path: string): Marker | undefined => {
  try {
    return JSON.parse(readFileSync(path, 'utf8')) as Marker;
  } catch {
    return undefined;
  }
};

export interface BuildOptions {
  /** As asked for; default {@link defaultPreviousRef}. */
  readonly ref?: string | undefined;
  /** The repository (this checkout). */
  readonly repoDir: string;
  /** Builds go to `<cacheDir>/<commit>/` (gitignored: `.chaos/previous`). */
  readonly cacheDir: string;
  /** Default: `gitIn(repoDir)`. */
  readonly git?: Git;
}

/** Resolves, extracts and builds the previous release (or finds it built); see the top. */
export const buildPreviousRelease = async (options: BuildOptions): Promise<PreviousRelease> => {
  const repoDir = resolve(options.repoDir);
  const git = options.git ?? gitIn(repoDir);
  const ref = options.ref ?? defaultPreviousRef(git);
  const commit = resolveCommit(git, ref);
  const short = commit.slice(0, 7);
  const release =
    commit === PINNED_PREVIOUS.commit
      ? PINNED_PREVIOUS.release
      : (latestVersionTag(git(['tag', '--points-at', commit]).split('\n')) ?? ref);
  const label = release === short || release === commit ? short : `${release} (${short})`;

  const manifestText = (() => {
    try {
      return git(['show', `${commit}:package.json`]);
    } catch {
      throw new PreviousReleaseError(`the previous release ${label} has no package.json`);
    }
  })();
  const needs = buildNeeds(JSON.parse(manifestText));
  const nodeModules = join(repoDir, 'node_modules');
  const installed = installedIn(nodeModules);
  const versions = Object.fromEntries(
    Object.keys(needs).map((name) => [name, installed(name) ?? null]),
  );

  const outDir = resolve(options.cacheDir, commit);
  const bundle = join(outDir, 'broker', 'index.mjs');
  const markerPath = join(outDir, 'release.json');
  const marker = readMarker(markerPath);
  if (
    marker?.commit === commit &&
    JSON.stringify(marker.installed) === JSON.stringify(versions) &&
    existsSync(bundle)
  ) {
    return { ref, commit, label, bundle, fromCache: true, drift: marker.drift };
  }
  const drift = checkInstalled(needs, installed, label);

  const tree = mkdtempSync(join(tmpdir(), 'chaos-previous-'));
  try {
    const archive = join(tree, '.tree.tar');
    git(['archive', '--format=tar', '-o', archive, commit]);
    execFileSync('tar', ['-xf', archive, '-C', tree], { stdio: 'ignore' });
    rmSync(archive);
    if (!existsSync(join(tree, 'scripts', 'build.mjs'))) {
      throw new PreviousReleaseError(`the previous release ${label} has no scripts/build.mjs`);
    }
    symlinkSync(nodeModules, join(tree, 'node_modules'), 'dir');
    const partial = `${outDir}.partial`;
    rmSync(partial, { recursive: true, force: true });
    rmSync(outDir, { recursive: true, force: true });
    try {
      // Its own build script, as that release was built (node resolves esbuild, and esbuild
      // every import, through the linked node_modules).
      execFileSync(process.execPath, ['scripts/build.mjs', 'broker'], {
        cwd: tree,
        env: { ...process.env, BUILD_OUTDIR: partial },
        stdio: ['ignore', 'pipe', 'pipe'],
      });
    } catch (error) {
      const stderr = String((error as { stderr?: unknown }).stderr ?? '').trim();
      throw new PreviousReleaseError(
        `the previous release ${label} did not build: ${stderr.split('\n').slice(0, 10).join('\n')}`,
      );
    }
    if (!existsSync(join(partial, 'broker', 'index.mjs'))) {
      throw new PreviousReleaseError(
        `the previous release ${label}'s build wrote no broker/index.mjs`,
      );
    }
    renameSync(partial, outDir);
    const done: Marker = {
      ref,
      commit,
      installed: versions,
      drift,
      builtAt: new Date().toISOString(),
    };
    await writeFile(markerPath, `${JSON.stringify(done, null, 2)}\n`);
    return { ref, commit, label, bundle, fromCache: false, drift };
  } finally {
    rmSync(tree, { recursive: true, force: true });
  }
};
