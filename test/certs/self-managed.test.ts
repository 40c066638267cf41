/**
 * Self-managed TLS against a fake API server over real HTTPS, through the real client-node adapter: the
 * requests made (method, path, content type, token, body), the create-or-read race, renewal served to new
 * connections by the real webhook server, and the failures an operator must be able to act on.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import { X509Certificate } from 'node:crypto';
import { createServer } from 'node:net';
import { connect, type PeerCertificate } from 'node:tls';
import { describe, it, type TestContext } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import pino from 'pino';
import { generateCertificates, serviceDnsNames } from '../../src/certs/generate.js';
import type { TlsMaterial } from '../../src/certs/material.js';
import { SelfManagedTlsError } from '../../src/certs/reconcile.js';
import { SELF_MANAGED_DEFAULTS, SelfManagedCertificates, type SelfManagedOptions } from '../../src/certs/self-managed.js';
import { splitPemCertificates } from '../../src/certs/stored.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { KubeCertificateStore } from '../../src/kube/client.js';
import { KubeConflictError, KubeForbiddenError } from '../../src/kube/errors.js';
import { startWebhookServer } from '../../src/webhook/server.js';
import { FakeKubeApi, type RecordedRequest } from '../support/fake-kube-api.js';
import { ManualTimers } from '../support/manual-timers.js';
import { MemoryLog } from '../support/memory-log.js';

const NAMESPACE = 'envoy-shutdown-manager';
const SERVICE = 'envoy-shutdown-manager';
const SECRET = 'envoy-shutdown-manager-self-signed';
const CONFIGURATION = 'shutdown-manager.io';
const WEBHOOK = 'inject.shutdown-manager.io';
const DNS_NAMES = serviceDnsNames(SERVICE, NAMESPACE);
const API_SERVER_NAME = `${SERVICE}.${NAMESPACE}.svc`;
const DAY_MS = 86_400_000;

const SECRET_PATH = `/api/v1/namespaces/${NAMESPACE}/secrets/${SECRET}`;
const SECRETS_PATH = `/api/v1/namespaces/${NAMESPACE}/secrets`;
const CONFIGURATION_PATH = `/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/${CONFIGURATION}`;

type ManagerOptions = Partial<SelfManagedOptions> & { token?: string; requestTimeoutMs?: number; server?: string };

function newManager(api: FakeKubeApi, options: ManagerOptions = {}): SelfManagedCertificates {
  const { token, requestTimeoutMs = 2_000, server, ...rest } = options;
  const kubeConfig = api.kubeConfig(token);
  if (server !== undefined) kubeConfig.clusters = kubeConfig.clusters.map((cluster) => ({ ...cluster, server }));
  const store = new KubeCertificateStore(kubeConfig, {
    namespace: NAMESPACE,
    secretName: SECRET,
    webhookConfigurationName: CONFIGURATION,
    requestTimeoutMs,
  });
  return new SelfManagedCertificates({
    store,
    dnsNames: DNS_NAMES,
    commonName: API_SERVER_NAME,
    logger: pino({ level: 'silent' }),
    trustPropagationMs: 0,
    startupRetry: { attempts: 3, initialDelayMs: 10, maxDelayMs: 40 },
    random: () => 0.5, // no jitter: the backoff delays are exact
    ...rest,
  });
}

async function startApi(t: TestContext, webhooks: readonly string[] = [WEBHOOK]): Promise<FakeKubeApi> {
  const api = await FakeKubeApi.start();
  t.after(() => api.close());
  api.addWebhookConfiguration(CONFIGURATION, webhooks);
  return api;
}

const SERVING_ANNOTATION = 'shutdown-manager.io/serving-certificate';
/** The serving certificate the webhook published on its configuration, as PEM. */
const published = (api: FakeKubeApi): string | undefined =>
  (api.webhookConfigurations.get(CONFIGURATION)?.metadata as { annotations?: Record<string, string> }).annotations?.[SERVING_ANNOTATION];
/** The DER of every certificate of a PEM text. */
const ders = (pem: string): Buffer[] => splitPemCertificates(pem).map((block) => new X509Certificate(block).raw);
const base64 = (text: string): string => Buffer.from(text).toString('base64');
const fingerprint = (pem: string | Buffer): string => new X509Certificate(pem).fingerprint256;
const stored = (api: FakeKubeApi): Record<string, string> => api.secretData(NAMESPACE, SECRET) ?? assert.fail('no Secret stored');
const only = (api: FakeKubeApi, method: string, path: string): RecordedRequest[] =>
  api.requests.filter((request) => request.method === method && request.path === path);

