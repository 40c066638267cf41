/**
 * The edge: reads what the checks need through @kubernetes/client-node, read-only, and hands back API objects.
 * Loaded only by `check` (a chunk of its own in the bundle). Lists are paginated and narrowed by label selector;
 * pods are listed namespace by namespace, a few namespaces at a time. Every failure becomes an error of
 * ./errors.ts, so nothing above this file sees a client-node type.
 */
import {
  AdmissionregistrationV1Api,
  ApiException,
  AppsV1Api,
  AuthorizationV1Api,
  CoreV1Api,
  CustomObjectsApi,
  DiscoveryV1Api,
  KubeConfig,
  PolicyV1Api,
  VersionApi,
  type ConfigurationOptions,
  type V1ListMeta,
  type V1Namespace,
  type V1OwnerReference,
} from '@kubernetes/client-node';
import { DEFAULT_NAMESPACE, DEFAULT_SERVICE } from '../certs/names.js';
import { statusOf, withSignal } from '../kube/requests.js';
import { formatLabelSelector, type LabelSelector } from '../config/label-selector.js';
import type { RequestOptions } from 'node:https';
import type { ClusterSnapshot, NamespacePods, WebhookObjects } from './cluster.js';
import { CONTROLLER_KIND_LABEL, CONTROLLER_NAME_LABEL, lagQuery, SIDE_QUERIES, type LagReading, type SideReadings } from './drains.js';
import { ApiAnswerError, causeOf, describeRead, ForbiddenError, KubeconfigError, NamespaceNotFoundError, UnauthenticatedError, UnreachableError, type ReadOperation } from './errors.js';
import { expectationsOf, type Expectations } from './expectations.js';
import type { CertManagerCertificate } from './certificate.js';
import { judgePod } from './pod-state.js';
import { needsWorkload, OPT_IN_LABEL, replicaSetOf } from './pods.js';
import { accessQuestions, BASE_RESOURCES, CERT_MANAGER_RESOURCES, type AccessQuestion, type PreInstallReading } from './pre.js';
import { closestName } from '../config/settings.js';
import { describeSource, directTransport, PrometheusError, queryVector, type PrometheusSource, type QueryTransport, type VectorSample } from './prometheus.js';

export interface KubeconfigChoice {
  /** --kubeconfig; otherwise KUBECONFIG, ~/.kube/config, then the pod's own ServiceAccount. */
  readonly file?: string;
  /** --context; otherwise the kubeconfig's current context. */
  readonly context?: string;
}

export interface ReadSettings {
  readonly configurationName: string;
  readonly allNamespaces: boolean;
  /** -n/--namespace: only this namespace's pods, opted in or not. */
  readonly namespace?: string;
  readonly podSelectorFlag: string | undefined;
  /** Items per page of every list (the `limit` parameter). */
  readonly pageSize: number;
  readonly requestTimeoutMs: number;
  /** Namespaces whose pods are listed at the same time. */
  readonly concurrency: number;
  /** Where to read the load balancer's lag, over which window (a Prometheus duration); none: not read. */
  readonly lag?: { readonly source: PrometheusSource; readonly window: string };
}

/** What client-node writes when it found no configuration at all: treated as none. */
const FALLBACK_SERVER = 'http://localhost:8080';

export function loadKubeConfig(choice: KubeconfigChoice): KubeConfig {
  const kubeConfig = new KubeConfig();
  try {
    if (choice.file !== undefined) kubeConfig.loadFromFile(choice.file);
    else kubeConfig.loadFromDefault();
  } catch (error) {
    const reason = error instanceof Error ? error.message : String(error);
    throw new KubeconfigError(`cannot load the kubeconfig ${choice.file ?? process.env.KUBECONFIG ?? '~/.kube/config'}: ${reason}`);
  }
  if (choice.context !== undefined) {
    if (kubeConfig.getContextObject(choice.context) === null) {
      const known = kubeConfig.getContexts().map((context) => context.name).join(', ') || 'none';
      throw new KubeconfigError(`--context ${choice.context}: no such context in the kubeconfig (it has: ${known})`);
    }
    kubeConfig.setCurrentContext(choice.context);
  }
  const server = kubeConfig.getCurrentCluster()?.server;
  if (server === undefined || (server === FALLBACK_SERVER && choice.file === undefined && kubeConfig.getCurrentCluster()?.name === 'cluster')) {
    throw new KubeconfigError('no kubeconfig found: set KUBECONFIG or pass --kubeconfig FILE (and --context NAME), or run in a pod');
  }
  return kubeConfig;
}

