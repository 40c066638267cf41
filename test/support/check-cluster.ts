/**
 * A cluster for `envoy-shutdown-manager check`, on the fake API server: the webhook installed as manifests/
 * installs it (configuration, Service, EndpointSlice, Deployment, PodDisruptionBudget, cert-manager's Certificate and Secret),
 * Envoy pods built to order, and a kubeconfig file that points at it over TLS.
 */
import { X509Certificate } from 'node:crypto';
import { mkdtemp, rm, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateCertificates, type CertificateBundle } from '../../src/certs/generate.js';
import { SIDECAR_CONTAINER_NAME } from '../../src/config/endpoints.js';
import { DEFAULT_SIDECAR_IMAGE, PROJECT_VERSION } from '../../src/version.js';
import { durationMs } from '../../src/config/values.js';
import { FakeKubeApi } from './fake-kube-api.js';

export const WEBHOOK_NAMESPACE = 'envoy-shutdown-manager';
export const SERVICE_NAME = 'envoy-shutdown-manager';
export const SERVICE_HOST = `${SERVICE_NAME}.${WEBHOOK_NAMESPACE}.svc`;
const WEBHOOK_LABELS = { 'app.kubernetes.io/name': 'envoy-shutdown-manager', 'app.kubernetes.io/component': 'webhook' };

export interface WebhookOptions {
  readonly readyReplicas?: number;
  readonly readyEndpoints?: number;
  readonly disruptionBudget?: boolean;
  /** The serving certificate; by default one for the Service's names, valid 90 days. */
  readonly certificate?: CertificateBundle;
  /** The caBundle; by default the CA of the certificate. */
  readonly caBundle?: string;
  /** No MutatingWebhookConfiguration at all. */
  readonly configuration?: boolean;
  /**
   * cert-manager's Certificate for the serving certificate, named by the configuration's inject-ca-from: by default
   * Ready, with the certificate's names and notAfter; false: none (certificates made by hand), and no annotation.
   */
  readonly certManager?: false | { readonly ready?: { status: string; reason?: string; message?: string } | null; readonly secretName?: string };
  /** The webhook's objectSelector; by default what manifests/base renders (app In (envoy)); null: none. */
  readonly objectSelector?: Record<string, unknown> | null;
  /** The Deployment's SHUTDOWN_MANAGER_POD_SELECTOR; by default app=envoy; null: not set (the webhook's default). */
  readonly podSelector?: string | null;
  /** The Deployment runs --self-signed-certs (manifests/self-signed) and mounts no certificate; takes no cert-manager. */
  readonly selfManaged?: boolean;
}

/** The objectSelector manifests/base renders from SHUTDOWN_MANAGER_POD_SELECTOR=app=envoy. */
export const INSTALLED_OBJECT_SELECTOR = { matchExpressions: [{ key: 'app', operator: 'In', values: ['envoy'] }] };

export interface CheckCluster {
  readonly fake: FakeKubeApi;
  readonly kubeconfig: string;
  close(): Promise<void>;
}

export async function startCheckCluster(): Promise<CheckCluster> {
  const fake = await FakeKubeApi.start();
  const dir = await mkdtemp(join(tmpdir(), 'check-'));
  const kubeconfig = join(dir, 'kubeconfig');
  await writeFile(kubeconfig, kubeconfigYaml(fake.url, fake.caPem, fake.token));
  return {
    fake,
    kubeconfig,
    close: async () => {
      await fake.close();
      await rm(dir, { recursive: true, force: true });
    },
  };
}

/** A kubeconfig file with the context `fake` (current) and `elsewhere`, whose server is `otherServer`. */
export function kubeconfigYaml(server: string, caPem: string, token: string, otherServer = 'https://127.0.0.1:1'): string {
  const ca = Buffer.from(caPem).toString('base64');
  return `apiVersion: v1
kind: Config
clusters:
  - name: fake
    cluster: { server: "${server}", certificate-authority-data: "${ca}" }
  - name: elsewhere
    cluster: { server: "${otherServer}", certificate-authority-data: "${ca}" }
users:
  - name: me
    user: { token: "${token}" }
contexts:
  - name: fake
    context: { cluster: fake, user: me }
  - name: elsewhere
    context: { cluster: elsewhere, user: me }
current-context: fake
`;
}

export function servingCertificate(options: { dnsNames?: readonly string[]; validityDays?: number; now?: Date } = {}): Promise<CertificateBundle> {
  return generateCertificates({
    dnsNames: options.dnsNames ?? [SERVICE_NAME, `${SERVICE_NAME}.${WEBHOOK_NAMESPACE}`, SERVICE_HOST, `${SERVICE_HOST}.cluster.local`],
    validityDays: options.validityDays ?? 90,
    ...(options.now === undefined ? {} : { now: options.now }),
  });
}