describe('self-managed TLS: first start and further replicas', () => {
  it('fresh start: 404, then CREATE of a kubernetes.io/tls Secret, then a guarded JSON patch of the caBundle', async (t) => {
    const api = await startApi(t);
    const material = await newManager(api).obtain();

    assert.deepEqual(api.calls(), [`GET ${SECRET_PATH}`, `POST ${SECRETS_PATH}`, `GET ${CONFIGURATION_PATH}`, `PATCH ${CONFIGURATION_PATH}`]);
    for (const request of api.requests) assert.equal(request.authorization, 'Bearer test-token', `${request.method} ${request.path}`);

    const [create] = only(api, 'POST', SECRETS_PATH) as [RecordedRequest];
    assert.match(create.contentType ?? '', /^application\/json/);
    const body = create.body as { kind: string; type: string; metadata: { name: string; namespace: string }; data: Record<string, string> };
    assert.equal(body.kind, 'Secret');
    assert.deepEqual([body.metadata.name, body.metadata.namespace, body.type], [SECRET, NAMESPACE, 'kubernetes.io/tls']);
    assert.deepEqual(Object.keys(body.data).sort(), ['ca.crt', 'tls.crt', 'tls.key']);

    const data = stored(api);
    assert.equal(data['tls.crt'], material.cert.toString());
    assert.equal(data['tls.key'], material.key.toString());
    const leaf = new X509Certificate(material.cert);
    const cas = splitPemCertificates(data['ca.crt'] ?? '');
    assert.equal(cas.length, 1, 'a first certificate has exactly one CA to trust');
    assert.ok(leaf.checkIssued(new X509Certificate(cas[0] as string)), 'the served leaf is issued by the CA in the caBundle');
    for (const name of DNS_NAMES) assert.ok(leaf.checkHost(name, { subject: 'never' }), name);

    const [patch] = only(api, 'PATCH', CONFIGURATION_PATH) as [RecordedRequest];
    assert.equal(patch.contentType, 'application/json-patch+json');
    const resourceVersion = (patch.body as { path: string; value: unknown }[]).find((op) => op.path === '/metadata/resourceVersion')?.value;
    assert.deepEqual(patch.body, [
      { op: 'test', path: '/webhooks/0/name', value: WEBHOOK },
      { op: 'add', path: '/webhooks/0/clientConfig/caBundle', value: base64(data['ca.crt'] ?? '') },
      // The configuration had no annotations: the map is added, guarded by the resourceVersion read.
      { op: 'test', path: '/metadata/resourceVersion', value: resourceVersion },
      { op: 'add', path: '/metadata/annotations', value: { [SERVING_ANNOTATION]: data['tls.crt'] } },
    ]);
    assert.deepEqual(api.caBundles(CONFIGURATION), [data['ca.crt']]);
  });

  it('a second replica reads the Secret, creates nothing, and leaves a correct caBundle alone', async (t) => {
    const api = await startApi(t);
    const first = await newManager(api).obtain();
    api.requests.length = 0;

    const second = await newManager(api).obtain();
    assert.deepEqual(api.calls(), [`GET ${SECRET_PATH}`, `GET ${CONFIGURATION_PATH}`]);
    assert.deepEqual(second, first);
  });

  it('patches only the webhooks whose caBundle differs, each guarded by a test of its name', async (t) => {
    const api = await startApi(t, ['a.shutdown-manager.io', 'b.shutdown-manager.io']);
    await newManager(api).obtain();
    // Someone resets the second webhook's caBundle (say, kubectl apply of the bare manifest).
    const configuration = api.webhookConfigurations.get(CONFIGURATION) as { webhooks: { clientConfig: Record<string, unknown> }[] };
    delete configuration.webhooks[1]?.clientConfig.caBundle;
    api.requests.length = 0;

    await newManager(api).obtain();
    const [patch] = only(api, 'PATCH', CONFIGURATION_PATH) as [RecordedRequest];
    const bundle = base64(stored(api)['ca.crt'] ?? '');
    assert.deepEqual(patch.body, [
      { op: 'test', path: '/webhooks/1/name', value: 'b.shutdown-manager.io' },
      { op: 'add', path: '/webhooks/1/clientConfig/caBundle', value: bundle },
    ]);
  });

  it('reads the webhook list again when the guarded patch fails (422), then patches', async (t) => {
    const api = await startApi(t);
    api.fail({ method: 'PATCH', status: 422, reason: 'Invalid', message: 'testing value /webhooks/0/name failed', times: 1 });
    await newManager(api).obtain();
    assert.deepEqual(api.calls().slice(2), [
      `GET ${CONFIGURATION_PATH}`,
      `PATCH ${CONFIGURATION_PATH}`,
      `GET ${CONFIGURATION_PATH}`,
      `PATCH ${CONFIGURATION_PATH}`,
    ]);
    assert.deepEqual(api.caBundles(CONFIGURATION), [stored(api)['ca.crt']]);
  });

  it('the patch is refused as a whole when a webhook is no longer at the index read (a failed `test`)', async (t) => {
    const api = await startApi(t, ['a.shutdown-manager.io', 'b.shutdown-manager.io']);
    const store = new KubeCertificateStore(api.kubeConfig(), { namespace: NAMESPACE, secretName: SECRET, webhookConfigurationName: CONFIGURATION });
    // As if the list had been reordered since it was read: b is now at index 0.
    const stale = [{ index: 0, name: 'b.shutdown-manager.io', caBundle: undefined }];
    const read = await store.readWebhookConfiguration();
    await assert.rejects(store.patchWebhookConfiguration(read, { caBundle: { webhooks: stale, pem: 'PEM' } }), (error: unknown) => error instanceof KubeConflictError && error.reason === 'Changed');
    assert.deepEqual(api.caBundles(CONFIGURATION), [undefined, undefined], 'a got no caBundle meant for b');
  });

  it('two replicas starting at once: one Secret is created, the loser of the create race uses the winner’s', async (t) => {
    const api = await startApi(t);
    // Both GETs see 404 before either creates: the race is certain, not left to scheduling.
    api.holdUntil(2, (request) => request.method === 'GET' && request.path === SECRET_PATH);
    const [a, b] = await Promise.all([newManager(api).obtain(), newManager(api).obtain()]);

    assert.equal(api.secrets.size, 1);
    assert.equal(only(api, 'POST', SECRETS_PATH).length, 2, 'both tried to create');
    assert.equal(only(api, 'GET', SECRET_PATH).length, 3, 'the loser read the winner’s Secret');
    assert.deepEqual(a, b, 'both serve the same certificate');
    assert.equal(a.cert.toString(), stored(api)['tls.crt']);
    assert.deepEqual(api.caBundles(CONFIGURATION), [stored(api)['ca.crt']]);
  });
});

