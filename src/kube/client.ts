/**
 * CertificateStore over @kubernetes/client-node: the webhook's only use of the Kubernetes API.
 *
 * Every request carries an AbortSignal (a per-request timeout, plus the caller's shutdown signal), set by a
 * middleware because the generated API has no timeout option. client-node's ApiException, node-fetch's
 * errors and aborts are all turned into the typed errors of ./errors.ts here, so nothing above this file
 * sees a client-node type.
 */
import { existsSync } from 'node:fs';
import {
  AdmissionregistrationV1Api,
  ApiException,
  CoreV1Api,
  FetchError,
  KubeConfig,
  PatchStrategy,
  setHeaderOptions,
  type ConfigurationOptions,
  type V1ObjectMeta,
  type V1Secret,
} from '@kubernetes/client-node';
import { statusOf, withSignal } from './requests.js';
import {
  describeOperation,
  KubeConfigError,
  KubeConflictError,
  KubeForbiddenError,
  KubeNotFoundError,
  KubeRejectedError,
  KubeUnauthorizedError,
  KubeUnavailableError,
  type KubeApiError,
  type KubeOperation,
} from './errors.js';
import { CONFIGURATION_ANNOTATIONS } from '../config/annotation-names.js';
import type { CallOptions, CertificateStore, SecretData, SecretSnapshot, WebhookConfigurationChanges, WebhookConfigurationSnapshot } from './store.js';

const SERVING_CERTIFICATE = CONFIGURATION_ANNOTATIONS.servingCertificate;

/** The API server answers these in milliseconds; 10 s means it is in trouble, and the caller retries. */
export const DEFAULT_REQUEST_TIMEOUT_MS = 10_000;
export const SERVICE_ACCOUNT_TOKEN_FILE = '/var/run/secrets/kubernetes.io/serviceaccount/token';
const SECRET_TYPE = 'kubernetes.io/tls';
const LABELS = { 'app.kubernetes.io/name': 'envoy-shutdown-manager', 'app.kubernetes.io/managed-by': 'envoy-shutdown-manager' };

export interface KubeStoreSettings {
  readonly namespace: string;
  readonly secretName: string;
  readonly webhookConfigurationName: string;
  readonly requestTimeoutMs?: number;
}

/**
 * The pod's own credentials. loadFromCluster() itself never fails: without the environment or the token it
 * builds a config that fails on every request with an obscure error, so both are checked first.
 */
export function loadInClusterConfig(env: NodeJS.ProcessEnv = process.env, exists = existsSync): KubeConfig {
  if (!env.KUBERNETES_SERVICE_HOST || !env.KUBERNETES_SERVICE_PORT) {
    throw new KubeConfigError(
      '--self-signed-certs manages the certificate through the Kubernetes API, but KUBERNETES_SERVICE_HOST/PORT ' +
        'are not set: run it in a cluster, or use --dev-certs or --tls-cert-file/--tls-key-file outside one',
    );
  }
  if (!exists(SERVICE_ACCOUNT_TOKEN_FILE)) {
    throw new KubeConfigError(
      `--self-signed-certs needs the ServiceAccount token, and ${SERVICE_ACCOUNT_TOKEN_FILE} does not exist: ` +
        'set automountServiceAccountToken: true on the pod (manifests/self-signed does)',
    );
  }
  const kubeConfig = new KubeConfig();
  kubeConfig.loadFromCluster();
  return kubeConfig;
}

function encode(data: SecretData): Record<string, string> {
  return Object.fromEntries(Object.entries(data).map(([key, value]) => [key, Buffer.from(value, 'utf8').toString('base64')]));
}

function decode(data: Record<string, string> | undefined): Record<string, string> {
  return Object.fromEntries(Object.entries(data ?? {}).map(([key, value]) => [key, Buffer.from(value, 'base64').toString('utf8')]));
}

/** The annotation's key as a JSON pointer token: `/` is written `~1` (RFC 6901). */
const SERVING_CERTIFICATE_POINTER = `/metadata/annotations/${SERVING_CERTIFICATE.replaceAll('~', '~0').replaceAll('/', '~1')}`;

/**
 * The ops that publish the serving certificate. `add` sets the annotation whether or not it exists, leaving the
 * others alone; without an annotations map it adds one, and that would replace a map someone added since the read,
 * so it is guarded by a `test` of the resourceVersion read.
 */
function servingCertificateOps(read: WebhookConfigurationSnapshot, pem: string): object[] {
  if (read.hasAnnotations) return [{ op: 'add', path: SERVING_CERTIFICATE_POINTER, value: pem }];
  return [
    { op: 'test', path: '/metadata/resourceVersion', value: read.resourceVersion },
    { op: 'add', path: '/metadata/annotations', value: { [SERVING_CERTIFICATE]: pem } },
  ];
}

