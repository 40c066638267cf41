/**
 * The webhook install agrees with the code: paths, ports, flags and env names come from src/config, and
 * the names `npm run certs` prints are the ones the manifests use.
 */
import assert from 'node:assert/strict';
import { join } from 'node:path';
import { describe, it } from 'node:test';
import { serviceDnsNames } from '../../src/certs/generate.js';
import { TLS_SECRET_NAME, WEBHOOK_CONFIGURATION_NAME, WEBHOOK_NAME } from '../../src/certs/names.js';
import { WEBHOOK_PATHS } from '../../src/config/endpoints.js';
import { envName } from '../../src/config/settings.js';
import { compareQuantities, isZero, parseQuantity } from '../../src/config/quantity.js';
import { WEBHOOK_SETTINGS, parseWebhookConfig } from '../../src/config/webhook.js';
import { DEFAULT_SIDECAR_IMAGE } from '../../src/version.js';
import {
  MANIFESTS_DIR,
  findAll,
  findOne,
  get,
  getArray,
  getObject,
  getString,
  namespaceLabels,
  resolveContainerPort,
  resolveKustomization,
  selects,
  type JsonObject,
} from '../support/manifests.js';

const INJECT_LABEL = 'shutdown-manager.io/inject';

const install = await resolveKustomization(MANIFESTS_DIR);
const base = await resolveKustomization(join(MANIFESTS_DIR, 'base'));
const example = await resolveKustomization(join(MANIFESTS_DIR, 'example'));

const configuration = findOne(install, 'MutatingWebhookConfiguration');
const webhooks = getArray(configuration, ['webhooks']) as JsonObject[];
const webhook = webhooks[0] as JsonObject;
const deployment = findOne(install, 'Deployment');
const podTemplate = getObject(deployment, ['spec', 'template']);
const podSpec = getObject(podTemplate, ['spec']);
const container = (getArray(podSpec, ['containers']) as JsonObject[])[0] as JsonObject;
const service = findOne(install, 'Service');
const ownNamespaceName = getString(deployment, ['metadata', 'namespace']);
const ownNamespace = findOne(install, 'Namespace', ownNamespaceName);
const podLabels = getObject(podTemplate, ['metadata', 'labels']) as Record<string, string>;

describe('MutatingWebhookConfiguration', () => {
  it('has one webhook, named as `npm run certs` prints it', () => {
    assert.equal(webhooks.length, 1, 'the caBundle patch printed by npm run certs targets /webhooks/0');
    assert.equal(getString(configuration, ['metadata', 'name']), WEBHOOK_CONFIGURATION_NAME);
    assert.equal(webhook.name, WEBHOOK_NAME);
  });

  it('is sent pod CREATEs only', () => {
    assert.deepEqual(webhook.rules, [
      { operations: ['CREATE'], apiGroups: [''], apiVersions: ['v1'], resources: ['pods'], scope: 'Namespaced' },
    ]);
  });

  it('selects pods labelled app: envoy, and not the webhook itself', () => {
    // Written as an expression, whose key and value the base's replacements fill from SHUTDOWN_MANAGER_POD_SELECTOR.
    assert.deepEqual(getObject(webhook, ['objectSelector']), { matchExpressions: [{ key: 'app', operator: 'In', values: ['envoy'] }] });
    assert.equal(selects(webhook.objectSelector, { app: 'envoy', 'pod-template-hash': 'abc' }), true);
    assert.equal(selects(webhook.objectSelector, { app: 'nginx' }), false);
    assert.equal(selects(webhook.objectSelector, podLabels), false, 'the webhook pods must not match');
  });

  it('selects only namespaces labelled shutdown-manager.io/inject=enabled (or true, as the pod annotation takes)', () => {
    assert.equal(selects(webhook.namespaceSelector, { [INJECT_LABEL]: 'enabled', 'kubernetes.io/metadata.name': 'apps' }), true);
    assert.equal(selects(webhook.namespaceSelector, { [INJECT_LABEL]: 'true', 'kubernetes.io/metadata.name': 'apps' }), true);
    assert.equal(selects(webhook.namespaceSelector, { [INJECT_LABEL]: 'false' }), false);
    assert.equal(selects(webhook.namespaceSelector, { [INJECT_LABEL]: 'disabled' }), false);
    assert.equal(selects(webhook.namespaceSelector, { 'kubernetes.io/metadata.name': 'apps' }), false);
  });

  it("never selects the webhook's own namespace, even if someone labels it", () => {
    const labels = namespaceLabels(ownNamespace);
    assert.equal(labels[INJECT_LABEL], undefined, 'the webhook namespace must not opt in');
    assert.equal(selects(webhook.namespaceSelector, labels), false);
    assert.equal(selects(webhook.namespaceSelector, { ...labels, [INJECT_LABEL]: 'enabled' }), false);
  });

  it('calls the Service on the mutate path of the server', () => {
    const target = getObject(webhook, ['clientConfig', 'service']);
    assert.equal(target.path, WEBHOOK_PATHS.mutate);
    assert.equal(target.name, getString(service, ['metadata', 'name']));
    assert.equal(target.namespace, getString(service, ['metadata', 'namespace']));
    const ports = getArray(service, ['spec', 'ports']) as JsonObject[];
    assert.ok(
      ports.some((port) => port.port === (target.port ?? 443)),
      `the Service exposes port ${String(target.port ?? 443)}`,
    );
    assert.equal(getObject(webhook, ['clientConfig']).url, undefined, 'the Service is called, not a URL');
  });

  it('is safe for dry runs, quick, reinvoked when needed, and fails open', () => {
    assert.equal(webhook.sideEffects, 'None');
    assert.deepEqual(webhook.admissionReviewVersions, ['v1']);
    assert.equal(typeof webhook.timeoutSeconds, 'number');
    assert.ok((webhook.timeoutSeconds as number) >= 1 && (webhook.timeoutSeconds as number) <= 10, `a timeout of 1 to 10 s: ${String(webhook.timeoutSeconds)}`);
    assert.equal(webhook.reinvocationPolicy, 'IfNeeded');
    // Stated explicitly: the API server's default is Fail, see the comment in the manifest.
    assert.equal(webhook.failurePolicy, 'Ignore');
  });
});