type PageOf<T> = { readonly items: readonly T[]; readonly metadata?: V1ListMeta };

/** The API clients and the request discipline (timeout, error translation) every read goes through. */
class ClusterReader {
  private readonly core: CoreV1Api;
  private readonly apps: AppsV1Api;
  private readonly admission: AdmissionregistrationV1Api;
  private readonly discovery: DiscoveryV1Api;
  private readonly policy: PolicyV1Api;
  private readonly version: VersionApi;
  private readonly authorization: AuthorizationV1Api;
  private readonly custom: CustomObjectsApi;
  private readonly server: string;

  constructor(
    kubeConfig: KubeConfig,
    private readonly settings: ReadSettings,
  ) {
    this.core = kubeConfig.makeApiClient(CoreV1Api);
    this.apps = kubeConfig.makeApiClient(AppsV1Api);
    this.admission = kubeConfig.makeApiClient(AdmissionregistrationV1Api);
    this.discovery = kubeConfig.makeApiClient(DiscoveryV1Api);
    this.policy = kubeConfig.makeApiClient(PolicyV1Api);
    this.version = kubeConfig.makeApiClient(VersionApi);
    this.authorization = kubeConfig.makeApiClient(AuthorizationV1Api);
    this.custom = kubeConfig.makeApiClient(CustomObjectsApi);
    this.server = kubeConfig.getCurrentCluster()?.server ?? 'the API server';
  }

  async snapshot(): Promise<{ snapshot: ClusterSnapshot; expected: Expectations }> {
    const webhook = await this.webhookObjects();
    const expected = expectationsOf(webhook.deployment, this.settings.podSelectorFlag);
    const namespaces = await this.scanNamespaces(expected.podSelector);
    const replicaSetOwners = await this.replicaSetOwners(namespaces, expected);
    const scope = this.settings.namespace === undefined ? {} : { scope: this.settings.namespace };
    return { snapshot: { webhook, namespaces, replicaSetOwners, ...scope }, expected };
  }

  private async webhookObjects(): Promise<WebhookObjects> {
    const configurationName = this.settings.configurationName;
    const configuration = await this.getOptional({ verb: 'get', resource: 'mutatingwebhookconfigurations', group: 'admissionregistration.k8s.io', name: configurationName }, (config) =>
      this.admission.readMutatingWebhookConfiguration({ name: configurationName }, config),
    );
    const ref = configuration?.webhooks?.[0]?.clientConfig.service;
    const namespace = ref?.namespace ?? DEFAULT_NAMESPACE;
    const name = ref?.name ?? DEFAULT_SERVICE;
    // The Deployment is read even without a configuration: it says which pods and image to expect.
    const deployment = await this.getOptional({ verb: 'get', resource: 'deployments', group: 'apps', name, namespace }, (config) =>
      this.apps.readNamespacedDeployment({ name, namespace }, config),
    );
    if (ref === undefined) {
      return { configurationName, configuration, service: undefined, endpointSlices: [], deployment, disruptionBudgets: [], certificate: undefined };
    }
    const [service, endpointSlices, disruptionBudgets, certificate] = await Promise.all([
      this.getOptional({ verb: 'get', resource: 'services', group: '', name, namespace }, (config) => this.core.readNamespacedService({ name, namespace }, config)),
      this.listAll({ verb: 'list', resource: 'endpointslices', group: 'discovery.k8s.io', namespace }, (page, config) =>
        this.discovery.listNamespacedEndpointSlice({ namespace, labelSelector: `kubernetes.io/service-name=${name}`, ...page }, config),
      ),
      this.listAll({ verb: 'list', resource: 'poddisruptionbudgets', group: 'policy', namespace }, (page, config) =>
        this.policy.listNamespacedPodDisruptionBudget({ namespace, ...page }, config),
      ),
      this.certManagerCertificate(configuration?.metadata?.annotations?.[INJECT_CA_FROM]),
    ]);
    return { configurationName, configuration, service, endpointSlices, deployment, disruptionBudgets, certificate };
  }