/** The webhook as `kubectl apply -k manifests` installs it, healthy unless told otherwise. */
export async function installWebhook(fake: FakeKubeApi, options: WebhookOptions = {}): Promise<void> {
  const certificate = options.certificate ?? (await servingCertificate());
  if (options.configuration !== false) {
    fake.addWebhookConfiguration('shutdown-manager.io', ['inject.shutdown-manager.io'], options.caBundle ?? certificate.caCertPem);
    const configuration = fake.webhookConfigurations.get('shutdown-manager.io') as Record<string, any>;
    if (options.certManager !== false) configuration.metadata.annotations = { 'cert-manager.io/inject-ca-from': `${WEBHOOK_NAMESPACE}/envoy-shutdown-manager-tls` };
    const webhook = configuration.webhooks[0] as Record<string, unknown>;
    Object.assign(webhook, { failurePolicy: 'Ignore', timeoutSeconds: 5 });
    const objectSelector = options.objectSelector === undefined ? INSTALLED_OBJECT_SELECTOR : options.objectSelector;
    if (objectSelector !== null) webhook.objectSelector = objectSelector;
  }
  const metadata = { name: SERVICE_NAME, namespace: WEBHOOK_NAMESPACE };
  fake.addObject({ apiVersion: 'v1', kind: 'Namespace', metadata: { name: WEBHOOK_NAMESPACE } });
  fake.addObject({ apiVersion: 'v1', kind: 'Service', metadata, spec: { selector: WEBHOOK_LABELS } });
  const ready = options.readyEndpoints ?? 2;
  fake.addObject({
    apiVersion: 'discovery.k8s.io/v1',
    kind: 'EndpointSlice',
    metadata: { name: `${SERVICE_NAME}-abcde`, namespace: WEBHOOK_NAMESPACE, labels: { 'kubernetes.io/service-name': SERVICE_NAME } },
    addressType: 'IPv4',
    endpoints: Array.from({ length: 2 }, (_, i) => ({ addresses: [`10.0.0.${i + 1}`], conditions: { ready: i < ready } })),
  });
  fake.addObject({
    apiVersion: 'apps/v1',
    kind: 'Deployment',
    metadata: { ...metadata, labels: { ...WEBHOOK_LABELS, 'app.kubernetes.io/version': PROJECT_VERSION } },
    spec: {
      replicas: 2,
      selector: { matchLabels: WEBHOOK_LABELS },
      template: {
        metadata: { labels: WEBHOOK_LABELS },
        spec: {
          containers: [
            {
              name: 'webhook',
              image: DEFAULT_SIDECAR_IMAGE,
              args: options.selfManaged === true ? ['mode=webhook', '--self-signed-certs'] : ['mode=webhook', '--tls-cert-file=/etc/webhook/certs/tls.crt'],
              env: [
                { name: 'SHUTDOWN_MANAGER_SIDECAR_IMAGE', value: DEFAULT_SIDECAR_IMAGE },
                ...(options.podSelector === null ? [] : [{ name: 'SHUTDOWN_MANAGER_POD_SELECTOR', value: options.podSelector ?? 'app=envoy' }]),
              ],
            },
          ],
          volumes: options.selfManaged === true ? [] : [{ name: 'tls', secret: { secretName: 'envoy-shutdown-manager-tls' } }],
        },
      },
    },
    status: { replicas: 2, readyReplicas: options.readyReplicas ?? 2 },
  });
  if (options.disruptionBudget !== false) {
    fake.addObject({ apiVersion: 'policy/v1', kind: 'PodDisruptionBudget', metadata, spec: { minAvailable: 1, selector: { matchLabels: WEBHOOK_LABELS } } });
  }
  if (options.certManager !== false) {
    const leaf = new X509Certificate(certificate.certPem);
    const ready = options.certManager?.ready === undefined ? { status: 'True', reason: 'Ready', message: 'Certificate is up to date and has not expired' } : options.certManager.ready;
    fake.addObject({
      apiVersion: 'cert-manager.io/v1',
      kind: 'Certificate',
      metadata: { name: 'envoy-shutdown-manager-tls', namespace: WEBHOOK_NAMESPACE },
      spec: {
        secretName: options.certManager?.secretName ?? 'envoy-shutdown-manager-tls',
        dnsNames: (leaf.subjectAltName ?? '').split(', ').filter((name) => name.startsWith('DNS:')).map((name) => name.slice(4)),
      },
      status: { notAfter: new Date(leaf.validTo).toISOString(), ...(ready === null ? {} : { conditions: [{ type: 'Ready', ...ready }] }) },
    });
  }
  // Seeded although check reads no Secret: the RBAC test would catch a read of it.
  fake.seedSecret(WEBHOOK_NAMESPACE, 'envoy-shutdown-manager-tls', { 'tls.crt': certificate.certPem, 'tls.key': certificate.keyPem, 'ca.crt': certificate.caCertPem });
}

