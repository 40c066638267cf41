/** Every manifest parses, and every kustomization lists exactly the files next to it. */
import assert from 'node:assert/strict';
import { access, readdir } from 'node:fs/promises';
import { join, relative } from 'node:path';
import { describe, it } from 'node:test';
import { REPO_ROOT } from '../support/process.js';
import {
  MANIFESTS_DIR,
  componentDirs,
  getString,
  isDirectory,
  isObject,
  loadKustomization,
  loadYamlFile,
  manifestDirs,
  resolveKustomization,
} from '../support/manifests.js';

const CLUSTER_SCOPED = new Set(['Namespace', 'MutatingWebhookConfiguration', 'ClusterRole', 'ClusterRoleBinding']);

const dirs = await manifestDirs();

describe('manifests/ layout', () => {
  it('has the default install, the install without cert-manager, the self-signed install, the example, monitoring, and the RBAC of check', () => {
    assert.deepEqual(
      dirs.map((dir) => relative(REPO_ROOT, dir)).sort(),
      ['manifests', 'manifests/base', 'manifests/check', 'manifests/example', 'manifests/monitoring', 'manifests/self-signed'],
    );
  });

  for (const dir of dirs) {
    const name = relative(REPO_ROOT, dir);

    it(`${name}: kustomization.yaml lists every YAML file there and nothing that is missing`, async () => {
      const { resources } = await loadKustomization(dir);
      const yamlFiles = (await readdir(dir, { withFileTypes: true }))
        .filter((entry) => entry.isFile() && /\.ya?ml$/.test(entry.name) && entry.name !== 'kustomization.yaml')
        .map((entry) => entry.name);
      const listedFiles = [];
      for (const entry of resources) {
        const path = join(dir, entry);
        await access(path).catch(() => assert.fail(`${name}/kustomization.yaml lists ${entry}, which does not exist`));
        if (await isDirectory(path)) {
          await access(join(path, 'kustomization.yaml')).catch(() =>
            assert.fail(`${name}/kustomization.yaml lists directory ${entry}, which has no kustomization.yaml`),
          );
        } else {
          listedFiles.push(entry);
        }
      }
      assert.deepEqual([...listedFiles].sort(), [...yamlFiles].sort(), `${name}/kustomization.yaml resources`);
      assert.equal(new Set(resources).size, resources.length, `${name}/kustomization.yaml lists an entry twice`);
    });

    it(`${name}: every document is a named Kubernetes object, namespaced where it must be`, async () => {
      const files = (await readdir(dir)).filter((file) => /\.ya?ml$/.test(file) && file !== 'kustomization.yaml');
      assert.ok(files.length > 0 || name === 'manifests', `${name} has manifests`);
      for (const file of files) {
        const docs = await loadYamlFile(join(dir, file));
        assert.ok(docs.length > 0, `${name}/${file} is empty`);
        for (const doc of docs) {
          assert.ok(isObject(doc), `${name}/${file}: a document is not a mapping`);
          const where = `${name}/${file} ${String(doc.kind)}: `;
          getString(doc, ['apiVersion'], where);
          const kind = getString(doc, ['kind'], where);
          getString(doc, ['metadata', 'name'], where);
          if (CLUSTER_SCOPED.has(kind)) {
            assert.equal(get(doc, 'namespace'), undefined, `${where}cluster-scoped objects take no namespace`);
          } else {
            getString(doc, ['metadata', 'namespace'], where);
          }
        }
      }
    });
  }

  it('has two kustomize Components, the Contour and Envoy Gateway recipes: their patches exist and they list no resources', async () => {
    const components = await componentDirs();
    assert.deepEqual(components.map((dir) => relative(REPO_ROOT, dir)), ['manifests/contour', 'manifests/envoy-gateway']);
    for (const dir of components) {
      const [doc] = await loadYamlFile(join(dir, 'kustomization.yaml'));
      assert.ok(isObject(doc), 'the document is an object');
      assert.equal(doc.apiVersion, 'kustomize.config.k8s.io/v1alpha1');
      assert.equal(doc.resources, undefined, 'a recipe adds nothing of its own');
      // Inline patches (envoy-gateway's) name no file.
      const patchFiles = ((doc.patches ?? []) as { path?: string }[]).flatMap((patch) => (patch.path === undefined ? [] : [patch.path]));
      const yamlFiles = (await readdir(dir)).filter((file) => /\.ya?ml$/.test(file) && file !== 'kustomization.yaml');
      assert.deepEqual([...patchFiles].sort(), yamlFiles.sort(), 'every patch file is used and exists');
    }
  });

  it('the default install includes cert-manager.yaml and the whole base', async () => {
    const { resources } = await loadKustomization(MANIFESTS_DIR);
    assert.deepEqual([...resources].sort(), ['base', 'cert-manager.yaml']);
  });

  it('no object is defined twice in one install', async () => {
    for (const dir of dirs) {
      const keys = (await resolveKustomization(dir)).map(
        ({ value }) =>
          `${String(value.kind)}/${String((value.metadata as Record<string, unknown>).namespace ?? '')}/${String((value.metadata as Record<string, unknown>).name)}`,
      );
      assert.deepEqual(
        keys.filter((key, index) => keys.indexOf(key) !== index),
        [],
        `duplicates in ${relative(REPO_ROOT, dir)}`,
      );
    }
  });
});

function get(doc: Record<string, unknown>, field: 'namespace'): unknown {
  return isObject(doc.metadata) ? doc.metadata[field] : undefined;
}