describe('self-managed TLS: the serving certificate published on the configuration', () => {
  it('is the certificate the TLS server presents, byte for byte, and never the key', async (t) => {
    const api = await startApi(t);
    const material = await newManager(api).obtain();
    const config = parseWebhookConfig(['--port=0', '--address=127.0.0.1'], {});
    const server = await startWebhookServer(config, pino({ level: 'silent' }), { certificate: material });
    t.after(() => server.close());

    const annotation = published(api) ?? assert.fail('no serving certificate published');
    const presented = await handshake(Number(new URL(server.url).port));
    assert.deepEqual(ders(annotation), [presented.raw], 'the published chain is the served one (a leaf, no intermediate)');
    assert.doesNotMatch(annotation, /PRIVATE KEY/);
    // What check does with it: the caBundle verifies it, for the name the API server dials.
    const leaf = new X509Certificate(annotation);
    const ca = new X509Certificate(api.caBundles(CONFIGURATION)[0] ?? '');
    assert.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey), 'the caBundle verifies the published certificate');
    assert.equal(leaf.checkHost(API_SERVER_NAME, { subject: 'never' }), API_SERVER_NAME);
  });

  it('is not written again while unchanged; others’ annotations are kept when it is', async (t) => {
    const api = await startApi(t);
    await newManager(api).obtain();
    const timers = new ManualTimers();
    const manager = newManager(api, { timers, caBundleCheckIntervalMs: 60_000, checkIntervalMs: 60_000 });
    t.after(() => manager.stop());
    await manager.obtain();
    manager.start(() => assert.fail('nothing to switch to'));
    api.requests.length = 0;
    for (let check = 0; check < 3; check++) {
      await timers.next();
      timers.fire();
    }
    await timers.next();
    assert.equal(only(api, 'PATCH', CONFIGURATION_PATH).length, 0, 'full checks and caBundle checks alike: no PATCH');

    // Someone drops the annotation (kubectl annotate ...-) and adds one of theirs: only ours is put back.
    const metadata = api.webhookConfigurations.get(CONFIGURATION)?.metadata as { annotations: Record<string, string> };
    const ours = metadata.annotations[SERVING_ANNOTATION];
    metadata.annotations = { 'example.com/owner': 'platform' };
    timers.fire();
    await timers.next();
    const [patch] = only(api, 'PATCH', CONFIGURATION_PATH) as [RecordedRequest];
    assert.deepEqual(patch.body, [{ op: 'add', path: '/metadata/annotations/shutdown-manager.io~1serving-certificate', value: ours }]);
    assert.deepEqual((api.webhookConfigurations.get(CONFIGURATION)?.metadata as { annotations: Record<string, string> }).annotations, {
      'example.com/owner': 'platform',
      [SERVING_ANNOTATION]: ours,
    });
  });

  it('a configuration that changed between the read and the patch (no annotations yet) is read again, then patched', async (t) => {
    const api = await startApi(t);
    api.fail({ method: 'PATCH', status: 422, reason: 'Invalid', message: 'testing value /metadata/resourceVersion failed', times: 1 });
    const material = await newManager(api).obtain();
    assert.equal(only(api, 'PATCH', CONFIGURATION_PATH).length, 2);
    assert.equal(published(api), material.cert.toString());
  });
});

