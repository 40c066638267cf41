/**
 * The API server sends the webhook the pods its objectSelector matches; the webhook injects the pods its
 * --pod-selector matches. Every install, and the Envoy Gateway Component (manifests/envoy-gateway, shown in
 * docs/distributions.md) that changes them, keeps the two in
 * agreement: a pod that one selects and the other does not would be skipped silently (or, with a manual
 * call, injected against the configuration).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cp, mkdtemp, readFile, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, it } from 'node:test';
import { canonicalLabelSelector, formatLabelSelector, fromObjectSelector, matchesLabels, parseLabelSelector, type LabelSelector } from '../../src/config/label-selector.js';
import { envName } from '../../src/config/settings.js';
import { DEFAULT_POD_SELECTOR, parseWebhookConfig, WEBHOOK_SETTINGS, type WebhookConfig } from '../../src/config/webhook.js';
import { PROJECT_VERSION } from '../../src/version.js';
import { REPO_ROOT } from '../support/process.js';
import {
  applyComponent,
  applyOverlay,
  findOne,
  getArray,
  getObject,
  isObject,
  MANIFESTS_DIR,
  resolveKustomization,
  selects,
  type JsonObject,
  type ManifestDoc,
} from '../support/manifests.js';

/** What the webhook of an install runs with (its args and env), and the objectSelector it is called for. */
function installedSelectors(docs: readonly ManifestDoc[]): { flag: LabelSelector; objectSelector: unknown; config: WebhookConfig } {
  const deployment = findOne(docs, 'Deployment', 'envoy-shutdown-manager');
  const container = (getArray(deployment, ['spec', 'template', 'spec', 'containers']) as JsonObject[])[0] as JsonObject;
  const args = (getArray(container, ['args']) as string[]).filter((arg) => !arg.startsWith('mode='));
  const env = Object.fromEntries(
    (getArray(container, ['env']) as JsonObject[]).filter((v) => typeof v.value === 'string').map((v) => [v.name, v.value]),
  ) as Record<string, string>;
  const config = parseWebhookConfig(args, env);
  const configuration = findOne(docs, 'MutatingWebhookConfiguration');
  const webhook = (getArray(configuration, ['webhooks']) as JsonObject[])[0] as JsonObject;
  return { flag: config.injection.podSelector, objectSelector: getObject(webhook, ['objectSelector']), config };
}

function assertAgree(docs: readonly ManifestDoc[], where: string): { flag: LabelSelector; config: WebhookConfig } {
  const { flag, objectSelector, config } = installedSelectors(docs);
  assert.equal(
    canonicalLabelSelector(fromObjectSelector(objectSelector)),
    canonicalLabelSelector(flag),
    `${where}: objectSelector ${JSON.stringify(objectSelector)} and --pod-selector ${formatLabelSelector(flag)} select different pods`,
  );
  return { flag, config };
}

/** An overlay that changes the objectSelector and not the webhook's selector: the drift the tests must catch. */
const OBJECT_SELECTOR_ALONE = [
  'apiVersion: kustomize.config.k8s.io/v1beta1',
  'kind: Kustomization',
  'patches:',
  '  - target: {kind: MutatingWebhookConfiguration, name: shutdown-manager.io}',
  '    patch: |-',
  '      - {op: replace, path: /webhooks/0/objectSelector, value: {matchLabels: {app.kubernetes.io/name: envoy}}}',
].join('\n');

describe('objectSelector and --pod-selector', () => {
  for (const dir of [MANIFESTS_DIR, join(MANIFESTS_DIR, 'base'), join(MANIFESTS_DIR, 'self-signed')]) {
    const name = relative(REPO_ROOT, dir);
    it(`${name}: select the same pods`, async () => {
      assertAgree(await resolveKustomization(dir), name);
    });
  }

  it('the manifests set the flag to its default, so that a webhook started without it still agrees', async () => {
    const { flag } = installedSelectors(await resolveKustomization(MANIFESTS_DIR));
    assert.equal(canonicalLabelSelector(flag), canonicalLabelSelector(parseLabelSelector(DEFAULT_POD_SELECTOR)));
    assert.equal(formatLabelSelector(WEBHOOK_SETTINGS['pod-selector'].default), DEFAULT_POD_SELECTOR);
  });

  it("the test can tell them apart: an objectSelector changed alone is caught", async () => {
    const docs = await resolveKustomization(MANIFESTS_DIR);
    const drifted = applyOverlay(
      OBJECT_SELECTOR_ALONE,
      'drifted overlay',
      docs,
    );
    assert.throws(() => assertAgree(drifted, 'drifted'), /select different pods/);
  });
});