  /**
   * The Certificate cert-manager's cainjector takes the caBundle from (`namespace/name`), read as a public object in
   * place of the Secret it writes. Undefined without the annotation, when it is absent, or when cert-manager's API is
   * not served (both are a 404): certificates made by hand, or self-managed.
   */
  private async certManagerCertificate(reference: string | undefined): Promise<CertManagerCertificate | undefined> {
    const [namespace, name] = reference?.split('/') ?? [];
    if (namespace === undefined || name === undefined || namespace === '' || name === '') return undefined;
    const object = await this.getOptional({ verb: 'get', resource: 'certificates', group: 'cert-manager.io', name, namespace }, (config) =>
      this.custom.getNamespacedCustomObject({ group: 'cert-manager.io', version: 'v1', namespace, plural: 'certificates', name }, config),
    );
    return object === undefined ? undefined : certificateOf(`${namespace}/${name}`, object);
  }

  /** The opted-in namespaces (with --all-namespaces every one; with --namespace that one), each with its matching pods. */
  private async scanNamespaces(selector: LabelSelector): Promise<NamespacePods[]> {
    const namespaces = await this.listNamespaces();
    const [key, value] = OPT_IN_LABEL.split('=') as [string, string];
    const targets = namespaces.map((namespace) => ({
      namespace: namespace.metadata?.name ?? '',
      optedIn: namespace.metadata?.labels?.[key] === value,
    }));
    const labelSelector = formatLabelSelector(selector);
    return this.pooled(targets, async ({ namespace, optedIn }) => ({
      namespace,
      optedIn,
      pods: await this.listAll({ verb: 'list', resource: 'pods', group: '', namespace }, (page, config) =>
        this.core.listNamespacedPod({ namespace, labelSelector, ...page }, config),
      ),
    }));
  }

  /**
   * The namespaces to scan. One named by --namespace is listed by field selector, not read by name: `list
   * namespaces` is what manifests/check grants (and a `get` would need another rule).
   */
  private async listNamespaces(): Promise<V1Namespace[]> {
    const only = this.settings.namespace;
    const filter = only !== undefined ? { fieldSelector: `metadata.name=${only}` } : this.settings.allNamespaces ? {} : { labelSelector: OPT_IN_LABEL };
    const namespaces = await this.listAll({ verb: 'list', resource: 'namespaces', group: '' }, (page, config) => this.core.listNamespace({ ...filter, ...page }, config));
    if (only === undefined || namespaces.length > 0) return namespaces;
    const optedIn = await this.listAll({ verb: 'list', resource: 'namespaces', group: '' }, (page, config) =>
      this.core.listNamespace({ labelSelector: OPT_IN_LABEL, ...page }, config),
    );
    const names = optedIn.map((namespace) => namespace.metadata?.name ?? '');
    throw new NamespaceNotFoundError(only, closestName(only, names), names);
  }

