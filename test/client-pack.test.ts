/**
 * `npm pack -w client` as the guide runs it, without packing (client-package.test.ts packs and
 * installs, slowly): the tarball it would leave in the working tree is ignored by git.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { root } from './support/build.js';

describe('Client package: npm pack leaves nothing to commit', () => {
  it('ignores the tarball npm pack names, at the root and in client/', () => {
    const { name, version } = JSON.parse(
      readFileSync(join(root, 'client', 'package.json'), 'utf8'),
    ) as { name: string; version: string };
    // npm's name for a scoped package: @scope/name → scope-name-<version>.tgz.
    const tarball = `${name.replace(/^@/, '').replace('/', '-')}-${version}.tgz`;
    const paths = [tarball, join('client', tarball)];
    const ignored = execFileSync('git', ['check-ignore', '--no-index', ...paths], {
      cwd: root,
      encoding: 'utf8',
    });
    expect(ignored.trim().split('\n')).toEqual(paths);
  });
});
