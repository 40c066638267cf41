/**
 * The Contour Component (manifests/contour) on both of Contour's renders of Envoy: the DaemonSet named envoy
 * (test/fixtures/contour/03-envoy.yaml) and the Deployment named envoy (test/fixtures/contour/envoy-deployment.yaml,
 * from examples/render/contour-deployment.yaml). Each is built with the Component by `kubectl kustomize`, as a
 * user's kustomization would, then injected by the built CLI (`inject -f`): Contour's shutdown-manager is gone
 * and ours is in its place. The control: the Component as it was (a target of kind DaemonSet) leaves the
 * Deployment render with Contour's container, and the CLI then skips it.
 * The remote form of the Component names this repository and the package version's tag.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { copyFileSync, cpSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { DEFAULT_SIDECAR_IMAGE, PROJECT_VERSION } from '../../src/version.js';
import { MANIFESTS_DIR, getArray, getObject, type JsonObject } from '../support/manifests.js';
import { REPO_ROOT, runBuiltEntry } from '../support/process.js';

const FIXTURES = join(REPO_ROOT, 'test', 'fixtures', 'contour');
const COMPONENT = join(MANIFESTS_DIR, 'contour');
const RENDERS = [
  { kind: 'DaemonSet', file: '03-envoy.yaml' },
  { kind: 'Deployment', file: 'envoy-deployment.yaml' },
] as const;

function kubectlMissing(): string | undefined {
  const result = spawnSync('kubectl', ['version', '--client'], { timeout: 10_000 });
  return result.error === undefined ? undefined : `kubectl is not installed: ${result.error.message}`;
}

function tempDir(t: TestContext, prefix: string): string {
  const dir = mkdtempSync(join(tmpdir(), prefix));
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** `kubectl kustomize` of a user's kustomization: Contour's render as a resource, `component` as a component. */
function buildWithComponent(t: TestContext, render: string, component: string): string {
  const dir = tempDir(t, 'contour-render-');
  copyFileSync(join(FIXTURES, render), join(dir, render));
  // kustomize refuses an absolute path for a component: it must be relative to the kustomization.
  writeFileSync(join(dir, 'kustomization.yaml'), `resources:\n  - ${render}\ncomponents:\n  - ${relative(dir, component)}\n`);
  const result = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(result.status, 0, `kubectl kustomize of ${render} with ${component}: ${result.stderr}`);
  return result.stdout;
}

function workload(yaml: string, kind: string): JsonObject {
  const found = parseAllDocuments(yaml)
    .map((document) => document.toJS() as JsonObject)
    .filter((document) => document.kind === kind);
  assert.equal(found.length, 1, `one ${kind} in the output`);
  return found[0] as JsonObject;
}

function containers(object: JsonObject): { name: string; image: string }[] {
  return getArray(object, ['spec', 'template', 'spec', 'containers']) as { name: string; image: string }[];
}

/** The Component as it was before it covered the Deployment render: its target named kind DaemonSet. */
function daemonSetOnlyComponent(t: TestContext): string {
  const dir = tempDir(t, 'contour-component-');
  cpSync(COMPONENT, dir, { recursive: true });
  const text = readFileSync(join(dir, 'kustomization.yaml'), 'utf8');
  const narrowed = text.replace(/^(\s+)version: v1$/m, '$1version: v1\n$1kind: DaemonSet');
  assert.notEqual(narrowed, text, 'the control found the target to narrow');
  writeFileSync(join(dir, 'kustomization.yaml'), narrowed);
  return dir;
}

describe("the Contour Component on Contour's renders", () => {
  for (const { kind, file } of RENDERS) {
    test(`${kind} render: Contour's shutdown-manager removed by kubectl kustomize, ours injected by the CLI`, { timeout: 60_000 }, async (t) => {
      const missing = kubectlMissing();
      if (missing !== undefined) return t.skip(missing);
      const before = workload(readFileSync(join(FIXTURES, file), 'utf8'), kind);
      assert.ok(containers(before).some((container) => container.name === 'shutdown-manager' && container.image.includes('projectcontour')), `${file} has Contour's shutdown-manager`);
      const built = buildWithComponent(t, file, COMPONENT);
      assert.deepEqual(containers(workload(built, kind)).map((container) => container.name), ['envoy']);
      const injected = await runBuiltEntry(['inject', '--manual', '-f', '-'], { input: built, timeoutMs: 20_000 });
      assert.equal(injected.code, 0, injected.stderr);
      const after = containers(workload(injected.stdout, kind));
      assert.deepEqual(after.map((container) => container.name).sort(), ['envoy', 'shutdown-manager']);
      assert.equal(after.find((container) => container.name === 'shutdown-manager')?.image, DEFAULT_SIDECAR_IMAGE);
      const template = getObject(workload(injected.stdout, kind), ['spec', 'template', 'metadata', 'annotations']);
      assert.match(String(template['shutdown-manager.io/status']), /"adminAddress":"unix:\/admin\/admin.sock"/);
    });
  }

  test("control: a target of kind DaemonSet leaves the Deployment render with Contour's container, and the CLI skips it", { timeout: 60_000 }, async (t) => {
    const missing = kubectlMissing();
    if (missing !== undefined) return t.skip(missing);
    const built = buildWithComponent(t, 'envoy-deployment.yaml', daemonSetOnlyComponent(t));
    assert.deepEqual(containers(workload(built, 'Deployment')).map((container) => container.name), ['shutdown-manager', 'envoy']);
    const injected = await runBuiltEntry(['inject', '--manual', '-f', '-'], { input: built, timeoutMs: 20_000 });
    assert.match(injected.stderr, /skipped \(has a shutdown-manager container of its own/);
    assert.ok(!injected.stdout.includes(DEFAULT_SIDECAR_IMAGE), 'not injected');
  });
});

describe('the Contour Component, remotely', { timeout: 10_000 }, () => {
  test("its usage names this repository's path at the tag of the package version", () => {
    const text = readFileSync(join(COMPONENT, 'kustomization.yaml'), 'utf8');
    const urls = text.match(/github\.com\/\S+/g) ?? [];
    assert.deepEqual(urls, [`github.com/envoy-shutdown-manager/envoy-shutdown-manager//manifests/contour?ref=v${PROJECT_VERSION}`]);
    assert.doesNotMatch(text, /<org>/, 'no placeholder left');
  });
});
