/**
 * manifests/self-signed: base/ plus the RBAC of --self-signed-certs and a Deployment patch. The RBAC must
 * be minimal and name exactly what the settings' defaults name; the Deployment must run that mode.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { parseAllDocuments } from 'yaml';
import { TLS_SECRET_NAME } from '../../src/certs/names.js';
import { SELF_MANAGED_DEFAULTS } from '../../src/certs/self-managed.js';
import { envName } from '../../src/config/settings.js';
import { WEBHOOK_SETTINGS, parseWebhookConfig } from '../../src/config/webhook.js';
import {
  MANIFESTS_DIR,
  findAll,
  findOne,
  get,
  getArray,
  getObject,
  getString,
  isObject,
  resolveKustomization,
  type JsonObject,
  type ManifestDoc,
} from '../support/manifests.js';

const DIR = join(MANIFESTS_DIR, 'self-signed');
const install = await resolveKustomization(DIR);
const base = await resolveKustomization(join(MANIFESTS_DIR, 'base'));

const deployment = findOne(install, 'Deployment');
const podSpec = getObject(deployment, ['spec', 'template', 'spec']);
const container = (getArray(podSpec, ['containers']) as JsonObject[])[0] as JsonObject;
const account = findOne(install, 'ServiceAccount');
const namespace = getString(deployment, ['metadata', 'namespace']);
const configuration = findOne(install, 'MutatingWebhookConfiguration');
const role = findOne(install, 'Role');
const clusterRole = findOne(install, 'ClusterRole');

/** The container's environment as the kubelet resolves it for this pod (fieldRef metadata.namespace included). */
function containerEnv(): Record<string, string> {
  const env: Record<string, string> = {};
  for (const variable of getArray(container, ['env']) as JsonObject[]) {
    const name = getString(variable, ['name']);
    if (variable.valueFrom === undefined) {
      env[name] = getString(variable, ['value'], `${name}: `);
      continue;
    }
    assert.equal(get(variable, ['valueFrom', 'fieldRef', 'fieldPath']), 'metadata.namespace', `${name}: only the namespace comes from the downward API`);
    env[name] = namespace;
  }
  return env;
}

const args = (getArray(container, ['args']) as string[]).filter((arg) => !arg.startsWith('mode='));
const config = parseWebhookConfig(args, containerEnv());
/** kind/namespace/name: what identifies an object in a cluster. */
const key = ({ value }: ManifestDoc): string => {
  const metadata = getObject(value, ['metadata']);
  return `${String(value.kind)}/${String(metadata.namespace ?? '')}/${String(metadata.name)}`;
};

describe('manifests/self-signed RBAC', () => {
  it("the Role allows get and update of the webhook's Secret only, by name, and create, which RBAC cannot restrict by name", () => {
    assert.equal(get(role, ['metadata', 'namespace']), namespace);
    assert.deepEqual(get(role, ['rules']), [
      { apiGroups: [''], resources: ['secrets'], resourceNames: [config.selfSignedCerts.secretName], verbs: ['get', 'update'] },
      { apiGroups: [''], resources: ['secrets'], verbs: ['create'] },
    ]);
  });

  it('the ClusterRole allows get and patch of the MutatingWebhookConfiguration of this install only, by name', () => {
    const name = getString(configuration, ['metadata', 'name']);
    assert.equal(config.selfSignedCerts.webhookConfigurationName, name);
    assert.deepEqual(get(clusterRole, ['rules']), [
      { apiGroups: ['admissionregistration.k8s.io'], resources: ['mutatingwebhookconfigurations'], resourceNames: [name], verbs: ['get', 'patch'] },
    ]);
  });

  it("names match the settings' defaults, so that no flag is needed for the default install", () => {
    assert.equal(config.selfSignedCerts.secretName, WEBHOOK_SETTINGS['tls-secret-name'].default);
    assert.equal(config.selfSignedCerts.webhookConfigurationName, WEBHOOK_SETTINGS['webhook-configuration-name'].default);
    assert.equal(config.selfSignedCerts.namespace, WEBHOOK_SETTINGS.namespace.default);
    assert.equal(config.selfSignedCerts.serviceName, WEBHOOK_SETTINGS['service-name'].default);
    assert.notEqual(config.selfSignedCerts.secretName, TLS_SECRET_NAME, 'never the Secret cert-manager or `npm run certs` writes');
  });

  it("each binding grants its role to the Deployment's ServiceAccount, and nothing else is bound", () => {
    const subject = { kind: 'ServiceAccount', name: getString(account, ['metadata', 'name']), namespace: getString(account, ['metadata', 'namespace']) };
    assert.equal(podSpec.serviceAccountName, subject.name);
    const pairs: [string, JsonObject][] = [
      ['RoleBinding', role],
      ['ClusterRoleBinding', clusterRole],
    ];
    for (const [kind, granted] of pairs) {
      const binding = findOne(install, kind);
      assert.deepEqual(get(binding, ['roleRef']), { apiGroup: 'rbac.authorization.k8s.io', kind: granted.kind, name: get(granted, ['metadata', 'name']) });
      assert.deepEqual(get(binding, ['subjects']), [subject]);
      if (kind === 'RoleBinding') assert.equal(get(binding, ['metadata', 'namespace']), namespace);
    }
  });

  it('has no wildcards, and every rule but create names its objects', () => {
    for (const granted of [role, clusterRole]) {
      for (const rule of getArray(granted, ['rules']) as JsonObject[]) {
        for (const field of ['apiGroups', 'resources', 'verbs', 'resourceNames']) {
          assert.ok(!((rule[field] ?? []) as string[]).includes('*'), `${String(granted.kind)} ${field} has a wildcard`);
        }
        const verbs = rule.verbs as string[];
        if (!verbs.includes('create')) assert.ok(Array.isArray(rule.resourceNames) && rule.resourceNames.length > 0, 'resourceNames');
        else assert.deepEqual(verbs, ['create'], 'create sits alone, since it cannot be restricted by name');
      }
    }
  });
});