describe('self-managed TLS: replacing a Secret', () => {
  const cases: [string, () => Promise<Record<string, string>>][] = [
    ['malformed', async () => ({ 'tls.crt': 'not a certificate', 'tls.key': 'nor a key', 'ca.crt': '' })],
    ['for other DNS names', async () => secretData(await generateCertificates({ dnsNames: ['other.example.svc'] }))],
    ['expired', async () => secretData(await generateCertificates({ dnsNames: DNS_NAMES, validityDays: 30, now: new Date(Date.now() - 60 * DAY_MS) }))],
    [
      'with a key that is not the certificate’s',
      async () => {
        const [one, two] = await Promise.all([generateCertificates({ dnsNames: DNS_NAMES }), generateCertificates({ dnsNames: DNS_NAMES })]);
        return { ...secretData(one), 'tls.key': two.keyPem };
      },
    ],
  ];

  for (const [what, make] of cases) {
    it(`a Secret ${what} is replaced by an UPDATE carrying the resourceVersion read, keeping its type`, async (t) => {
      const api = await startApi(t);
      api.seedSecret(NAMESPACE, SECRET, await make(), 'Opaque');
      const resourceVersion = (api.secrets.get(`${NAMESPACE}/${SECRET}`)?.metadata as { resourceVersion: string }).resourceVersion;

      const material = await newManager(api).obtain();
      assert.deepEqual(api.calls().slice(0, 2), [`GET ${SECRET_PATH}`, `PUT ${SECRET_PATH}`]);
      const [update] = only(api, 'PUT', SECRET_PATH) as [RecordedRequest];
      const body = update.body as { metadata: { resourceVersion: string }; type: string };
      assert.equal(body.metadata.resourceVersion, resourceVersion);
      assert.equal(body.type, 'Opaque', 'a Secret’s type is immutable');
      assert.equal(material.cert.toString(), stored(api)['tls.crt']);
      // Nothing of an unusable Secret is worth trusting any longer.
      assert.equal(splitPemCertificates(stored(api)['ca.crt'] ?? '').length, 1);
    });
  }

  it('the UPDATE keeps the metadata others set (labels, annotations, ownerReferences) and adds only missing labels of ours', async (t) => {
    const api = await startApi(t);
    const ownerReferences = [{ apiVersion: 'v1', kind: 'ConfigMap', name: 'owner', uid: '0b5e7d2c-0000-4000-8000-000000000001' }];
    const metadata = { labels: { team: 'edge' }, annotations: { 'example.com/backup': 'skip' }, ownerReferences };
    api.seedSecret(NAMESPACE, SECRET, { 'tls.crt': 'not a certificate', 'tls.key': '', 'ca.crt': '' }, 'kubernetes.io/tls', metadata);

    await newManager(api).obtain();
    const [update] = only(api, 'PUT', SECRET_PATH) as [RecordedRequest];
    const sent = (update.body as { metadata: Record<string, unknown> }).metadata;
    assert.deepEqual(sent.labels, { 'app.kubernetes.io/name': 'envoy-shutdown-manager', 'app.kubernetes.io/managed-by': 'envoy-shutdown-manager', team: 'edge' });
    assert.deepEqual(sent.annotations, metadata.annotations);
    assert.deepEqual(sent.ownerReferences, ownerReferences);
    assert.deepEqual([sent.name, sent.namespace], [SECRET, NAMESPACE]);
  });

  it('two replicas renewing at once: one UPDATE wins, the other gets 409, re-reads and uses the winner’s', async (t) => {
    const api = await startApi(t);
    const past = () => new Date(Date.now() - 300 * DAY_MS);
    await newManager(api, { clock: past }).obtain(); // issued 300 days ago: due for renewal now
    const before = stored(api);
    api.requests.length = 0;
    api.holdUntil(2, (request) => request.method === 'GET' && request.path === SECRET_PATH);

    const [a, b] = await Promise.all([newManager(api).obtain(), newManager(api).obtain()]);
    assert.equal(only(api, 'PUT', SECRET_PATH).length, 2);
    const versions = only(api, 'PUT', SECRET_PATH).map((request) => (request.body as { metadata: { resourceVersion: string } }).metadata.resourceVersion);
    assert.equal(versions[0], versions[1], 'both wrote against the version they read');
    assert.deepEqual(a, b);
    assert.notEqual(stored(api)['tls.crt'], before['tls.crt']);
    assert.equal(a.cert.toString(), stored(api)['tls.crt']);
  });
});