describe('webhook Deployment', () => {
  it('runs two replicas spread over nodes, its selector matching its pods', () => {
    assert.equal(get(deployment, ['spec', 'replicas']), 2);
    assert.equal(selects(get(deployment, ['spec', 'selector']), podLabels), true);
    const terms = getArray(podSpec, ['affinity', 'podAntiAffinity', 'preferredDuringSchedulingIgnoredDuringExecution']);
    assert.ok(
      terms.some(
        (term) =>
          get(term, ['podAffinityTerm', 'topologyKey']) === 'kubernetes.io/hostname' &&
          selects(get(term, ['podAffinityTerm', 'labelSelector']), podLabels),
      ),
      'a preferred anti-affinity on kubernetes.io/hostname that selects the webhook pods',
    );
  });

  it('serves HTTPS on the default webhook port, named https', () => {
    const ports = getArray(container, ['ports']) as JsonObject[];
    const https = ports.find((port) => port.name === 'https');
    assert.ok(https, 'a container port named https');
    assert.equal(https.containerPort, WEBHOOK_SETTINGS.port.default);
  });

  it('is reached through the Service, whose targetPort is that container port', () => {
    assert.equal(selects({ matchLabels: getObject(service, ['spec', 'selector']) }, podLabels), true);
    const ports = getArray(service, ['spec', 'ports']) as JsonObject[];
    assert.equal(ports.length, 1);
    assert.equal(resolveContainerPort(container, (ports[0] as JsonObject).targetPort), WEBHOOK_SETTINGS.port.default);
  });

  it('probes the health endpoints over HTTPS', () => {
    for (const [probe, path] of [
      ['readinessProbe', WEBHOOK_PATHS.readyz],
      ['livenessProbe', WEBHOOK_PATHS.healthz],
    ] as const) {
      const httpGet = getObject(container, [probe, 'httpGet']);
      assert.equal(httpGet.path, path, `${probe} path`);
      assert.equal(httpGet.scheme, 'HTTPS', `${probe} scheme`);
      assert.equal(resolveContainerPort(container, httpGet.port), WEBHOOK_SETTINGS.port.default, `${probe} port`);
    }
  });

  it('passes only known flags, with valid values', () => {
    const args = getArray(container, ['args']) as string[];
    for (const arg of args) {
      if (arg.startsWith('mode=')) {
        assert.equal(arg, 'mode=webhook');
        continue;
      }
      const match = /^--([a-z-]+)=(.*)$/.exec(arg);
      assert.ok(match, `${arg}: flags are written --name=value`);
      const [, name, value] = match as unknown as [string, string, string];
      assert.ok(Object.hasOwn(WEBHOOK_SETTINGS, name), `--${name} is not a webhook setting`);
      const setting = WEBHOOK_SETTINGS[name as keyof typeof WEBHOOK_SETTINGS];
      assert.notEqual(setting.kind.parse(value), undefined, `--${name}=${value}: expected ${setting.kind.form}`);
    }
  });

  it('sets only environment variables of known settings, with valid values', () => {
    const known = new Map(Object.keys(WEBHOOK_SETTINGS).map((name) => [envName(name), name as keyof typeof WEBHOOK_SETTINGS]));
    const env = getArray(container, ['env']) as JsonObject[];
    assert.ok(env.length > 0, 'the webhook sets environment variables');
    for (const variable of env) {
      const name = getString(variable, ['name']);
      const setting = known.get(name);
      assert.ok(setting, `${name} is not the variable of any webhook setting`);
      const value = getString(variable, ['value'], `${name}: `);
      assert.notEqual(WEBHOOK_SETTINGS[setting].kind.parse(value), undefined, `${name}=${value}`);
    }
  });

  it('starts with a configuration the webhook accepts, using this image as the sidecar', () => {
    const args = (getArray(container, ['args']) as string[]).filter((arg) => !arg.startsWith('mode='));
    const env = Object.fromEntries((getArray(container, ['env']) as JsonObject[]).map((v) => [v.name, v.value])) as Record<string, string>;
    const config = parseWebhookConfig(args, env);
    assert.equal(config.port, WEBHOOK_SETTINGS.port.default);
    assert.equal(container.image, DEFAULT_SIDECAR_IMAGE);
    assert.equal(config.injection.sidecarImage, container.image);

    const mount = (getArray(container, ['volumeMounts']) as JsonObject[]).find((m) => m.name === 'tls');
    assert.ok(mount, 'a volume mount named tls');
    assert.equal(mount.readOnly, true);
    assert.equal(mount.subPath, undefined, 'subPath mounts never see a renewed Secret');
    assert.equal(config.tlsCertFile, `${String(mount.mountPath)}/tls.crt`);
    assert.equal(config.tlsKeyFile, `${String(mount.mountPath)}/tls.key`);
  });

  it('mounts the TLS Secret that cert-manager writes and `npm run certs` tells users to create', () => {
    const volume = (getArray(podSpec, ['volumes']) as JsonObject[]).find((v) => v.name === 'tls');
    assert.ok(volume, 'the TLS volume is mounted');
    assert.equal(getString(volume, ['secret', 'secretName']), TLS_SECRET_NAME);
  });

  it('runs locked down: non-root 65532, read-only root, no privilege escalation, no capabilities, RuntimeDefault seccomp', () => {
    const pod = getObject(podSpec, ['securityContext']);
    const own = getObject(container, ['securityContext']);
    const effective = (field: string): unknown => own[field] ?? pod[field];
    assert.equal(effective('runAsNonRoot'), true);
    assert.equal(effective('runAsUser'), 65532);
    assert.equal(own.readOnlyRootFilesystem, true);
    assert.equal(own.allowPrivilegeEscalation, false);
    assert.ok((getArray(own, ['capabilities', 'drop']) as string[]).includes('ALL'), 'drops every capability');
    assert.equal(own.privileged ?? false, false);
    assert.equal(get(effective('seccompProfile'), ['type']), 'RuntimeDefault');
  });

  it('has no API credentials: the ServiceAccount and the pod opt out of the token', () => {
    const account = findOne(install, 'ServiceAccount');
    assert.equal(account.automountServiceAccountToken, false);
    assert.equal(podSpec.serviceAccountName, getString(account, ['metadata', 'name']));
    assert.equal(podSpec.automountServiceAccountToken, false);
    assert.deepEqual(findAll(install, 'RoleBinding').concat(findAll(install, 'ClusterRoleBinding')), []);
  });

  it('declares CPU and memory requests and limits', () => {
    for (const resource of ['cpu', 'memory']) {
      const request = parseQuantity(getString(container, ['resources', 'requests', resource]));
      const limit = parseQuantity(getString(container, ['resources', 'limits', resource]));
      assert.ok(!isZero(request), `a ${resource} request above zero`);
      assert.ok(compareQuantities(request, limit) <= 0, `the ${resource} request is within its limit`);
    }
  });

  it('keeps one replica through voluntary disruptions', () => {
    const budget = findOne(install, 'PodDisruptionBudget');
    assert.equal(get(budget, ['spec', 'minAvailable']), 1);
    assert.equal(get(budget, ['metadata', 'namespace']), ownNamespaceName);
    assert.equal(selects(get(budget, ['spec', 'selector']), podLabels), true);
  });

  it('puts every namespaced object into the webhook namespace', () => {
    for (const { value, file } of install) {
      if (value.kind === 'Namespace' || value.kind === 'MutatingWebhookConfiguration') continue;
      assert.equal(get(value, ['metadata', 'namespace']), ownNamespaceName, `${file} ${String(value.kind)}`);
    }
  });
});

