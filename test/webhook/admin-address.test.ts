/**
 * The admin address each distribution's pod declares, found by the running webhook over HTTPS: Authorino's
 * named admin port, Envoy Gateway's inline --config-yaml (on IPv6 loopback), Contour's `contour bootstrap`
 * socket and its volume; and the warnings and denials of pods whose admin API or serve port cannot work.
 */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { admitReview, loadReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

const PREFIX = 'shutdown-manager: ';
const ENVOY_GATEWAY_SELECTOR = '--pod-selector=app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy';



function container(pod: Json, name: string): Json {
  return [...pod.spec.containers, ...(pod.spec.initContainers ?? [])].find((c: Json) => c.name === name);
}

function statusOf(pod: Json): Json {
  return JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']);
}

/** Authorino's Envoy Deployment (its docs' envoy-deploy.yaml): admin on 8001, declared as port "admin". */
async function authorinoReview(): Promise<Json> {
  const review = await loadReview('deployment-envoy-pod.json');
  const pod = review.request.object;
  pod.metadata.labels = { app: 'envoy' };
  pod.spec.containers = [
    {
      name: 'envoy',
      image: 'envoyproxy/envoy:v1.31-latest',
      command: ['/usr/local/bin/envoy'],
      args: ['--config-path /usr/local/etc/envoy/envoy.yaml', '--service-cluster front-proxy', '--log-level info'],
      ports: [
        { name: 'web', containerPort: 8000, protocol: 'TCP' },
        { name: 'admin', containerPort: 8001, protocol: 'TCP' },
      ],
      volumeMounts: [{ name: 'envoy-config', mountPath: '/usr/local/etc/envoy', readOnly: true }],
    },
  ];
  return review;
}

describe('Authorino (Envoy Deployment with containerPort 8001 named admin)', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  test('the sidecar drains admin port 8001, and a warning says where it was found', async () => {
    const { response, pod } = await admitReview(webhook, await authorinoReview());
    assert.equal(response.allowed, true);
    const args: string[] = container(pod, 'shutdown-manager').args;
    assert.ok(args.includes('--admin-port=8001'), args.join(' '));
    assert.ok(args.includes('--admin-address=127.0.0.1'), args.join(' '));
    assert.ok(
      response.warnings.includes(
        `${PREFIX}Envoy admin found at 127.0.0.1:8001 (container port "admin"); the sidecar drains it there`,
      ),
      response.warnings.join('\n'),
    );
    assert.equal(statusOf(pod).adminFrom, 'container port "admin"');
    assert.equal(statusOf(pod).adminPort, 8001);
    assert.equal(container(pod, 'shutdown-manager').securityContext.runAsUser, 65532, 'a TCP admin keeps the image user');
  });

  test('a serve port equal to the default admin port is fine when the pod says Envoy is elsewhere; denied when it does not', async () => {
    const elsewhere = await authorinoReview();
    elsewhere.request.object.metadata.annotations = { 'shutdown-manager.io/serve-port': '9001' };
    const injected = await admitReview(webhook, elsewhere);
    assert.equal(injected.response.allowed, true, JSON.stringify(injected.response.status));
    const args: string[] = container(injected.pod, 'shutdown-manager').args;
    assert.ok(args.includes('--serve-port=9001') && args.includes('--admin-port=8001'), args.join(' '));

    const silent = await authorinoReview();
    silent.request.object.spec.containers[0].ports = [{ name: 'web', containerPort: 8000, protocol: 'TCP' }];
    silent.request.object.metadata.annotations = { 'shutdown-manager.io/serve-port': '9001' };
    const denied = await admitReview(webhook, silent);
    assert.equal(denied.response.allowed, false);
    assert.match(denied.response.status.message, /serve-port.*"9001" is not valid; expected a port other than Envoy's admin port 9001 \(default\)/);
  });

  test('an annotation that says 9001 wins, with a warning naming both', async () => {
    const review = await authorinoReview();
    review.request.object.metadata.annotations = { 'shutdown-manager.io/envoy-admin-port': '9001' };
    const { response, pod } = await admitReview(webhook, review);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--admin-port=9001'), "the annotation's port wins");
    assert.ok(
      response.warnings.includes(
        `${PREFIX}admin 127.0.0.1:9001 (annotation) but container port "admin" says port 8001`,
      ),
      response.warnings.join('\n'),
    );
    assert.equal(statusOf(pod).adminFrom, 'annotation shutdown-manager.io/envoy-admin-port');
  });
});

describe('Envoy Gateway (admin in the inline --config-yaml)', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook([ENVOY_GATEWAY_SELECTOR]);
  });
  after(() => webhook.close());

  async function proxyReview(adminHost: string): Promise<Json> {
    const review = await loadReview('envoy-gateway-proxy-pod.json');
    const pod = review.request.object;
    pod.spec.containers = pod.spec.containers.filter((c: Json) => c.name !== 'shutdown-manager');
    const envoy = container(pod, 'envoy');
    const at = envoy.args.findIndex((arg: string) => arg.startsWith('--config-yaml '));
    const rendered: string = envoy.args[at];
    assert.ok(rendered.includes('      address: 127.0.0.1\n      port_value: 19000'), 'the fixture is as Envoy Gateway renders it');
    envoy.args[at] = rendered.replace('      address: 127.0.0.1\n', `      address: ${adminHost}\n`);
    return review;
  }

  test('on an IPv6 cluster (admin on ::1, envoyproxy/gateway#9853): --admin-address=::1 --admin-port=19000', async () => {
    const { response, pod } = await admitReview(webhook, await proxyReview('::1'));
    assert.equal(response.allowed, true);
    const args: string[] = container(pod, 'shutdown-manager').args;
    assert.ok(args.includes('--admin-address=::1') && args.includes('--admin-port=19000'), args.join(' '));
    assert.ok(
      response.warnings.includes(
        `${PREFIX}Envoy admin found at [::1]:19000 (inline --config-yaml); the sidecar drains it there`,
      ),
      response.warnings.join('\n'),
    );
    assert.deepEqual([statusOf(pod).adminAddress, statusOf(pod).adminPort, statusOf(pod).adminFrom], ['::1', 19000, 'inline --config-yaml']);
  });

  test('as rendered on IPv4: 127.0.0.1:19000 without any flag or annotation', async () => {
    const { pod } = await admitReview(webhook, await proxyReview('127.0.0.1'));
    const args: string[] = container(pod, 'shutdown-manager').args;
    assert.ok(args.includes('--admin-address=127.0.0.1') && args.includes('--admin-port=19000'), args.join(' '));
  });
});