export function addNamespace(fake: FakeKubeApi, name: string, optedIn = true): void {
  fake.addObject({ apiVersion: 'v1', kind: 'Namespace', metadata: { name, labels: optedIn ? { 'shutdown-manager.io/inject': 'enabled' } : {} } });
}

export interface PodOptions {
  readonly injected?: boolean;
  /** Owner: `Deployment/name` (through a ReplicaSet `name-7d9f`), `DaemonSet/name`, `StatefulSet/name`; none for a bare pod. */
  readonly owner?: string;
  readonly image?: string;
  readonly version?: string;
  readonly graceSeconds?: number;
  readonly drainTimeoutMs?: number;
  /** More sidecar flags, after --drain-timeout: `--check-delay=30s`, `--quiet-period=0s`. */
  readonly sidecarArgs?: readonly string[];
  readonly sidecarReady?: boolean;
  readonly restarts?: number;
  readonly annotations?: Record<string, string>;
  /** A container named shutdown-manager without the status annotation, as Contour's. */
  readonly contour?: boolean;
  readonly labels?: Record<string, string>;
}

const addedReplicaSets = new WeakMap<FakeKubeApi, Set<string>>();

/** An Envoy pod (label app=envoy), injected as the webhook injects unless told otherwise. */
export function addPod(fake: FakeKubeApi, namespace: string, name: string, options: PodOptions = {}): void {
  const injected = options.injected ?? true;
  const containers: Record<string, unknown>[] = [{ name: 'envoy', image: 'envoyproxy/envoy:v1.31.0' }];
  if (injected || options.contour === true) {
    containers.push({
      name: SIDECAR_CONTAINER_NAME,
      image: options.contour === true ? 'ghcr.io/projectcontour/contour:v1.30.0' : (options.image ?? DEFAULT_SIDECAR_IMAGE),
      args:
        options.contour === true
          ? ['contour', 'envoy', 'shutdown-manager']
          : ['mode=sidecar', `--drain-timeout=${durationMs.format(options.drainTimeoutMs ?? 54_000)}`, ...(options.sidecarArgs ?? [])],
    });
  }
  const annotations = {
    ...(injected ? { 'shutdown-manager.io/status': JSON.stringify({ version: options.version ?? PROJECT_VERSION, sidecar: SIDECAR_CONTAINER_NAME }) } : {}),
    ...options.annotations,
  };
  fake.addObject({
    apiVersion: 'v1',
    kind: 'Pod',
    metadata: { name, namespace, labels: options.labels ?? { app: 'envoy' }, annotations, ownerReferences: ownerOf(fake, namespace, options.owner) },
    spec: { containers, terminationGracePeriodSeconds: options.graceSeconds ?? 60 },
    status: {
      phase: 'Running',
      containerStatuses: containers.map((container) => sidecarStatus(String(container.name), options)),
    },
  });
}

function sidecarStatus(name: string, options: PodOptions): Record<string, unknown> {
  const isSidecar = name === SIDECAR_CONTAINER_NAME;
  const restarts = isSidecar ? (options.restarts ?? 0) : 0;
  return {
    name,
    image: 'x',
    imageID: 'x',
    ready: isSidecar ? (options.sidecarReady ?? true) : true,
    restartCount: restarts,
    ...(restarts > 0 ? { lastState: { terminated: { reason: 'OOMKilled', exitCode: 137 } } } : {}),
  };
}

/** A ReplicaSet of a Deployment with no pod left, as a rollout leaves the previous ones (revisionHistoryLimit). */
export function addReplicaSet(fake: FakeKubeApi, namespace: string, name: string, deployment: string): void {
  fake.addObject({
    apiVersion: 'apps/v1',
    kind: 'ReplicaSet',
    metadata: { name, namespace, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name: deployment, uid: `${deployment}-uid`, controller: true }] },
  });
}

function ownerOf(fake: FakeKubeApi, namespace: string, owner: string | undefined): Record<string, unknown>[] {
  if (owner === undefined) return [];
  const [kind, name] = owner.split('/') as [string, string];
  if (kind !== 'Deployment') return [{ apiVersion: 'apps/v1', kind, name, uid: `${name}-uid`, controller: true }];
  const replicaSet = `${name}-7d9f`;
  const added = addedReplicaSets.get(fake) ?? new Set<string>();
  addedReplicaSets.set(fake, added);
  if (!added.has(`${namespace}/${replicaSet}`)) {
    added.add(`${namespace}/${replicaSet}`);
    fake.addObject({
      apiVersion: 'apps/v1',
      kind: 'ReplicaSet',
      metadata: { name: replicaSet, namespace, ownerReferences: [{ apiVersion: 'apps/v1', kind: 'Deployment', name, uid: `${name}-uid`, controller: true }] },
    });
  }
  return [{ apiVersion: 'apps/v1', kind: 'ReplicaSet', name: replicaSet, uid: `${replicaSet}-uid`, controller: true }];
}