describe('self-managed TLS: renewal', () => {
  it('renews a due certificate, extends the caBundle first, and serves the new certificate to new connections', async (t) => {
    const api = await startApi(t);
    let offsetMs = -300 * DAY_MS; // the certificate is issued 300 days ago, as of this clock
    const manager = newManager(api, { clock: () => new Date(Date.now() + offsetMs), checkIntervalMs: 30, trustPropagationMs: 20 });
    const first = await manager.obtain();
    const firstCa = stored(api)['ca.crt'] ?? '';
    const resourceVersion = (api.secrets.get(`${NAMESPACE}/${SECRET}`)?.metadata as { resourceVersion: string }).resourceVersion;

    const config = parseWebhookConfig(['--port=0', '--address=127.0.0.1'], {});
    const server = await startWebhookServer(config, pino({ level: 'silent' }), { certificate: first });
    t.after(() => server.close());
    t.after(() => manager.stop());
    const port = Number(new URL(server.url).port);
    assert.equal((await handshake(port)).fingerprint256, fingerprint(first.cert));

    let caBundleAtSwitch: string | undefined;
    api.requests.length = 0;
    offsetMs = 0;
    manager.start((material: TlsMaterial) => {
      caBundleAtSwitch = api.caBundles(CONFIGURATION)[0];
      server.useCertificate(material);
    });
    const renewed = await waitFor(async () => {
      const served = await handshake(port);
      return served.fingerprint256 === fingerprint(first.cert) ? undefined : served;
    });

    const data = stored(api);
    assert.equal(renewed.fingerprint256, fingerprint(data['tls.crt'] ?? ''));
    const [update] = only(api, 'PUT', SECRET_PATH) as [RecordedRequest];
    assert.equal((update.body as { metadata: { resourceVersion: string } }).metadata.resourceVersion, resourceVersion);

    // The bundle holds the new CA and, for the replicas still serving the old certificate, the old one.
    const bundle = splitPemCertificates(data['ca.crt'] ?? '');
    assert.equal(bundle.length, 2);
    assert.equal(bundle[1], firstCa);
    assert.ok(new X509Certificate(first.cert).checkIssued(new X509Certificate(bundle[1] as string)), 'the new leaf is issued by the CA added to the caBundle');
    assert.equal(caBundleAtSwitch, data['ca.crt'], 'the new certificate was served only once the caBundle trusted it');

    // What the API server does: verify the served certificate against the caBundle, for the Service's name.
    const verified = await handshake(port, { ca: api.caBundles(CONFIGURATION)[0] ?? '', servername: API_SERVER_NAME });
    assert.equal(verified.fingerprint256, renewed.fingerprint256);
    // The published certificate followed, in the same patch as the caBundle: the one now served.
    assert.deepEqual(ders(published(api) ?? ''), [renewed.raw]);

    await sleep(150); // several more checks: nothing more to renew
    assert.equal(only(api, 'PUT', SECRET_PATH).length, 1);
    assert.equal(only(api, 'PATCH', CONFIGURATION_PATH).length, 1);
  });

  it('a failed periodic check keeps the current certificate and is retried sooner than the interval, with backoff', async (t) => {
    const api = await startApi(t);
    const timers = new ManualTimers();
    const manager = newManager(api, { timers, checkIntervalMs: 400_000, caBundleCheckIntervalMs: 400_000, failureRetryMs: 10 });
    t.after(() => manager.stop());
    const material = await manager.obtain();
    api.fail({ method: 'GET', path: /secrets/, status: 503, reason: 'ServiceUnavailable', times: 2 });
    api.requests.length = 0;
    let applied = 0;
    manager.start(() => (applied += 1));

    const delays: number[] = [];
    for (let check = 0; check < 4; check++) {
      delays.push(await timers.next());
      if (check < 3) timers.fire();
    }
    assert.deepEqual(delays, [400_000, 10, 20, 400_000], 'the check, two retries backing off, then the interval again');
    assert.equal(only(api, 'GET', SECRET_PATH).length, 3, 'two failures, then a success');
    assert.equal(applied, 0);
    assert.equal(manager.current?.material.cert.toString(), material.cert.toString());
  });

  it('stop() cancels a check stuck on the API server without waiting for its timeout, and leaves no timer scheduled', async (t) => {
    const api = await startApi(t);
    const timers = new ManualTimers();
    const manager = newManager(api, { timers, checkIntervalMs: 10, requestTimeoutMs: 60_000 });
    await manager.obtain();
    api.fail({ status: 'stall' });
    manager.start(() => undefined);
    await timers.next();
    timers.fire();
    await waitFor(async () => (api.requests.length > 4 ? true : undefined));
    const started = performance.now();
    await manager.stop();
    // Generous for a busy machine, and still far below the 60 s request timeout it must not wait for.
    assert.ok(performance.now() - started < 5_000, 'stop() did not wait for the request timeout');
    assert.equal(timers.scheduled, 0, 'the cancelled check scheduled no retry');
  });
});

