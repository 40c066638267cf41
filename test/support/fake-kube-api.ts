/**
 * A fake Kubernetes API server for the few endpoints self-managed TLS uses: Secrets (get, create, update
 * with resourceVersion) and MutatingWebhookConfigurations (get, JSON patch), and the reads of `check`: get and
 * list (label selector, `limit`/`continue`) of namespaces, pods, services, deployments, replicasets,
 * daemonsets, statefulsets, endpointslices and poddisruptionbudgets (addObject, removeObject; lists by label selector
 * and by the field selector metadata.name), and those of `check --pre`: /version (serverVersion), discovery of
 * API groups added with serveApiGroup, and SelfSubjectAccessReviews (allowed unless `denies` says otherwise). It is a real node:https server on
 * 127.0.0.1, so the real @kubernetes/client-node code path (TLS, bearer token, serialisation, middleware)
 * is exercised. Every request is recorded; faults, stalls and barriers can be injected.
 */
import { once } from 'node:events';
import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { KubeConfig } from '@kubernetes/client-node';
import fastJsonPatch, { type Operation } from 'fast-json-patch';
import { generateCertificates } from '../../src/certs/generate.js';
import { matchesLabels, parseLabelSelector } from '../../src/config/label-selector.js';

const { applyPatch } = fastJsonPatch;

export interface RecordedRequest {
  readonly method: string;
  readonly path: string;
  /** The query string without its `?` (labelSelector=...&limit=...). */
  readonly query: string;
  readonly contentType: string | undefined;
  readonly authorization: string | undefined;
  readonly body: unknown;
  /** performance.now() when the request arrived. */
  readonly at: number;
}

type KubeObject = Record<string, any>;

export interface Fault {
  readonly method?: string;
  readonly path?: RegExp;
  /** Answer with this status (a Status body), or stall until the client gives up. */
  readonly status: number | 'stall';
  readonly reason?: string;
  readonly message?: string;
  /** How many requests it applies to; default all. */
  times?: number;
}

const SECRETS = /^\/api\/v1\/namespaces\/([^/]+)\/secrets(?:\/([^/]+))?$/;
const WEBHOOKS = /^\/apis\/admissionregistration\.k8s\.io\/v1\/mutatingwebhookconfigurations\/([^/]+)$/;
/** /api/v1[/namespaces/NS]/RESOURCE[/NAME], /apis/GROUP/VERSION[/namespaces/NS]/RESOURCE[/NAME]. */
const OBJECTS = /^\/(api\/v1|apis\/[^/]+\/[^/]+)(?:\/namespaces\/([^/]+))?\/([a-z]+)(?:\/([^/]+))?$/;

/** The plural resource of each kind addObject takes. */
const RESOURCES: Readonly<Record<string, string>> = {
  Namespace: 'namespaces',
  Pod: 'pods',
  Service: 'services',
  Deployment: 'deployments',
  ReplicaSet: 'replicasets',
  DaemonSet: 'daemonsets',
  StatefulSet: 'statefulsets',
  EndpointSlice: 'endpointslices',
  PodDisruptionBudget: 'poddisruptionbudgets',
  // cert-manager.io/v1, as if its CRD were installed.
  Certificate: 'certificates',
};

/** The resourceAttributes of a SelfSubjectAccessReview. */
export interface AccessAttributes {
  readonly verb: string;
  readonly group: string;
  readonly resource: string;
  readonly namespace?: string;
}

const ACCESS_REVIEWS = '/apis/authorization.k8s.io/v1/selfsubjectaccessreviews';