describe('webhook NetworkPolicy', () => {
  const policies = findAll(install, 'NetworkPolicy');

  it('is one policy in the webhook namespace, in the base (so every install has it, self-signed included)', async () => {
    assert.equal(policies.length, 1);
    assert.equal(findAll(base, 'NetworkPolicy').length, 1);
    assert.equal(findAll(await resolveKustomization(join(MANIFESTS_DIR, 'self-signed')), 'NetworkPolicy').length, 1);
    assert.equal(get(policies[0], ['metadata', 'namespace']), ownNamespaceName);
  });

  it("selects the webhook pods by the Deployment's labels, and nothing the Deployment does not run", () => {
    const [policy] = policies as [JsonObject];
    const selector = getObject(policy, ['spec', 'podSelector']);
    assert.equal(selects(selector, podLabels), true);
    assert.notDeepEqual(selector, {}, 'an empty podSelector would isolate every pod of the namespace');
    assert.deepEqual(getObject(selector, ['matchLabels']), getObject(deployment, ['spec', 'selector', 'matchLabels']));
  });

  it("admits the Service's targetPort from anywhere and nothing else; egress is left open", () => {
    const [policy] = policies as [JsonObject];
    assert.deepEqual(getArray(policy, ['spec', 'policyTypes']), ['Ingress'], 'an Egress type with no rule would cut the self-managed webhook off the API server');
    const rules = getArray(policy, ['spec', 'ingress']) as JsonObject[];
    assert.equal(rules.length, 1);
    const [rule] = rules as [JsonObject];
    // No `from`: the API server is outside the pod network on managed control planes (see the manifest's comment).
    assert.equal(rule.from, undefined);
    const ports = getArray(rule, ['ports']) as JsonObject[];
    assert.equal(ports.length, 1, 'one port: a rule without ports would open every port');
    const [port] = ports as [JsonObject];
    assert.equal(port.protocol, 'TCP');
    assert.equal(port.endPort, undefined);
    const targetPort = ((getArray(service, ['spec', 'ports']) as JsonObject[])[0] as JsonObject).targetPort;
    assert.equal(resolveContainerPort(container, port.port), resolveContainerPort(container, targetPort));
    assert.equal(resolveContainerPort(container, port.port), WEBHOOK_SETTINGS.port.default);
    // Every port the webhook container opens is that one: there is no second port the policy would close by accident.
    assert.deepEqual((getArray(container, ['ports']) as JsonObject[]).map((p) => p.containerPort), [WEBHOOK_SETTINGS.port.default]);
  });
});

