/**
 * The CLI without a checkout (issue 35): `npm run pack:cli`'s tarball, installed in an empty directory as a user's
 * `npm install` or `npx` does, runs --version, version, inject and check --help from there, with nothing of the
 * checkout on its path. The package declares no dependency (every one is bundled), so the install is offline here:
 * if the bundles needed a package they do not hold, the commands below would fail to load it.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, test } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { layOutCliPackage, packCliPackage } from '../../tools/cli-package.js';
import { PROJECT_VERSION } from '../../src/version.js';
import { REPO_ROOT } from '../support/process.js';

const work = mkdtempSync(join(tmpdir(), 'esm-cli-package-'));
const user = join(work, 'user');
const BIN = join(user, 'node_modules', '.bin', 'envoy-shutdown-manager');

/** Runs a command in the user's directory, with a PATH of node's directory only: no checkout, no global npm packages. */
function run(command: string, args: readonly string[], input?: string): { status: number | null; stdout: string; stderr: string } {
  const result = spawnSync(command, args, {
    cwd: user,
    encoding: 'utf8',
    timeout: 60_000,
    input,
    env: { PATH: `${join(process.execPath, '..')}:/usr/bin:/bin`, HOME: work, npm_config_cache: join(work, 'npm-cache'), NO_COLOR: '1' },
  });
  return { status: result.status, stdout: result.stdout, stderr: result.stderr };
}

let manifest: Record<string, unknown>;
let tarball: string;

before(() => {
  manifest = layOutCliPackage(join(work, 'package'));
  tarball = packCliPackage(join(work, 'package'), join(work, 'packed'));
  mkdirSync(user);
  const installed = run('npm', ['install', '--offline', '--no-audit', '--no-fund', '--no-package-lock', tarball]);
  assert.equal(installed.status, 0, `npm install of the tarball: ${installed.stderr}`);
});

after(() => rmSync(work, { recursive: true, force: true }));

describe('the CLI package', () => {
  test('declares no dependency, the Node floor of the project, and its bin; holds the bundles and licences, no source', () => {
    const project = JSON.parse(readFileSync(join(REPO_ROOT, 'package.json'), 'utf8')) as { engines: unknown; bin: unknown; name: string; version: string };
    assert.equal(manifest['dependencies'], undefined);
    assert.equal(manifest['private'], undefined, 'publishable');
    assert.deepEqual([manifest['name'], manifest['version'], manifest['engines'], manifest['bin']], [project.name, project.version, project.engines, project.bin]);
    const listed = spawnSync('tar', ['tzf', tarball], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean);
    for (const file of ['package/dist/entry.cjs', 'package/dist/sidecar.cjs', 'package/dist/sidecar-engine.cjs', 'package/dist/sidecar-metrics.cjs', 'package/dist/app/main.js', 'package/dist/licenses/sbom.cdx.json', 'package/LICENSE', 'package/README.md']) {
      assert.ok(listed.includes(file), `${file} in the tarball`);
    }
    assert.deepEqual(listed.filter((file) => /\.ts$|\/src\/|node_modules/.test(file)), [], 'no source, no node_modules');
    assert.deepEqual(readdirSync(join(user, 'node_modules')).filter((name) => !name.startsWith('.')), ['envoy-shutdown-manager'], 'nothing else installed');
  });

  test('--version and version print the package version', () => {
    for (const args of [['--version'], ['version']]) {
      const answer = run(BIN, args);
      assert.equal(answer.status, 0, `${args.join(' ')}: ${answer.stderr}`);
      assert.match(answer.stdout, new RegExp(`\\b${PROJECT_VERSION.replaceAll('.', '\\.')}\\b`), args.join(' '));
    }
  });

  test('npx runs the installed bin', () => {
    const answer = run('npx', ['--offline', '--no-install', 'envoy-shutdown-manager', '--version']);
    assert.equal(answer.status, 0, answer.stderr);
    assert.match(answer.stdout, new RegExp(PROJECT_VERSION.replaceAll('.', '\\.')));
  });

  test('inject --manual adds the sidecar to a Deployment read from stdin', () => {
    const deployment = readFileSync(join(REPO_ROOT, 'manifests', 'example', 'deployment.yaml'), 'utf8');
    const answer = run(BIN, ['inject', '--manual', '-'], deployment);
    assert.equal(answer.status, 0, answer.stderr);
    const [injected] = parseAllDocuments(answer.stdout).map((document) => document.toJS() as { spec: { template: { spec: { containers?: { name: string }[]; initContainers?: { name: string }[] } } } });
    const { containers = [], initContainers = [] } = injected?.spec.template.spec ?? {};
    assert.ok([...containers, ...initContainers].some((container) => container.name === 'shutdown-manager'), answer.stdout);
  });

  test('check --help prints its usage; check without a cluster says which kubeconfig it could not load', () => {
    const help = run(BIN, ['check', '--help']);
    assert.equal(help.status, 0, help.stderr);
    assert.match(help.stdout, /^Usage: envoy-shutdown-manager check/);
    const noCluster = run(BIN, ['check', '--kubeconfig', join(work, 'no-such-kubeconfig')]);
    assert.equal(noCluster.status, 2, noCluster.stdout);
    assert.match(noCluster.stderr, /cannot load the kubeconfig .*no-such-kubeconfig/);
  });
});
