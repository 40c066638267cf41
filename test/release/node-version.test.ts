/**
 * One true Node version. package.json's `engines.node` names the lowest Node the project supports; it must be one
 * that every package in the lock file supports too (their own `engines.node`), or `npm install` on it prints
 * EBADENGINE and the floor is a wish. The README and docs/development.md state that floor, and CI's matrix starts
 * there, so the oldest supported Node is the one tested. A dependency update that raises its floor above ours fails
 * here, naming the package, before it reaches a user: pin it (package.json `overrides`) or raise the floor, with
 * the README and CI's matrix.
 */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, test } from 'node:test';
import semver from 'semver';
import { parse } from 'yaml';
import { REPO_ROOT } from '../support/process.js';

interface LockPackage {
  readonly version?: string;
  readonly engines?: { readonly node?: string } | readonly string[];
}

const readJson = (file: string): unknown => JSON.parse(readFileSync(join(REPO_ROOT, file), 'utf8'));
const enginesNode = (readJson('package.json') as { engines: { node: string } }).engines.node;
/** The lowest version the range admits: `>=20.18.1` is 20.18.1. */
const floor = semver.minVersion(enginesNode);

/** Each package of the lock file that states a Node range, with that range (the root project left out). */
function lockedNodeRanges(lock: { packages: Record<string, LockPackage> }): { name: string; range: string }[] {
  return Object.entries(lock.packages).flatMap(([path, entry]) => {
    // npm writes `engines` as an object; very old manifests had an array of strings, which npm ignores.
    const range = entry.engines !== undefined && !Array.isArray(entry.engines) ? (entry.engines as { node?: string }).node : undefined;
    return path === '' || range === undefined ? [] : [{ name: `${path.replace(/^.*node_modules\//, '')}@${entry.version ?? '?'}`, range }];
  });
}

/** The packages whose Node range leaves out `version`. */
function outgrown(ranges: readonly { name: string; range: string }[], version: string): string[] {
  return ranges.filter(({ range }) => !semver.satisfies(version, range)).map(({ name, range }) => `${name} (node ${range})`);
}

describe('the Node floor', () => {
  test('package.json states one, as a lower bound', () => {
    assert.ok(floor !== null, `engines.node "${enginesNode}" is not a semver range`);
    assert.ok(!semver.satisfies('999.0.0', `<${floor.version}`) && semver.satisfies('999.0.0', enginesNode), `engines.node "${enginesNode}" has an upper bound`);
  });

  test('every package in the lock file supports it', () => {
    const ranges = lockedNodeRanges(readJson('package-lock.json') as { packages: Record<string, LockPackage> });
    assert.ok(ranges.length > 20, `only ${ranges.length} packages state a Node range: is the lock file read?`);
    assert.deepEqual(outgrown(ranges, floor?.version ?? ''), [], `these need a newer Node than engines.node "${enginesNode}"`);
  });

  test('the check names a package that outgrew it (control)', () => {
    const ranges = [{ name: 'cookie@2.0.2', range: '>=22' }, { name: 'pino@10.4.0', range: '>=20' }];
    assert.deepEqual(outgrown(ranges, '20.18.0'), ['cookie@2.0.2 (node >=22)']);
  });

  test("the README, docs/development.md and CI's matrix start there", () => {
    const stated = `Node.js ${floor?.version}+`;
    for (const file of ['README.md', 'docs/development.md']) {
      assert.ok(readFileSync(join(REPO_ROOT, file), 'utf8').includes(stated), `${file} states "${stated}"`);
    }
    const ci = parse(readFileSync(join(REPO_ROOT, '.github/workflows/ci.yml'), 'utf8')) as { jobs: { test: { strategy: { matrix: { node: string[] } } } } };
    const majors = ci.jobs.test.strategy.matrix.node.map(Number);
    assert.equal(Math.min(...majors), floor?.major, `CI's matrix ${JSON.stringify(majors)} starts at Node ${floor?.major}`);
  });
});
