import { readFileSync } from 'node:fs';
import semver from 'semver';
import { describe, expect, it } from 'vitest';

// .npmrc turns npm's engine warnings off, since npm checks them against the Node that runs npm,
// not the pinned node@24 devDependency every script runs on. This checks them against that one.
const root = new URL('../', import.meta.url);
const read = (path: string) => JSON.parse(readFileSync(new URL(path, root), 'utf8'));
const lock = read('package-lock.json') as {
  packages: Record<string, { engines?: { node?: string }; dev?: boolean }>;
};
const pinned: string = read('package.json').devDependencies.node;

describe('engines', () => {
  it('pins node exactly, and the installed one is that version', () => {
    expect(semver.valid(pinned)).toBe(pinned);
    expect(read('node_modules/node/package.json').version).toBe(pinned);
    expect(process.version).toBe(`v${pinned}`);
  });

  it("every locked package's engines accept the pinned node", () => {
    const refused = Object.entries(lock.packages)
      .filter(([, pkg]) => typeof pkg.engines?.node === 'string')
      .filter(([, pkg]) => !semver.satisfies(pinned, pkg.engines?.node ?? '*'))
      .map(([path, pkg]) => `${path || 'root'}: ${pkg.engines?.node}`);
    expect(refused).toEqual([]);
    // The check reads something: the packages that printed warnings on Node 20 declare engines.
    expect(semver.satisfies('20.20.2', lock.packages['']?.engines?.node ?? '*')).toBe(false);
  });
});