describe('self-managed TLS: caBundle kept in place between full checks', () => {
  const wipe = (api: FakeKubeApi): void => api.addWebhookConfiguration(CONFIGURATION, [WEBHOOK]); // as `kubectl replace` of the bare manifest

  it('one GET of the configuration per caBundle interval, no PATCH while nothing differs; a wiped caBundle is restored at the next one', async (t) => {
    const api = await startApi(t);
    const timers = new ManualTimers();
    const manager = newManager(api, { timers, caBundleCheckIntervalMs: 60_000, checkIntervalMs: 3_600_000 });
    t.after(() => manager.stop());
    await manager.obtain();
    const bundle = stored(api)['ca.crt'];
    manager.start(() => assert.fail('nothing to switch to'));
    api.requests.length = 0;

    for (let check = 0; check < 3; check++) {
      assert.equal(await timers.next(), 60_000);
      timers.fire();
    }
    assert.equal(await timers.next(), 60_000);
    assert.deepEqual(api.calls(), Array(3).fill(`GET ${CONFIGURATION_PATH}`), 'only GETs: no Secret read, no PATCH');

    api.requests.length = 0;
    wipe(api);
    timers.fire();
    assert.equal(await timers.next(), 60_000);
    // The drift triggers the full pass: the Secret is read first, so the bundle restored is the current one.
    assert.deepEqual(api.calls(), [`GET ${CONFIGURATION_PATH}`, `GET ${SECRET_PATH}`, `GET ${CONFIGURATION_PATH}`, `PATCH ${CONFIGURATION_PATH}`]);
    assert.deepEqual(api.caBundles(CONFIGURATION), [bundle]);
  });

  it('with real timers and a short interval, a wiped caBundle is back within moments', async (t) => {
    const api = await startApi(t);
    const manager = newManager(api, { caBundleCheckIntervalMs: 20 });
    t.after(() => manager.stop());
    await manager.obtain();
    const bundle = stored(api)['ca.crt'];
    manager.start(() => undefined);
    wipe(api);
    await waitFor(async () => (api.caBundles(CONFIGURATION)[0] === bundle ? true : undefined));
    assert.equal(only(api, 'PUT', SECRET_PATH).length + only(api, 'POST', SECRETS_PATH).length, 1, 'the Secret was only created, at start');
  });

  it('a caBundle renewed by another replica is not overwritten: the Secret is read, and its certificate served', async (t) => {
    const api = await startApi(t);
    let offsetMs = -300 * DAY_MS; // this replica's certificate was issued 300 days ago
    const timers = new ManualTimers();
    const manager = newManager(api, { timers, clock: () => new Date(Date.now() + offsetMs), caBundleCheckIntervalMs: 60_000 });
    t.after(() => manager.stop());
    await manager.obtain();
    let served: TlsMaterial | undefined;
    manager.start((material) => (served = material));

    offsetMs = 0;
    const renewed = await newManager(api).obtain(); // another replica renews it and writes the new bundle
    const bundle = stored(api)['ca.crt'];
    api.requests.length = 0;
    await timers.next();
    timers.fire();
    await timers.next();

    assert.deepEqual(api.calls(), [`GET ${CONFIGURATION_PATH}`, `GET ${SECRET_PATH}`, `GET ${CONFIGURATION_PATH}`], 'no PATCH: it was right');
    assert.deepEqual(api.caBundles(CONFIGURATION), [bundle]);
    assert.equal(served?.cert.toString(), renewed.cert.toString());
  });

  it('defaults: one check a minute, well under the hourly certificate check', () => {
    assert.equal(SELF_MANAGED_DEFAULTS.caBundleCheckIntervalMs, 60_000);
    assert.equal(SELF_MANAGED_DEFAULTS.checkIntervalMs, 3_600_000);
  });
});