export class FakeKubeApi {
  readonly requests: RecordedRequest[] = [];
  /** What GET /version answers. */
  serverVersion = { major: '1', minor: '31', gitVersion: 'v1.31.2', platform: 'linux/amd64' };
  /** Which SelfSubjectAccessReviews are answered allowed: false; by default every one is allowed. */
  denies: (attributes: AccessAttributes) => boolean = () => false;
  /** Discovery documents by group/version ("cert-manager.io/v1"): the resources each serves. */
  private readonly apiGroups = new Map<string, readonly string[]>();
  readonly secrets = new Map<string, KubeObject>();
  readonly webhookConfigurations = new Map<string, KubeObject>();
  /** Objects of addObject, by collection ("api/v1|edge|pods"; cluster-scoped ones with an empty namespace). */
  private readonly collections = new Map<string, KubeObject[]>();
  private readonly faults: Fault[] = [];
  private barrier: { match: (request: RecordedRequest) => boolean; count: number; waiting: (() => void)[] } | undefined;
  private version = 100;

  private constructor(
    private readonly server: Server,
    readonly url: string,
    readonly caPem: string,
    readonly token: string,
  ) {}

  static async start(token = 'test-token'): Promise<FakeKubeApi> {
    const bundle = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 1 });
    const server = createServer({ cert: bundle.certPem, key: bundle.keyPem });
    server.listen(0, '127.0.0.1');
    await once(server, 'listening');
    const { port } = server.address() as AddressInfo;
    const fake = new FakeKubeApi(server, `https://127.0.0.1:${port}`, bundle.caCertPem, token);
    server.on('request', (request: IncomingMessage, response: ServerResponse) => void fake.handle(request, response));
    return fake;
  }

  /** A KubeConfig like the in-cluster one: this server, its CA, a bearer token. */
  kubeConfig(token = this.token): KubeConfig {
    const kubeConfig = new KubeConfig();
    kubeConfig.loadFromOptions({
      clusters: [{ name: 'fake', server: this.url, caData: Buffer.from(this.caPem).toString('base64'), skipTLSVerify: false }],
      users: [{ name: 'webhook', token }],
      contexts: [{ name: 'fake', cluster: 'fake', user: 'webhook' }],
      currentContext: 'fake',
    });
    return kubeConfig;
  }

  async close(): Promise<void> {
    for (const release of this.barrier?.waiting ?? []) release();
    this.server.closeAllConnections();
    await new Promise<void>((resolve) => this.server.close(() => resolve()));
  }

  addWebhookConfiguration(name: string, webhookNames: readonly string[], caBundle?: string): void {
    this.webhookConfigurations.set(name, {
      apiVersion: 'admissionregistration.k8s.io/v1',
      kind: 'MutatingWebhookConfiguration',
      metadata: { name, resourceVersion: this.nextVersion() },
      webhooks: webhookNames.map((webhookName) => ({
        name: webhookName,
        admissionReviewVersions: ['v1'],
        sideEffects: 'None',
        clientConfig: {
          service: { name: 'envoy-shutdown-manager', namespace: 'envoy-shutdown-manager', path: '/mutate', port: 443 },
          ...(caBundle === undefined ? {} : { caBundle: Buffer.from(caBundle).toString('base64') }),
        },
      })),
    });
  }

  /** The caBundle of each webhook, as PEM text. */
  caBundles(name: string): (string | undefined)[] {
    const webhooks = (this.webhookConfigurations.get(name)?.webhooks ?? []) as KubeObject[];
    return webhooks.map((webhook) => {
      const value = webhook.clientConfig?.caBundle as string | undefined;
      return value === undefined ? undefined : Buffer.from(value, 'base64').toString('utf8');
    });
  }

  /** Stores a Secret directly, as if created earlier; data values are plain text; `metadata` is added to the Secret's. */
  seedSecret(namespace: string, name: string, data: Record<string, string>, type = 'kubernetes.io/tls', metadata: KubeObject = {}): void {
    const encoded = Object.fromEntries(Object.entries(data).map(([key, value]) => [key, Buffer.from(value).toString('base64')]));
    this.secrets.set(`${namespace}/${name}`, {
      apiVersion: 'v1',
      kind: 'Secret',
      metadata: { ...metadata, name, namespace, resourceVersion: this.nextVersion() },
      type,
      data: encoded,
    });
  }

  /** A stored Secret's data as plain text. */
  secretData(namespace: string, name: string): Record<string, string> | undefined {
    const secret = this.secrets.get(`${namespace}/${name}`);
    if (secret === undefined) return undefined;
    const data = (secret.data ?? {}) as Record<string, string>;
    return Object.fromEntries(Object.entries(data).map(([key, value]) => [key, Buffer.from(value, 'base64').toString('utf8')]));
  }

  /** Stores any object of RESOURCES (apiVersion, kind, metadata.name, and metadata.namespace unless a Namespace). */
  addObject(object: KubeObject): void {
    const resource = RESOURCES[String(object.kind)];
    if (resource === undefined) throw new Error(`the fake API server does not serve ${String(object.kind)}`);
    const prefix = object.apiVersion === 'v1' ? 'api/v1' : `apis/${String(object.apiVersion)}`;
    const key = `${prefix}|${object.kind === 'Namespace' ? '' : String(object.metadata?.namespace)}|${resource}`;
    const stored = { ...object, metadata: { ...object.metadata, resourceVersion: this.nextVersion() } };
    this.collections.set(key, [...(this.collections.get(key) ?? []), stored]);
  }

  /** Removes an object stored by addObject (as a rollout replaces a pod); false when there was none. */
  removeObject(apiVersion: string, kind: string, namespace: string, name: string): boolean {
    const key = `${apiVersion === 'v1' ? 'api/v1' : `apis/${apiVersion}`}|${kind === 'Namespace' ? '' : namespace}|${RESOURCES[kind] ?? ''}`;
    const all = this.collections.get(key) ?? [];
    const kept = all.filter((object) => object.metadata?.name !== name);
    this.collections.set(key, kept);
    return kept.length < all.length;
  }

  /** Serves GET /apis/GROUP/VERSION (discovery) with these resources, as a CRD's group is once installed. */
  serveApiGroup(groupVersion: string, resources: readonly string[]): void {
    this.apiGroups.set(groupVersion, resources);
  }

  fail(fault: Fault): void {
    this.faults.push(fault);
  }

  /** Holds requests that match until `count` of them have arrived, then lets them all through at once. */
  holdUntil(count: number, match: (request: RecordedRequest) => boolean): void {
    this.barrier = { match, count, waiting: [] };
  }

  /** "GET /api/v1/..." for every request so far, for assertions on the sequence. */
  calls(): string[] {
    return this.requests.map(({ method, path }) => `${method} ${path}`);
  }

  private nextVersion(): string {
    this.version += 1;
    return String(this.version);
  }

  private async handle(request: IncomingMessage, response: ServerResponse): Promise<void> {
    const chunks: Buffer[] = [];
    for await (const chunk of request) chunks.push(chunk as Buffer);
    const text = Buffer.concat(chunks).toString('utf8');
    const url = new URL(request.url ?? '/', this.url);
    const recorded: RecordedRequest = {
      method: request.method ?? 'GET',
      path: url.pathname,
      query: url.search.slice(1),
      contentType: request.headers['content-type'],
      authorization: request.headers.authorization,
      body: text === '' ? undefined : (JSON.parse(text) as unknown),
      at: performance.now(),
    };
    this.requests.push(recorded);
    await this.waitAtBarrier(recorded);

    const fault = this.takeFault(recorded);
    if (fault?.status === 'stall') return; // never answered: the client's timeout must fire
    if (fault !== undefined) return this.status(response, fault.status, fault.reason ?? 'InternalError', fault.message ?? 'injected fault');
    if (recorded.authorization !== `Bearer ${this.token}`) return this.status(response, 401, 'Unauthorized', 'Unauthorized');
    this.route(recorded, response);
  }

  private async waitAtBarrier(request: RecordedRequest): Promise<void> {
    const barrier = this.barrier;
    if (barrier === undefined || !barrier.match(request)) return;
    const arrived = new Promise<void>((resolve) => barrier.waiting.push(resolve));
    if (barrier.waiting.length >= barrier.count) {
      this.barrier = undefined;
      for (const release of barrier.waiting) release();
    }
    await arrived;
  }

  private takeFault(request: RecordedRequest): Fault | undefined {
    const fault = this.faults.find(
      (candidate) =>
        (candidate.method === undefined || candidate.method === request.method) &&
        (candidate.path === undefined || candidate.path.test(request.path)) &&
        (candidate.times === undefined || candidate.times > 0),
    );
    if (fault?.times !== undefined) fault.times -= 1;
    return fault;
  }

  private route(request: RecordedRequest, response: ServerResponse): void {
    const secret = SECRETS.exec(request.path);
    if (secret) return this.secretRoute(request, response, secret[1] as string, secret[2]);
    const webhook = WEBHOOKS.exec(request.path);
    if (webhook) return this.webhookRoute(request, response, webhook[1] as string);
    if (request.path === '/version' && request.method === 'GET') return this.json(response, 200, this.serverVersion);
    if (request.path === ACCESS_REVIEWS && request.method === 'POST') return this.accessReview(request, response);
    const discovery = this.apiGroups.get(request.path.replace(/^\/apis\//, ''));
    if (discovery !== undefined && request.method === 'GET') {
      const groupVersion = request.path.replace(/^\/apis\//, '');
      const resources = discovery.map((name) => ({ name, singularName: '', namespaced: true, kind: name, verbs: ['get', 'list', 'create', 'patch'] }));
      return this.json(response, 200, { kind: 'APIResourceList', apiVersion: 'v1', groupVersion, resources });
    }
    const object = OBJECTS.exec(request.path);
    if (object && request.method === 'GET') {
      const [, prefix, namespace = '', resource, name] = object as unknown as [string, string, string | undefined, string, string | undefined];
      return this.objectRoute(request, response, `${prefix}|${namespace}|${resource}`, resource, name);
    }
    this.status(response, 404, 'NotFound', `the server could not find the requested resource ${request.path}`);
  }

  private secretRoute(request: RecordedRequest, response: ServerResponse, namespace: string, name: string | undefined): void {
    const body = request.body as KubeObject | undefined;
    if (request.method === 'POST' && name === undefined && body !== undefined) {
      const key = `${namespace}/${String(body.metadata?.name)}`;
      if (this.secrets.has(key)) {
        return this.status(response, 409, 'AlreadyExists', `secrets "${String(body.metadata?.name)}" already exists`);
      }
      const created = { ...body, metadata: { ...body.metadata, namespace, resourceVersion: this.nextVersion() } };
      this.secrets.set(key, created);
      return this.json(response, 201, created);
    }
    const key = `${namespace}/${name ?? ''}`;
    const stored = this.secrets.get(key);
    if (name === undefined || stored === undefined) return this.status(response, 404, 'NotFound', `secrets "${name ?? ''}" not found`);
    if (request.method === 'GET') return this.json(response, 200, stored);
    if (request.method === 'PUT' && body !== undefined) {
      if (body.metadata?.resourceVersion !== stored.metadata.resourceVersion) {
        return this.status(response, 409, 'Conflict', `Operation cannot be fulfilled on secrets "${name}": the object has been modified`);
      }
      if (body.type !== stored.type) return this.status(response, 422, 'Invalid', `Secret "${name}" is invalid: type: field is immutable`);
      const updated = { ...body, metadata: { ...body.metadata, resourceVersion: this.nextVersion() } };
      this.secrets.set(key, updated);
      return this.json(response, 200, updated);
    }
    this.status(response, 405, 'MethodNotAllowed', `${request.method} is not supported here`);
  }

  private webhookRoute(request: RecordedRequest, response: ServerResponse, name: string): void {
    const stored = this.webhookConfigurations.get(name);
    if (stored === undefined) {
      return this.status(response, 404, 'NotFound', `mutatingwebhookconfigurations.admissionregistration.k8s.io "${name}" not found`);
    }
    if (request.method === 'GET') return this.json(response, 200, stored);
    if (request.method !== 'PATCH') return this.status(response, 405, 'MethodNotAllowed', `${request.method} is not supported here`);
    if (request.contentType !== 'application/json-patch+json') {
      return this.status(response, 415, 'UnsupportedMediaType', `the body of the request was in an unknown format - accepted media types include: application/json-patch+json`);
    }
    try {
      const { newDocument } = applyPatch(stored, request.body as Operation[], true, false);
      newDocument.metadata = { ...newDocument.metadata, resourceVersion: this.nextVersion() };
      this.webhookConfigurations.set(name, newDocument);
      this.json(response, 200, newDocument);
    } catch (error) {
      // What the API server answers when a JSON patch `test` fails.
      this.status(response, 422, 'Invalid', `the server rejected our request due to an error in our request: ${String(error)}`);
    }
  }

  /** A SelfSubjectAccessReview, answered as the API server does: the review back, with its status. */
  private accessReview(request: RecordedRequest, response: ServerResponse): void {
    const review = request.body as KubeObject;
    const attributes = (review.spec?.resourceAttributes ?? {}) as Record<string, string | undefined>;
    const asked: AccessAttributes = {
      verb: attributes.verb ?? '',
      group: attributes.group ?? '',
      resource: attributes.resource ?? '',
      ...(attributes.namespace === undefined ? {} : { namespace: attributes.namespace }),
    };
    const allowed = !this.denies(asked);
    this.json(response, 201, { ...review, status: allowed ? { allowed } : { allowed, reason: 'no RBAC policy matched' } });
  }

  /** GET of one object, or a list with labelSelector, limit and continue (the offset, as an opaque token). */
  private objectRoute(request: RecordedRequest, response: ServerResponse, key: string, resource: string, name: string | undefined): void {
    const all = this.collections.get(key) ?? [];
    if (name !== undefined) {
      const found = all.find((candidate) => candidate.metadata?.name === name);
      return found === undefined ? this.status(response, 404, 'NotFound', `${resource} "${name}" not found`) : this.json(response, 200, found);
    }
    const query = new URLSearchParams(request.query);
    // No selector selects everything (the project's parser refuses an empty one, as the webhook must).
    const text = query.get('labelSelector') ?? '';
    const selector = text === '' ? undefined : parseLabelSelector(text);
    // The one field selector check uses: metadata.name=NAME (the API server serves it on every resource).
    const field = /^metadata\.name=(.*)$/.exec(query.get('fieldSelector') ?? '');
    if (query.has('fieldSelector') && field === null) return this.status(response, 400, 'BadRequest', `the fake serves no field selector ${query.get('fieldSelector')}`);
    const matching = all.filter(
      (candidate) =>
        (selector === undefined || matchesLabels(selector, candidate.metadata?.labels as Record<string, string> | undefined)) &&
        (field === null || candidate.metadata?.name === field[1]),
    );
    const offset = Number(Buffer.from(query.get('continue') ?? '', 'base64url').toString('utf8') || '0');
    const limit = Number(query.get('limit') ?? '0') || matching.length;
    const items = matching.slice(offset, offset + limit);
    const rest = offset + limit < matching.length ? Buffer.from(String(offset + limit)).toString('base64url') : undefined;
    this.json(response, 200, { apiVersion: 'v1', kind: 'List', metadata: { resourceVersion: String(this.version), ...(rest === undefined ? {} : { continue: rest }) }, items });
  }

  private json(response: ServerResponse, code: number, body: unknown): void {
    response.writeHead(code, { 'content-type': 'application/json' });
    response.end(JSON.stringify(body));
  }

  private status(response: ServerResponse, code: number, reason: string, message: string): void {
    this.json(response, code, { kind: 'Status', apiVersion: 'v1', metadata: {}, status: 'Failure', message, reason, code });
  }
}