describe('webhook priority', () => {
  it('runs at system-cluster-critical, and its namespace has the quota GKE requires for that class', () => {
    assert.equal(podSpec.priorityClassName, 'system-cluster-critical');
    const quota = findOne(install, 'ResourceQuota');
    assert.equal(get(quota, ['metadata', 'namespace']), ownNamespaceName);
    assert.deepEqual(getArray(quota, ['spec', 'scopeSelector', 'matchExpressions']), [
      { scopeName: 'PriorityClass', operator: 'In', values: [podSpec.priorityClassName] },
    ]);
    assert.deepEqual(Object.keys(getObject(quota, ['spec', 'hard'])), ['pods'], 'it counts pods only: no cpu or memory quota that would demand requests of every pod');
  });

  it('leaves room for a rolling update and the pods still terminating', () => {
    const quota = findOne(install, 'ResourceQuota');
    const limit = Number(getString(quota, ['spec', 'hard', 'pods']));
    const replicas = get(deployment, ['spec', 'replicas']) as number;
    const surge = get(deployment, ['spec', 'strategy', 'rollingUpdate', 'maxSurge']) as number;
    assert.ok(limit >= 2 * (replicas + surge), `${limit} pods: room for ${replicas} replicas, ${surge} surge and as many terminating`);
  });
});