describe('self-managed TLS: failures an operator must act on', () => {
  const forbidden: [string, string, RegExp][] = [
    ['POST', SECRETS_PATH, /lacks `create secrets` on envoy-shutdown-manager-self-signed in namespace envoy-shutdown-manager \(a Role there\); apply the RBAC of manifests\/self-signed/],
    ['PATCH', CONFIGURATION_PATH, /lacks `patch mutatingwebhookconfigurations` on shutdown-manager\.io \(a ClusterRole with resourceNames: \[shutdown-manager\.io\]\); apply the RBAC of manifests\/self-signed/],
  ];
  for (const [method, path, message] of forbidden) {
    it(`403 on ${method} names the missing permission and the RBAC to apply, without retrying`, async (t) => {
      const api = await startApi(t);
      api.fail({ method, path: new RegExp(`^${path}$`), status: 403, reason: 'Forbidden', message: 'forbidden by RBAC' });
      const error = await newManager(api).obtain().then(
        () => assert.fail('obtain() succeeded'),
        (thrown: unknown) => thrown,
      );
      assert.ok(error instanceof SelfManagedTlsError, 'a SelfManagedTlsError');
      assert.match(error.message, message);
      assert.match(error.message, /API server: forbidden by RBAC/);
      assert.equal(error.retryable, false);
      assert.ok(error.cause instanceof KubeForbiddenError, "caused by the API server's 403");
      assert.equal(only(api, method, path).length, 1, 'a 403 is not retried');
    });
  }

  it('401 (no or wrong token) points at automountServiceAccountToken', async (t) => {
    const api = await startApi(t);
    await assert.rejects(newManager(api, { token: 'stale' }).obtain(), /401 Unauthorized.*automountServiceAccountToken: true/);
    assert.equal(api.requests.length, 1);
  });

  it('a missing MutatingWebhookConfiguration is named, with the flag to point at another', async (t) => {
    const api = await FakeKubeApi.start();
    t.after(() => api.close());
    await assert.rejects(newManager(api).obtain(), /mutatingwebhookconfigurations\/shutdown-manager\.io does not exist.*--webhook-configuration-name/);
  });

  it('API server answering 503: bounded retries with growing delays, then a clear error', async (t) => {
    const api = await startApi(t);
    api.fail({ status: 503, reason: 'ServiceUnavailable', message: 'etcd is busy' });
    const log = new MemoryLog();
    const manager = newManager(api, { logger: log.pino(), startupRetry: { attempts: 4, initialDelayMs: 30, maxDelayMs: 60 } });
    await assert.rejects(manager.obtain(), (error: unknown) => {
      assert.ok(error instanceof SelfManagedTlsError, 'a SelfManagedTlsError');
      assert.match(
        error.message,
        /gave up after 4 attempts in [\d.]+ s \(start-up budget 60\.0 s\); last error: .*answered 503 to get secrets\/envoy-shutdown-manager-self-signed.*etcd is busy/,
      );
      return true;
    });
    // The delays chosen: doubling, capped at maxDelayMs (jitter pinned to none).
    assert.deepEqual(log.lines.filter((line) => line.fields['retryInMs'] !== undefined).map((line) => line.fields['retryInMs']), [30, 60, 60]);
    // ...and actually waited: lower bounds only, which a busy machine cannot break.
    const times = api.requests.map((request) => request.at);
    assert.equal(times.length, 4);
    const gaps = times.slice(1).map((at, index) => at - (times[index] as number));
    assert.ok((gaps[0] as number) >= 28 && (gaps[1] as number) >= 58 && (gaps[2] as number) >= 58, `gaps ${gaps.join(', ')}`);
  });

  it('API server down (connection refused): retried, then a clear error naming the server', async (t) => {
    const api = await startApi(t);
    const closed = createServer();
    closed.listen(0, '127.0.0.1');
    await once(closed, 'listening');
    const { port } = closed.address() as { port: number };
    await new Promise((resolve) => closed.close(resolve));
    const server = `https://127.0.0.1:${port}`;
    await assert.rejects(
      newManager(api, { server }).obtain(),
      new RegExp(`gave up after 3 attempts .* cannot reach ${server.replaceAll('.', '\\.')} to get secrets/${SECRET}`),
    );
  });

  it('API server not answering: each request times out, then a clear error', async (t) => {
    const api = await startApi(t);
    api.fail({ status: 'stall' });
    await assert.rejects(
      newManager(api, { startupRequestTimeoutMs: 150, startupRetry: { attempts: 2, initialDelayMs: 10, maxDelayMs: 10 } }).obtain(),
      /gave up after 2 attempts .* no answer from https:\/\/127\.0\.0\.1:\d+ within 150 ms to get secrets\/envoy-shutdown-manager-self-signed in namespace envoy-shutdown-manager/,
    );
    assert.equal(api.requests.length, 2);
  });
});