describe('manifests/self-signed Deployment', () => {
  it('runs the webhook with --self-signed-certs and only known flags', () => {
    assert.deepEqual(getArray(container, ['args']), ['mode=webhook', '--self-signed-certs=true']);
    assert.equal(config.selfSignedCerts.enabled, true);
    assert.equal(config.devCerts, false);
  });

  it('takes its namespace from the downward API', () => {
    const variable = (getArray(container, ['env']) as JsonObject[]).find((v) => v.name === envName('namespace'));
    assert.ok(variable, `${envName('namespace')} is set`);
    assert.deepEqual(variable.valueFrom, { fieldRef: { fieldPath: 'metadata.namespace' } });
    assert.equal(config.selfSignedCerts.namespace, namespace);
  });

  it("issues for the Service's names: the Service is the one of the settings, in the pod's namespace", () => {
    const service = findOne(install, 'Service');
    assert.equal(getString(service, ['metadata', 'name']), config.selfSignedCerts.serviceName);
    assert.equal(getString(service, ['metadata', 'namespace']), config.selfSignedCerts.namespace);
    const target = getObject(configuration, ['webhooks', 0, 'clientConfig', 'service']);
    assert.deepEqual([target.name, target.namespace], [config.selfSignedCerts.serviceName, config.selfSignedCerts.namespace]);
  });

  it("has a startupProbe on /healthz that outlasts start-up's whole budget, so the pod exits with its reason first", () => {
    const probe = getObject(container, ['startupProbe']);
    assert.deepEqual(get(probe, ['httpGet']), get(container, ['livenessProbe', 'httpGet']), 'the endpoint liveness uses');
    assert.equal(get(probe, ['httpGet', 'scheme']), 'HTTPS');
    assert.equal(get(probe, ['httpGet', 'path']), '/healthz');
    assert.equal(get(probe, ['httpGet', 'port']), 'https');
    const number = (field: string, fallback: number): number => (typeof probe[field] === 'number' ? (probe[field] as number) : fallback);
    // The kubelet kills at the failureThreshold-th failed probe: the first runs at initialDelaySeconds.
    const killedAfterS = number('initialDelaySeconds', 0) + (number('failureThreshold', 3) - 1) * number('periodSeconds', 10);
    // Node and the Kubernetes client load in a second or two; 10 s more covers a slow node.
    const neededS = SELF_MANAGED_DEFAULTS.startupBudgetMs / 1000 + 10;
    assert.ok(killedAfterS >= neededS, `startupProbe gives up after ${killedAfterS} s; start-up may take ${neededS} s`);
    assert.ok(number('timeoutSeconds', 1) < number('periodSeconds', 10), 'the probe times out before the next one is due');
  });

  it('mounts the ServiceAccount token in this pod only: the ServiceAccount stays opted out', () => {
    assert.equal(podSpec.automountServiceAccountToken, true);
    assert.equal(account.automountServiceAccountToken, false);
  });

  it('has no certificate volume, no cert-manager object and no cainjector annotation', () => {
    assert.deepEqual((getArray(podSpec, ['volumes']) as JsonObject[]).map((v) => v.name), ['tmp']);
    assert.deepEqual((getArray(container, ['volumeMounts']) as JsonObject[]).map((m) => m.name), ['tmp']);
    assert.deepEqual(install.filter(({ value }) => String(value.apiVersion).startsWith('cert-manager.io/')), []);
    const annotations = (getObject(configuration, ['metadata']).annotations ?? {}) as Record<string, string>;
    assert.equal(annotations['cert-manager.io/inject-ca-from'], undefined, 'cainjector would fight over caBundle');
  });

  it('is base/ plus the four RBAC objects, nothing removed', () => {
    const rbac = ['Role', 'RoleBinding', 'ClusterRole', 'ClusterRoleBinding'];
    assert.deepEqual(install.map(key).sort(), [...base.map(key), ...install.filter(({ value }) => rbac.includes(String(value.kind))).map(key)].sort());
    assert.equal(findAll(install, 'Secret').length, 0, 'the Secret is created at run time, by the webhook');
  });

  it('is what kubectl kustomize renders (when kubectl is installed)', (t) => {
    const result = spawnSync('kubectl', ['kustomize', DIR], { encoding: 'utf8', timeout: 20_000 });
    if (result.error !== undefined) return t.skip(`kubectl not available: ${result.error.message}`);
    assert.equal(result.status, 0, result.stderr);
    const rendered = parseAllDocuments(result.stdout).map((doc) => doc.toJS() as JsonObject);
    const byKey = new Map(rendered.map((value) => [key({ file: '', value }), value]));
    assert.deepEqual([...byKey.keys()].sort(), install.map(key).sort());
    for (const doc of install) assert.deepEqual(byKey.get(key(doc)), withoutEmptyMaps(doc.value), key(doc));
  });
});

/** kustomize drops the maps a patch leaves empty (metadata.annotations once its last entry is removed). */
function withoutEmptyMaps(value: JsonObject): JsonObject {
  const copy = structuredClone(value);
  const metadata = copy.metadata as JsonObject;
  for (const field of ['annotations', 'labels']) {
    if (isObject(metadata[field]) && Object.keys(metadata[field]).length === 0) delete metadata[field];
  }
  return copy;
}