  /** `kubectl version`'s server half, and a SelfSubjectAccessReview for each verb kubectl apply needs on each kind. */
  async preInstall(certManager: boolean): Promise<PreInstallReading> {
    const version = await this.call({ verb: 'get', resource: 'version', group: '' }, (config) => this.version.getCode({}, config));
    const questions = accessQuestions([...BASE_RESOURCES, ...(certManager ? CERT_MANAGER_RESOURCES : [])]);
    const access = await this.pooled(questions, async (question) => ({ question, allowed: await this.mayI(question) }));
    const reading = { version: { major: version.major, minor: version.minor, gitVersion: version.gitVersion }, access };
    return certManager ? { ...reading, certManager: { served: await this.certManagerResources() } } : reading;
  }

  private async mayI({ verb, group, resource, namespace }: AccessQuestion): Promise<boolean> {
    const body = {
      apiVersion: 'authorization.k8s.io/v1',
      kind: 'SelfSubjectAccessReview',
      spec: { resourceAttributes: { verb, group, resource, ...(namespace === undefined ? {} : { namespace }) } },
    };
    const review = await this.call({ verb: 'create', resource: 'selfsubjectaccessreviews', group: 'authorization.k8s.io' }, (config) =>
      this.authorization.createSelfSubjectAccessReview({ body }, config),
    );
    return review.status?.allowed === true;
  }

  /**
   * The resources of cert-manager.io/v1 as discovery lists them (what kubectl reads to know a kind exists; every
   * authenticated user may read discovery); undefined when the group is not served (404).
   */
  private async certManagerResources(): Promise<readonly string[] | undefined> {
    const list = await this.getOptional({ verb: 'get', resource: 'discovery of cert-manager.io/v1', group: '' }, (config) =>
      this.custom.getAPIResources({ group: 'cert-manager.io', version: 'v1' }, config),
    );
    return list?.resources.map((resource) => resource.name);
  }

  /**
   * The owners of the ReplicaSets of the pods that need a restart (what `kubectl rollout restart` acts on) and
   * of the injected ones (whose drains are reported by workload).
   */
  private async replicaSetOwners(namespaces: readonly NamespacePods[], expected: Expectations): Promise<Map<string, V1OwnerReference | undefined>> {
    const wanted = new Set<string>();
    for (const scan of namespaces.filter((candidate) => candidate.optedIn)) {
      for (const pod of scan.pods) {
        const replicaSet = replicaSetOf(pod);
        const state = judgePod(pod, expected);
        if (replicaSet !== undefined && (needsWorkload(state) || state?.kind === 'injected')) wanted.add(replicaSet);
      }
    }
    return this.ownersOf([...wanted]);
  }

  /** The controller of each ReplicaSet ("namespace/name"); undefined for one that is gone or has none. */
  async ownersOf(replicaSets: readonly string[]): Promise<Map<string, V1OwnerReference | undefined>> {
    const owners = await this.pooled(replicaSets, async (qualified) => {
      const [namespace, name] = qualified.split('/') as [string, string];
      const replicaSet = await this.getOptional({ verb: 'get', resource: 'replicasets', group: 'apps', name, namespace }, (config) =>
        this.apps.readNamespacedReplicaSet({ name, namespace }, config),
      );
      return [qualified, replicaSet?.metadata?.ownerReferences?.find((owner) => owner.controller !== false)] as const;
    });
    return new Map(owners);
  }

  /** Runs `work` over `items`, `concurrency` at a time, keeping their order. */
  private async pooled<T, R>(items: readonly T[], work: (item: T) => Promise<R>): Promise<R[]> {
    const results: R[] = new Array<R>(items.length);
    let next = 0;
    const worker = async (): Promise<void> => {
      while (next < items.length) {
        const index = next++;
        results[index] = await work(items[index] as T);
      }
    };
    await Promise.all(Array.from({ length: Math.min(this.settings.concurrency, items.length) }, worker));
    return results;
  }