describe("Contour (examples/contour/03-envoy.yaml's DaemonSet pod, its own shutdown-manager removed)", () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  async function contourReview(): Promise<Json> {
    const review = await loadReview('contour-envoy-daemonset-pod.json');
    const pod = review.request.object;
    pod.spec.containers = pod.spec.containers.filter((c: Json) => c.name !== 'shutdown-manager');
    assert.deepEqual(pod.spec.securityContext, { runAsNonRoot: true, runAsUser: 65534, runAsGroup: 65534 }, "as Contour's example sets it");
    return review;
  }

  function withoutAdminVolume(review: Json): Json {
    const pod = review.request.object;
    pod.spec.volumes = pod.spec.volumes.filter((v: Json) => v.name !== 'envoy-admin');
    const envoy = container(pod, 'envoy');
    envoy.volumeMounts = envoy.volumeMounts.filter((m: Json) => m.name !== 'envoy-admin');
    return review;
  }

  test("the sidecar reaches the socket: --admin-address=unix:/admin/admin.sock, volume envoy-admin at /admin, Envoy's user 65534", async () => {
    const { response, pod } = await admitReview(webhook, await contourReview());
    assert.equal(response.allowed, true, JSON.stringify(response.status));
    const sidecar = container(pod, 'shutdown-manager');
    assert.ok(sidecar.args.includes('--admin-address=unix:/admin/admin.sock'), sidecar.args.join(' '));
    assert.ok(!sidecar.args.some((arg: string) => arg.startsWith('--admin-port')), 'no --admin-port next to the socket');
    assert.deepEqual(sidecar.volumeMounts, [
      { name: 'shutdown-manager-state', mountPath: '/var/run/shutdown-manager' },
      { name: 'envoy-admin', mountPath: '/admin', readOnly: true },
    ]);
    assert.equal(sidecar.securityContext.runAsUser, 65534);
    assert.equal(sidecar.securityContext.runAsGroup, 65534);
    assert.equal(sidecar.securityContext.runAsNonRoot, true);
    assert.deepEqual(response.warnings, [
      `${PREFIX}Envoy admin found at unix:/admin/admin.sock (contour bootstrap); the sidecar drains it there`,
      `${PREFIX}replaced the existing preStop hook of container "envoy" with the shutdown-manager's`,
    ]);
    const status = statusOf(pod);
    assert.deepEqual(
      [status.adminAddress, status.adminPort, status.adminFrom, status.adminVolume, status.sidecarUser],
      ['unix:/admin/admin.sock', undefined, 'contour bootstrap', 'envoy-admin', 65534],
    );
  });

  test('negative control: without the envoy-admin volume, admitted with a warning saying what to mount', async () => {
    const { response, pod } = await admitReview(webhook, withoutAdminVolume(await contourReview()));
    assert.equal(response.allowed, true);
    const sidecar = container(pod, 'shutdown-manager');
    assert.deepEqual(sidecar.volumeMounts, [{ name: 'shutdown-manager-state', mountPath: '/var/run/shutdown-manager' }]);
    assert.ok(
      response.warnings.includes(
        `${PREFIX}no volume holds admin socket unix:/admin/admin.sock: mount one at /admin in "envoy"`,
      ),
      response.warnings.join('\n'),
    );
  });

  test('negative control: the socket set by annotation without the volume is denied', async () => {
    const review = withoutAdminVolume(await contourReview());
    review.request.object.metadata.annotations = { 'shutdown-manager.io/envoy-admin-address': 'unix:/admin/admin.sock' };
    const { response } = await admitReview(webhook, review);
    assert.equal(response.allowed, false);
    assert.equal(
      response.status.message,
      'envoy-shutdown-manager: annotation shutdown-manager.io/envoy-admin-address: "unix:/admin/admin.sock" is not valid; expected a Unix socket in a volume the Envoy container mounts, so that the sidecar can mount it too; but container "envoy" mounts no volume at /admin or a parent directory (its mounts: /config, /certs): mount the socket\'s volume in the Envoy container, or set annotation shutdown-manager.io/envoy-admin-address to the admin host',
    );
  });
});