describe('self-managed TLS: start-up budget', () => {
  it('a request never waits past the budget: its timeout is cut to what is left', async (t) => {
    const api = await startApi(t);
    api.fail({ status: 'stall' });
    const manager = newManager(api, { startupBudgetMs: 400, startupRequestTimeoutMs: 60_000, requestTimeoutMs: 60_000 });
    const error = await manager.obtain().then(
      () => assert.fail('obtain() succeeded'),
      (thrown: unknown) => thrown,
    );
    assert.ok(error instanceof SelfManagedTlsError && error.retryable, 'a retryable SelfManagedTlsError');
    const match = /gave up after 1 attempt in [\d.]+ s \(start-up budget 0\.4 s\); last error: no answer from \S+ within (\d+) ms/.exec(error.message);
    assert.ok(match, error.message);
    assert.ok(Number(match[1]) <= 400, `the 60 s request timeout was cut to the budget: ${match[1]} ms`);
  });

  it('retries against an API server that never answers end with the clear error within the budget', async (t) => {
    const api = await startApi(t);
    api.fail({ status: 'stall' });
    const budgetMs = 1_000;
    const manager = newManager(api, {
      startupBudgetMs: budgetMs,
      startupRequestTimeoutMs: 200,
      startupRetry: { attempts: 100, initialDelayMs: 20, maxDelayMs: 40 },
    });
    const started = performance.now();
    await assert.rejects(manager.obtain(), /gave up after \d+ attempts in [\d.]+ s \(start-up budget 1\.0 s\); last error: no answer from/);
    const elapsed = performance.now() - started;
    assert.ok(api.requests.length >= 2, 'it did retry');
    // Timers can only fire late: the slack is for a busy machine, the budget itself is never stretched.
    assert.ok(elapsed < budgetMs + 1_000, `gave up after ${Math.round(elapsed)} ms`);
  });

  it('defaults: start-up ends within 60 s, requests included, with several attempts', () => {
    const { startupBudgetMs, startupRequestTimeoutMs, startupRetry } = SELF_MANAGED_DEFAULTS;
    assert.ok(startupBudgetMs <= 60_000, `start-up's budget is at most 60 s: ${startupBudgetMs} ms`);
    assert.ok(startupRequestTimeoutMs * 3 < startupBudgetMs, 'room for at least three stalled attempts');
    assert.ok(startupRetry.attempts >= 3, `several attempts at start-up: ${startupRetry.attempts}`);
  });
});

function secretData(bundle: { certPem: string; keyPem: string; caCertPem: string }): Record<string, string> {
  return { 'tls.crt': bundle.certPem, 'tls.key': bundle.keyPem, 'ca.crt': bundle.caCertPem };
}

/** The certificate a brand-new TLS connection is served; verified against `ca` when given. */
function handshake(port: number, verify?: { ca: string; servername: string }): Promise<PeerCertificate> {
  return new Promise((resolve, reject) => {
    const options = verify === undefined ? { rejectUnauthorized: false } : { ...verify, rejectUnauthorized: true };
    const socket = connect({ host: '127.0.0.1', port, ...options }, () => {
      const certificate = socket.getPeerCertificate();
      socket.end();
      resolve(certificate);
    });
    socket.setTimeout(2_000, () => socket.destroy(new Error('TLS handshake timed out')));
    socket.on('error', reject);
  });
}

async function waitFor<T>(probe: () => Promise<T | undefined>, limitMs = 3_000): Promise<T> {
  const deadline = performance.now() + limitMs;
  while (performance.now() < deadline) {
    const value = await probe();
    if (value !== undefined) return value;
    await sleep(10);
  }
  assert.fail(`condition not met within ${limitMs} ms`);
}