  /** Every page of a list: `limit` on each request, `continue` from the previous answer. */
  private async listAll<T>(
    operation: ReadOperation,
    page: (parameters: { limit: number; _continue?: string }, config: ConfigurationOptions) => Promise<PageOf<T>>,
  ): Promise<T[]> {
    const items: T[] = [];
    let token: string | undefined;
    do {
      const parameters = { limit: this.settings.pageSize, ...(token === undefined ? {} : { _continue: token }) };
      const answer = await this.call(operation, (config) => page(parameters, config));
      items.push(...answer.items);
      token = answer.metadata?._continue || undefined;
    } while (token !== undefined);
    return items;
  }

  private async getOptional<T>(operation: ReadOperation, request: (config: ConfigurationOptions) => Promise<T>): Promise<T | undefined> {
    try {
      return await this.call(operation, request);
    } catch (error) {
      if (error instanceof NotFound) return undefined;
      throw error;
    }
  }

  private async call<T>(operation: ReadOperation, request: (config: ConfigurationOptions) => Promise<T>): Promise<T> {
    const timeout = AbortSignal.timeout(this.settings.requestTimeoutMs);
    try {
      return await request({ middleware: [withSignal(timeout)], middlewareMergeStrategy: 'append' });
    } catch (error) {
      throw this.translate(error, operation, timeout.aborted);
    }
  }

  private translate(error: unknown, operation: ReadOperation, timedOut: boolean): Error {
    if (error instanceof ApiException) return this.translateStatus(error.code, statusOf(error.body).message, operation);
    if (timedOut) return new UnreachableError(`no answer from ${this.server} within ${this.settings.requestTimeoutMs} ms to ${describeRead(operation)}`);
    const reason = causeOf(error);
    return new UnreachableError(`cannot reach the API server ${this.server}: ${reason} (is the cluster up, and the kubeconfig's context the right one?)`);
  }

  private translateStatus(code: number, message: string | undefined, operation: ReadOperation): Error {
    if (code === 404) return new NotFound();
    if (code === 403) return new ForbiddenError(operation, message);
    if (code === 401) return new UnauthenticatedError(`${this.server} did not accept the kubeconfig's credentials (401): log in again, or pick another --context`);
    return new ApiAnswerError(`${this.server} answered ${code} to ${describeRead(operation)}${message === undefined ? '' : `: ${message}`}`);
  }
}

/** The annotation by which cert-manager's cainjector fills the caBundle from a Certificate's CA. */
const INJECT_CA_FROM = 'cert-manager.io/inject-ca-from';

/** The fields check uses of a cert-manager.io/v1 Certificate, read defensively: a custom object has no client-side type. */
function certificateOf(ref: string, object: unknown): CertManagerCertificate {
  const record = (value: unknown): Record<string, unknown> => (typeof value === 'object' && value !== null ? (value as Record<string, unknown>) : {});
  const text = (value: unknown): string | undefined => (typeof value === 'string' ? value : undefined);
  const spec = record(record(object).spec);
  const status = record(record(object).status);
  const conditions = Array.isArray(status.conditions) ? status.conditions.map(record) : [];
  const ready = conditions.find((condition) => condition.type === 'Ready');
  const reason = text(ready?.reason);
  const message = text(ready?.message);
  return {
    ref,
    secretName: text(spec.secretName),
    dnsNames: Array.isArray(spec.dnsNames) ? spec.dnsNames.filter((name): name is string => typeof name === 'string') : [],
    notAfter: text(status.notAfter),
    ready: ready === undefined ? undefined : { status: text(ready.status) ?? 'Unknown', ...(reason === undefined ? {} : { reason }), ...(message === undefined ? {} : { message }) },
  };
}

/** A 404 on a get: the object is absent, which the checks report. Never leaves this file. */
class NotFound extends Error {
  override readonly name = 'NotFound';
}


/**
 * Reads everything the checks need, and the load balancer's lag from Prometheus at the same time when asked;
 * throws a CheckError (exit 2) when the cluster cannot be read. A failed lag is a reading, not an error.
 */