describe('hostNetwork pods', () => {
  let webhook: RunningWebhook;
  before(async () => {
    webhook = await startTestWebhook();
  });
  after(() => webhook.close());

  const HOST_NETWORK_WARNING = `${PREFIX}hostNetwork: serve port 8090 must be unique on the node; set annotation shutdown-manager.io/serve-port`;

  async function hostNetworkReview(): Promise<Json> {
    const review = await loadReview('deployment-envoy-pod.json');
    review.request.object.spec.hostNetwork = true;
    return review;
  }

  test('are injected with a warning naming the serve port and the annotation', async () => {
    const { response, pod } = await admitReview(webhook, await hostNetworkReview());
    assert.equal(response.allowed, true);
    assert.ok(container(pod, 'shutdown-manager'), 'the pod has the sidecar');
    assert.ok(response.warnings.includes(HOST_NETWORK_WARNING), response.warnings.join('\n'));
  });

  test('a serve port another container binds on the node is denied', async () => {
    const review = await hostNetworkReview();
    review.request.object.spec.containers.push({ name: 'node-agent', image: 'example.com/agent:1', ports: [{ name: 'agent', containerPort: 8090, hostPort: 8090 }] });
    const { response } = await admitReview(webhook, review);
    assert.equal(response.allowed, false);
    assert.equal(
      response.status.message,
      'envoy-shutdown-manager: serve-port (annotation shutdown-manager.io/serve-port or the webhook default): "8090" is not valid; expected a port that no container uses; container "node-agent" declares port 8090 (agent) on the node\'s network (hostNetwork)',
    );
  });

  test('a node-unique serve port by annotation is taken', async () => {
    const review = await hostNetworkReview();
    review.request.object.metadata.annotations = { 'shutdown-manager.io/serve-port': '18090' };
    const { response, pod } = await admitReview(webhook, review);
    assert.equal(response.allowed, true);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--serve-port=18090'), "the annotation's serve port is taken");
    assert.ok(response.warnings.some((w: string) => w.includes('serve port 18090 must be unique on the node')), 'a warning that the serve port must be unique on the node');
  });
});