function snapshot(secret: V1Secret): SecretSnapshot {
  return {
    data: decode(secret.data),
    resourceVersion: secret.metadata?.resourceVersion ?? '',
    type: secret.type,
    metadata: { ...secret.metadata },
  };
}


export class KubeCertificateStore implements CertificateStore {
  readonly secretRef: string;
  readonly webhookConfigurationName: string;
  private readonly core: CoreV1Api;
  private readonly admission: AdmissionregistrationV1Api;
  private readonly server: string;
  private readonly timeoutMs: number;

  constructor(
    kubeConfig: KubeConfig,
    private readonly settings: KubeStoreSettings,
  ) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.admission = kubeConfig.makeApiClient(AdmissionregistrationV1Api);
    this.server = kubeConfig.getCurrentCluster()?.server ?? 'the API server';
    this.timeoutMs = settings.requestTimeoutMs ?? DEFAULT_REQUEST_TIMEOUT_MS;
    this.secretRef = `${settings.namespace}/${settings.secretName}`;
    this.webhookConfigurationName = settings.webhookConfigurationName;
  }

  async readSecret(options?: CallOptions): Promise<SecretSnapshot | undefined> {
    const { namespace, secretName: name } = this.settings;
    try {
      return snapshot(await this.call(this.secretOperation('get'), options, (config) => this.core.readNamespacedSecret({ name, namespace }, config)));
    } catch (error) {
      if (error instanceof KubeNotFoundError) return undefined;
      throw error;
    }
  }

  async createSecret(data: SecretData, options?: CallOptions): Promise<SecretSnapshot> {
    const { namespace, secretName: name } = this.settings;
    const body: V1Secret = { apiVersion: 'v1', kind: 'Secret', metadata: { name, namespace, labels: LABELS }, type: SECRET_TYPE, data: encode(data) };
    return snapshot(await this.call(this.secretOperation('create'), options, (config) => this.core.createNamespacedSecret({ namespace, body }, config)));
  }

  async updateSecret(data: SecretData, previous: SecretSnapshot, options?: CallOptions): Promise<SecretSnapshot> {
    const { namespace, secretName: name } = this.settings;
    // The metadata read, as snapshot() took it from a V1Secret: what others set on the Secret (labels,
    // annotations, ownerReferences...) survives the renewal. Our labels fill in only what is not there.
    const kept = previous.metadata as V1ObjectMeta;
    const body: V1Secret = {
      apiVersion: 'v1',
      kind: 'Secret',
      // resourceVersion makes this a compare-and-swap: the API server answers 409 if anyone wrote since.
      metadata: { ...kept, name, namespace, labels: { ...LABELS, ...kept.labels }, resourceVersion: previous.resourceVersion },
      type: previous.type ?? SECRET_TYPE,
      data: encode(data),
    };
    const operation = this.secretOperation('update');
    try {
      return snapshot(await this.call(operation, options, (config) => this.core.replaceNamespacedSecret({ name, namespace, body }, config)));
    } catch (error) {
      // Deleted since it was read: as much a lost race as a newer resourceVersion.
      if (error instanceof KubeNotFoundError) throw new KubeConflictError(operation, 'Conflict', 404);
      throw error;
    }
  }

  async readWebhookConfiguration(options?: CallOptions): Promise<WebhookConfigurationSnapshot> {
    const name = this.webhookConfigurationName;
    const configuration = await this.call(this.webhookOperation('get'), options, (config) =>
      this.admission.readMutatingWebhookConfiguration({ name }, config),
    );
    const webhooks = (configuration.webhooks ?? []).map((webhook, index) => {
      const caBundle = webhook.clientConfig.caBundle;
      return { index, name: webhook.name, caBundle: caBundle ? Buffer.from(caBundle, 'base64').toString('utf8') : undefined };
    });
    const annotations = configuration.metadata?.annotations;
    return {
      webhooks,
      servingCertificate: annotations?.[SERVING_CERTIFICATE],
      hasAnnotations: annotations !== undefined,
      resourceVersion: configuration.metadata?.resourceVersion ?? '',
    };
  }

  async patchWebhookConfiguration(read: WebhookConfigurationSnapshot, changes: WebhookConfigurationChanges, options?: CallOptions): Promise<void> {
    const caBundle = changes.caBundle;
    const encoded = caBundle === undefined ? '' : Buffer.from(caBundle.pem, 'utf8').toString('base64');
    // `test` first: if the list was reordered since it was read, the whole patch fails instead of giving
    // one webhook's caBundle to another. `add` sets the member whether or not it exists (RFC 6902).
    const body: object[] = (caBundle?.webhooks ?? []).flatMap(({ index, name }) => [
      { op: 'test', path: `/webhooks/${index}/name`, value: name },
      { op: 'add', path: `/webhooks/${index}/clientConfig/caBundle`, value: encoded },
    ]);
    if (changes.servingCertificate !== undefined) body.push(...servingCertificateOps(read, changes.servingCertificate));
    if (body.length === 0) return;
    const operation = this.webhookOperation('patch');
    try {
      await this.call(operation, options, (config) =>
        this.admission.patchMutatingWebhookConfiguration(
          { name: this.webhookConfigurationName, body },
          setHeaderOptions('Content-Type', PatchStrategy.JsonPatch, config),
        ),
      );
    } catch (error) {
      // The API server answers a failed `test` with 422: the configuration changed under us, read it again.
      if (error instanceof KubeRejectedError && error.status === 422) throw new KubeConflictError(operation, 'Changed', 422);
      throw error;
    }
  }

  private secretOperation(verb: KubeOperation['verb']): KubeOperation {
    return { verb, resource: 'secrets', name: this.settings.secretName, namespace: this.settings.namespace };
  }

  private webhookOperation(verb: KubeOperation['verb']): KubeOperation {
    return { verb, resource: 'mutatingwebhookconfigurations', name: this.webhookConfigurationName };
  }

  /** Runs one request with its timeout, translating every failure into a KubeApiError. */
  private async call<T>(
    operation: KubeOperation,
    options: CallOptions | undefined,
    request: (config: ConfigurationOptions) => Promise<T>,
  ): Promise<T> {
    const timeoutMs = options?.timeoutMs ?? this.timeoutMs;
    const timeout = AbortSignal.timeout(timeoutMs);
    const signal = options?.signal ? AbortSignal.any([timeout, options.signal]) : timeout;
    try {
      return await request({ middleware: [withSignal(signal)], middlewareMergeStrategy: 'append' });
    } catch (error) {
      throw this.translate(error, operation, timeout.aborted ? timeoutMs : undefined);
    }
  }

  /** `timedOutAfterMs` is set when the request's own timeout fired. */
  private translate(error: unknown, operation: KubeOperation, timedOutAfterMs: number | undefined): KubeApiError {
    const what = describeOperation(operation);
    if (error instanceof ApiException) return this.translateStatus(error.code, statusOf(error.body), operation);
    if (timedOutAfterMs !== undefined) {
      return new KubeUnavailableError(operation, `no answer from ${this.server} within ${timedOutAfterMs} ms to ${what}`, undefined, { cause: error });
    }
    if (error instanceof Error && error.name === 'AbortError') {
      return new KubeUnavailableError(operation, `${what} was cancelled (shutting down)`, undefined, { cause: error });
    }
    // FetchError covers refused connections, DNS and TLS failures; system errors carry a code (ECONNRESET).
    if (error instanceof FetchError || (error instanceof Error && typeof (error as NodeJS.ErrnoException).code === 'string')) {
      return new KubeUnavailableError(operation, `cannot reach ${this.server} to ${what}: ${error.message}`, undefined, { cause: error });
    }
    // Anything else is a fault on this side (a bug, an unreadable token): retrying would only repeat it.
    const reason = error instanceof Error ? error.message : String(error);
    return new KubeRejectedError(operation, `${what} failed before reaching ${this.server}: ${reason}`, undefined, { cause: error });
  }

  private translateStatus(code: number, status: { message?: string; reason?: string }, operation: KubeOperation): KubeApiError {
    const detail = status.message === undefined ? '' : `: ${status.message}`;
    if (code === 401) return new KubeUnauthorizedError(operation);
    if (code === 403) return new KubeForbiddenError(operation, status.message);
    if (code === 404) {
      return new KubeNotFoundError(
        operation,
        operation.resource === 'mutatingwebhookconfigurations'
          ? 'apply manifests/self-signed, or name yours with --webhook-configuration-name'
          : `create namespace ${operation.namespace ?? ''} or set --namespace (SHUTDOWN_MANAGER_NAMESPACE) to the pod's namespace`,
      );
    }
    if (code === 409) return new KubeConflictError(operation, status.reason === 'AlreadyExists' ? 'AlreadyExists' : 'Conflict', 409);
    if (code === 429 || code >= 500) {
      return new KubeUnavailableError(operation, `${this.server} answered ${code} to ${describeOperation(operation)}${detail}`, code);
    }
    return new KubeRejectedError(operation, `${this.server} refused ${describeOperation(operation)} with ${code}${detail}`, code);
  }
}