/** `kubectl kustomize dir` (kustomize itself), or undefined without kubectl. */
function kubectlKustomize(dir: string): JsonObject[] | undefined {
  const result = spawnSync('kubectl', ['kustomize', dir], { encoding: 'utf8', timeout: 20_000 });
  if (result.error !== undefined) return undefined;
  assert.equal(result.status, 0, result.stderr);
  return parseAllDocuments(result.stdout).map((doc) => doc.toJS() as JsonObject);
}

/** kustomize drops the annotations a patch emptied (manifests/self-signed removes cert-manager's only one); JSON patch keeps {}. */
function withoutEmptyAnnotations(value: JsonObject): JsonObject {
  const metadata = getObject(value, ['metadata']);
  if (!isObject(metadata.annotations) || Object.keys(metadata.annotations).length > 0) return value;
  const { annotations: _, ...rest } = metadata;
  return { ...value, metadata: rest };
}

const keyOf = (value: JsonObject): string => `${String(value.kind)}/${String(getObject(value, ['metadata']).name)}`;

/** manifests/base copied to a temporary directory, with its Deployment's SHUTDOWN_MANAGER_POD_SELECTOR set to `selector`. */
async function baseWithSelector(selector: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-selector-'));
  await cp(join(MANIFESTS_DIR, 'base'), dir, { recursive: true });
  const path = join(dir, 'deployment.yaml');
  const text = await readFile(path, 'utf8');
  const edited = text.replace(/(- name: SHUTDOWN_MANAGER_POD_SELECTOR\n\s+value: ).*/, `$1${selector}`);
  assert.notEqual(edited, text, 'deployment.yaml sets SHUTDOWN_MANAGER_POD_SELECTOR');
  await writeFile(path, edited);
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

describe('one selector: the objectSelector is made from SHUTDOWN_MANAGER_POD_SELECTOR', () => {
  it('a selector changed in the Deployment alone changes the objectSelector too (the replacements of manifests/base)', async (t) => {
    const { dir, remove } = await baseWithSelector('app.kubernetes.io/name=envoy-proxy');
    try {
      const docs = await resolveKustomization(dir);
      const { flag } = assertAgree(docs, 'base with another selector');
      assert.equal(formatLabelSelector(flag), 'app.kubernetes.io/name=envoy-proxy');
      const objectSelector = getObject(findOne(docs, 'MutatingWebhookConfiguration'), ['webhooks', 0, 'objectSelector']);
      assert.equal(selects(objectSelector, { 'app.kubernetes.io/name': 'envoy-proxy' }), true);
      assert.equal(selects(objectSelector, { app: 'envoy' }), false, 'the old selector is gone');

      // kustomize itself, where kubectl is installed: the same objects.
      const rendered = kubectlKustomize(dir);
      if (rendered === undefined) return t.skip('kubectl is not installed: the replacement was checked with the tests\' own kustomize only');
      const configuration = rendered.find((value) => value.kind === 'MutatingWebhookConfiguration');
      assert.deepEqual(getObject(configuration, ['webhooks', 0, 'objectSelector']), objectSelector);
    } finally {
      await remove();
    }
  });

  for (const dir of [MANIFESTS_DIR, join(MANIFESTS_DIR, 'base'), join(MANIFESTS_DIR, 'self-signed')]) {
    it(`${relative(REPO_ROOT, dir)}: kubectl kustomize renders exactly what these tests resolve`, async (t) => {
      const rendered = kubectlKustomize(dir);
      if (rendered === undefined) return t.skip('kubectl is not installed');
      const resolved = (await resolveKustomization(dir)).map(({ value }) => withoutEmptyAnnotations(value));
      assert.deepEqual(rendered.map(keyOf).sort(), resolved.map(keyOf).sort());
      for (const value of resolved) assert.deepEqual(rendered.find((other) => keyOf(other) === keyOf(value)), value, keyOf(value));
    });
  }
});

/** Where the Envoy Gateway Component is documented. */
const COMPONENT_DOC = 'docs/distributions.md';
const ENVOY_GATEWAY = join(MANIFESTS_DIR, 'envoy-gateway');
const REMOTE = 'github.com/envoy-shutdown-manager/envoy-shutdown-manager//';

/** The YAML block that follows `<!-- component: name -->` in the distributions docs. */
async function documentedKustomization(name: string): Promise<string> {
  const page = await readFile(join(REPO_ROOT, COMPONENT_DOC), 'utf8');
  const marker = `<!-- component: ${name} -->`;
  const at = page.indexOf(marker);
  assert.notEqual(at, -1, `${COMPONENT_DOC} has no ${marker}`);
  const block = /```yaml\n([\s\S]*?)```/.exec(page.slice(at));
  assert.ok(block, `a yaml block after ${marker}`);
  return block[1] as string;
}

/** Envoy Gateway's selector, flag and objectSelector agreeing, and the admin port set: what the Component is for. */
function assertSelectsEnvoyGateway(docs: readonly ManifestDoc[], where: string): void {
  const { flag, config } = assertAgree(docs, where);
  assert.equal(config.injection.defaults['admin-port'], 19000, `${where}: ${envName('admin-port')} set by the Component`);
  // What Envoy Gateway puts on its proxy pods (labels of its rendered Deployment).
  const proxy = {
    'app.kubernetes.io/component': 'proxy',
    'app.kubernetes.io/managed-by': 'envoy-gateway',
    'app.kubernetes.io/name': 'envoy',
    'gateway.envoyproxy.io/owning-gateway-name': 'eg',
    'gateway.envoyproxy.io/owning-gateway-namespace': 'default',
    'pod-template-hash': '5d8c7f9b6',
  };
  const objectSelector = getObject(findOne(docs, 'MutatingWebhookConfiguration'), ['webhooks', 0, 'objectSelector']);
  assert.equal(matchesLabels(flag, proxy), true, where);
  assert.equal(selects(objectSelector, proxy), true, where);
  // Envoy Gateway's own controller pod is named gateway-helm, not envoy: neither selects it.
  const controller = { 'app.kubernetes.io/instance': 'eg', 'app.kubernetes.io/name': 'gateway-helm', 'control-plane': 'envoy-gateway' };
  assert.equal(matchesLabels(flag, controller), false, where);
  assert.equal(selects(objectSelector, controller), false, where);
}

/** The documented kustomization in a temporary directory, its remote URLs replaced by this checkout's directories. */
async function documentedWithCheckout(install: string): Promise<{ dir: string; remove: () => Promise<void> }> {
  const dir = await mkdtemp(join(tmpdir(), 'esm-envoy-gateway-'));
  const local = (path: string): string => relative(dir, join(REPO_ROOT, path));
  const text = (await documentedKustomization('envoy-gateway'))
    .replace(`${REMOTE}manifests?ref=v${PROJECT_VERSION}`, local(install))
    .replace(`${REMOTE}manifests/envoy-gateway?ref=v${PROJECT_VERSION}`, local('manifests/envoy-gateway'));
  assert.doesNotMatch(text, /github\.com/, 'every remote URL of the block names this version\'s tag');
  await writeFile(join(dir, 'kustomization.yaml'), text);
  return { dir, remove: () => rm(dir, { recursive: true, force: true }) };
}

describe('the Envoy Gateway Component (manifests/envoy-gateway)', () => {
  for (const install of ['manifests', 'manifests/self-signed']) {
    it(`on ${install}: changes the objectSelector and the flag together, and points the sidecar at admin port 19000`, async () => {
      assertSelectsEnvoyGateway(await applyComponent(ENVOY_GATEWAY, await resolveKustomization(join(REPO_ROOT, install))), `Component on ${install}`);
    });

    it(`the documented kustomization on ${install}, built by kubectl kustomize: the same objects`, async (t) => {
      const { dir, remove } = await documentedWithCheckout(install);
      try {
        const rendered = kubectlKustomize(dir);
        if (rendered === undefined) return t.skip('kubectl is not installed: the Component was checked with the tests\' own kustomize only');
        const resolved = (await applyComponent(ENVOY_GATEWAY, await resolveKustomization(join(REPO_ROOT, install)))).map(({ value }) => withoutEmptyAnnotations(value));
        assert.deepEqual(rendered.map(keyOf).sort(), resolved.map(keyOf).sort());
        for (const value of resolved) assert.deepEqual(rendered.find((other) => keyOf(other) === keyOf(value)), value, keyOf(value));
        assertSelectsEnvoyGateway(rendered.map((value) => ({ file: 'kubectl kustomize', value })), `kubectl kustomize on ${install}`);
      } finally {
        await remove();
      }
    });
  }

  it('the control: the Component with one selector changed alone is caught', async () => {
    const docs = await applyComponent(ENVOY_GATEWAY, await resolveKustomization(MANIFESTS_DIR));
    const drifted = applyOverlay(
      OBJECT_SELECTOR_ALONE,
      'drifted Component',
      docs,
    );
    assert.throws(() => assertSelectsEnvoyGateway(drifted, 'drifted'), /select different pods/);
  });
});