export async function readCluster(
  kubeConfig: KubeConfig,
  settings: ReadSettings,
): Promise<{ snapshot: ClusterSnapshot; expected: Expectations; lag: LagReading }> {
  const reader = new ClusterReader(kubeConfig, settings);
  const pending = settings.lag === undefined ? Promise.resolve<LagReading>({ status: 'unknown' }) : readLag(kubeConfig, settings.lag, settings.requestTimeoutMs);
  // readLag rejects only on a bug; if the snapshot fails first, its answer is simply dropped.
  void pending.catch(() => undefined);
  const { snapshot, expected } = await reader.snapshot();
  const lag = await pending;
  if (lag.status !== 'read') return { snapshot, expected, lag };
  // The lag's ReplicaSets (older ones too: the pods that drained belonged to them), to find their Deployments.
  const scanned = new Set(snapshot.namespaces.filter((scan) => scan.optedIn).map((scan) => scan.namespace));
  const unknown = new Set<string>();
  for (const { labels } of lag.samples) {
    const qualified = `${labels.namespace ?? ''}/${labels[CONTROLLER_NAME_LABEL] ?? ''}`;
    if (labels[CONTROLLER_KIND_LABEL] === 'ReplicaSet' && scanned.has(labels.namespace ?? '') && !snapshot.replicaSetOwners.has(qualified)) unknown.add(qualified);
  }
  if (unknown.size === 0) return { snapshot, expected, lag };
  const more = await reader.ownersOf([...unknown]);
  return { snapshot: { ...snapshot, replicaSetOwners: new Map([...snapshot.replicaSetOwners, ...more]) }, expected, lag };
}

/** What check --pre reads: the server's version, the caller's permissions for the install, cert-manager when asked. */
export function readPreInstall(kubeConfig: KubeConfig, settings: ReadSettings, certManager: boolean): Promise<PreInstallReading> {
  return new ClusterReader(kubeConfig, settings).preInstall(certManager);
}

/** The lag's query, answered; every failure is a `failed` reading whose message names what went wrong. */
async function readLag(kubeConfig: KubeConfig, { source, window }: NonNullable<ReadSettings['lag']>, timeoutMs: number): Promise<LagReading> {
  const query = lagQuery(window);
  const server = kubeConfig.getCurrentCluster()?.server;
  const shown = describeSource(source, server);
  try {
    const transport = source.kind === 'url' ? directTransport(source.url) : await apiServerTransport(kubeConfig, source, shown);
    const samples = await queryVector(source, transport, query, timeoutMs);
    // What the sidecars reported of their drains' sight: a query each, whose failure leaves the lag shown.
    const side: Record<string, readonly VectorSample[] | null> = {};
    for (const [name, sideQuery] of Object.entries(SIDE_QUERIES)) {
      side[name] = await queryVector(source, transport, sideQuery(window), timeoutMs).catch((error: unknown) => {
        if (error instanceof PrometheusError) return null;
        throw error;
      });
    }
    return { status: 'read', source: shown, window, query, samples, ...(side as SideReadings) };
  } catch (error) {
    if (!(error instanceof PrometheusError)) throw error;
    return { status: 'failed', source: shown, window, query, message: error.message };
  }
}

/** Requests to the API server with the kubeconfig's credentials, as client-node's own: its agent (CA, client certificate) and headers. */
async function apiServerTransport(kubeConfig: KubeConfig, source: PrometheusSource, shown: string): Promise<QueryTransport> {
  const server = kubeConfig.getCurrentCluster()?.server;
  if (server === undefined) throw new PrometheusError(`the kubeconfig names no API server to reach ${shown} through`);
  const options: RequestOptions = {};
  try {
    await kubeConfig.applyToHTTPSOptions(options);
  } catch (error) {
    throw new PrometheusError(`cannot use the kubeconfig's credentials for the service proxy: ${error instanceof Error ? error.message : String(error)}`);
  }
  return { base: new URL(server), options, describe: `Prometheus's ${shown}`, throughApiServer: source.kind === 'service' };
}