describe('cert-manager TLS', () => {
  const annotation = getString(configuration, ['metadata', 'annotations', 'cert-manager.io/inject-ca-from']);
  const [certNamespace, certName] = annotation.split('/') as [string, string];
  const certificates = findAll(install, 'Certificate');
  const issuers = findAll(install, 'Issuer');
  const named = (objects: JsonObject[], name: unknown): JsonObject => {
    const found = objects.find((object) => get(object, ['metadata', 'name']) === name);
    assert.ok(found, `no object named ${String(name)}`);
    return found;
  };

  it('injects the CA of the serving Certificate, which writes the Secret the Deployment mounts', () => {
    const serving = named(certificates, certName);
    assert.equal(get(serving, ['metadata', 'namespace']), certNamespace);
    assert.equal(getString(serving, ['spec', 'secretName']), TLS_SECRET_NAME);
    const volume = (getArray(podSpec, ['volumes']) as JsonObject[]).find((v) => v.name === 'tls');
    assert.equal(get(volume, ['secret', 'secretName']), get(serving, ['spec', 'secretName']));
  });

  it('issues the serving certificate for every name of the Service', () => {
    const serving = named(certificates, certName);
    const dnsNames = getArray(serving, ['spec', 'dnsNames']);
    const expected = serviceDnsNames(getString(service, ['metadata', 'name']), getString(service, ['metadata', 'namespace']));
    for (const name of expected) assert.ok(dnsNames.includes(name), `${name} in dnsNames`);
    assert.ok((getArray(serving, ['spec', 'usages']) as string[]).includes('server auth'), 'the certificate is for server auth');
  });

  it('signs it with a CA Issuer whose CA comes from the self-signed Issuer', () => {
    const serving = named(certificates, certName);
    const caIssuer = named(issuers, get(serving, ['spec', 'issuerRef', 'name']));
    assert.equal(get(serving, ['spec', 'issuerRef', 'kind']), 'Issuer');
    const caSecret = getString(caIssuer, ['spec', 'ca', 'secretName']);
    const ca = certificates.find((certificate) => get(certificate, ['spec', 'secretName']) === caSecret);
    assert.ok(ca, `a Certificate writing ${caSecret}`);
    assert.equal(get(ca, ['spec', 'isCA']), true);
    const root = named(issuers, get(ca, ['spec', 'issuerRef', 'name']));
    assert.deepEqual(get(root, ['spec', 'selfSigned']), {});
  });

  it('is left out of manifests/base, which works without cert-manager', () => {
    assert.deepEqual(
      base.filter(({ value }) => String(value.apiVersion).startsWith('cert-manager.io/')).map(({ file }) => file),
      [],
    );
    assert.ok(install.some(({ value }) => value.kind === 'Certificate'), 'the cert-manager install has the Certificate');
  });
});

describe('example workload', () => {
  it('is in a namespace the webhook selects, with pods it selects', () => {
    const deploymentOfEnvoy = findOne(example, 'Deployment');
    const namespace = findOne(example, 'Namespace', getString(deploymentOfEnvoy, ['metadata', 'namespace']));
    assert.equal(getString(namespace, ['metadata', 'labels', INJECT_LABEL]), 'enabled');
    assert.equal(selects(webhook.namespaceSelector, namespaceLabels(namespace)), true);
    const labels = getObject(deploymentOfEnvoy, ['spec', 'template', 'metadata', 'labels']) as Record<string, string>;
    assert.equal(labels.app, 'envoy');
    assert.equal(selects(webhook.objectSelector, labels), true);
  });
});
