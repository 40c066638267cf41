/**
 * The admin address as the pod says it (a named container port, an inline --config-yaml, a `contour bootstrap`
 * init container), how it combines with annotations and defaults, and what a Unix socket needs from the pod.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { V1Container, V1Pod } from '@kubernetes/client-node';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { configYamlOf, discoverAdmin, MAX_CONFIG_YAML_BYTES } from '../../src/inject/admin-discovery.js';
import { envoyRunAs, resolveAdminEndpoint, socketMount } from '../../src/inject/admin-endpoint.js';
import { injectPod } from '../../src/inject/injector.js';

const config = parseWebhookConfig([], {}).injection;

const BOOTSTRAP_V6 = 'admin:\n  address:\n    socket_address:\n      address: "::1"\n      port_value: 19000\nnode:\n  id: x\n';

function envoy(extra: Partial<V1Container> = {}): V1Container {
  return { name: 'envoy', image: 'envoyproxy/envoy:v1.35.3', command: ['envoy'], ...extra };
}

function podOf(container: V1Container, spec: Partial<V1Pod['spec']> = {}, annotations: Record<string, string> = {}): V1Pod {
  return { metadata: { name: 'p', labels: { app: 'envoy' }, annotations }, spec: { containers: [container], ...spec } };
}

const CONTOUR_INIT: V1Container = {
  name: 'envoy-initconfig',
  image: 'ghcr.io/projectcontour/contour:v1.33.0',
  command: ['contour'],
  args: ['bootstrap', '/config/envoy.json', '--xds-address=contour'],
};

describe('configYamlOf: every spelling Envoy accepts', () => {
  test('two items, =, and one item split at the first space; the last wins', () => {
    assert.equal(configYamlOf(['envoy', '--config-yaml', 'a: 1']), 'a: 1');
    assert.equal(configYamlOf(['--config-yaml=a: 1 b']), 'a: 1 b');
    assert.equal(configYamlOf(['--config-yaml admin:\n  x: 1']), 'admin:\n  x: 1');
    assert.equal(configYamlOf(['--config-yaml', 'a', '--config-yaml=b']), 'b');
    assert.equal(configYamlOf(['-c', '/etc/envoy.yaml', '--config-yaml-other']), undefined);
  });
});

describe('discoverAdmin', () => {
  test('a container port named admin or envoy-admin (Authorino: 8001)', () => {
    for (const name of ['admin', 'envoy-admin']) {
      const { findings } = discoverAdmin(podOf(envoy()), envoy({ ports: [{ name: 'http', containerPort: 8080 }, { name, containerPort: 8001 }] }));
      assert.deepEqual(findings, [{ kind: 'tcp', host: undefined, port: 8001, from: `container port "${name}"` }]);
    }
  });

  test('an inline --config-yaml, in each spelling, with a socket_address', () => {
    for (const args of [['--config-yaml', BOOTSTRAP_V6], [`--config-yaml=${BOOTSTRAP_V6}`], [`--config-yaml ${BOOTSTRAP_V6}`]]) {
      const container = envoy({ args });
      assert.deepEqual(discoverAdmin(podOf(container), container).findings, [{ kind: 'tcp', host: '::1', port: 19000, from: 'inline --config-yaml' }]);
    }
  });

  test('a wildcard bind names no host; a pipe is a socket; JSON is YAML too', () => {
    const wildcard = envoy({ args: ['--config-yaml', '{"admin":{"address":{"socket_address":{"address":"0.0.0.0","port_value":"9901"}}}}'] });
    assert.deepEqual(discoverAdmin(podOf(wildcard), wildcard).findings, [{ kind: 'tcp', host: undefined, port: 9901, from: 'inline --config-yaml' }]);
    const pipe = envoy({ args: ['--config-yaml', 'admin: {address: {pipe: {path: /var/run/envoy/admin.sock}}}'] });
    assert.deepEqual(discoverAdmin(podOf(pipe), pipe).findings, [{ kind: 'socket', address: 'unix:/var/run/envoy/admin.sock', from: 'inline --config-yaml' }]);
  });

  test('bad YAML, an oversized bootstrap, or an unusable address are warnings, never a throw', () => {
    const cases: Array<[string, RegExp]> = [
      ['admin: [unclosed', /is not valid YAML/],
      [`admin: {}\n#${'x'.repeat(MAX_CONFIG_YAML_BYTES)}`, /over 1 MiB/],
      ['admin: {address: {socket_address: {address: "http://x", port_value: 1}}}', /is not a host/],
      ['admin: {address: {socket_address: {address: "::1", port_value: 70000}}}', /is not a port/],
      ['admin: {address: {pipe: {path: relative.sock}}}', /admin pipe path "relative.sock" is not absolute/],
      // Exponential expansion: refused by the parser's alias bound, and said like any bad YAML.
      [`a: &a [1, 2]\nb: &b [${Array(10).fill('*a').join(',')}]\nc: &c [${Array(10).fill('*b').join(',')}]\nd: [${Array(10).fill('*c').join(',')}]`, /not valid YAML, admin address not read: Excessive alias count/],
    ];
    for (const [yaml, warning] of cases) {
      const container = envoy({ args: ['--config-yaml', yaml] });
      const result = discoverAdmin(podOf(container), container);
      assert.deepEqual(result.findings, [], yaml.slice(0, 60));
      assert.equal(result.warnings.length, 1);
      assert.match(result.warnings[0] ?? '', warning);
    }
    const silent = envoy({ args: ['--config-yaml', 'static_resources: {}'] });
    assert.deepEqual(discoverAdmin(podOf(silent), silent), { findings: [], warnings: [] }, 'no admin block: nothing to say');
  });

  test("contour bootstrap: Contour's default /admin/admin.sock, or its --admin-address in either spelling", () => {
    const container = envoy();
    const found = (init: V1Container) => discoverAdmin(podOf(container, { initContainers: [init] }), container).findings;
    assert.deepEqual(found(CONTOUR_INIT), [{ kind: 'socket', address: 'unix:/admin/admin.sock', from: 'contour bootstrap' }]);
    assert.deepEqual(found({ ...CONTOUR_INIT, args: [...(CONTOUR_INIT.args ?? []), '--admin-address=/run/a.sock'] })[0], {
      kind: 'socket',
      address: 'unix:/run/a.sock',
      from: 'contour bootstrap',
    });
    assert.equal(found({ ...CONTOUR_INIT, args: [...(CONTOUR_INIT.args ?? []), '--admin-address', '/run/b.sock'] })[0]?.kind, 'socket');
    assert.deepEqual(found({ name: 'other', image: 'busybox', command: ['sh', '-c', 'echo bootstrap'] }), [], 'not contour');
  });

  test('findings come in order of trust: the container port first', () => {
    const container = envoy({ ports: [{ name: 'admin', containerPort: 8001 }], args: ['--config-yaml', BOOTSTRAP_V6] });
    assert.deepEqual(discoverAdmin(podOf(container, { initContainers: [CONTOUR_INIT] }), container).findings.map((f) => f.from), [
      'container port "admin"',
      'inline --config-yaml',
      'contour bootstrap',
    ]);
  });
});

describe('resolveAdminEndpoint', () => {
  const none = { address: false, port: false };
  const base = { planAddress: '127.0.0.1', planPort: 9001, envoyName: 'envoy' };
  const port8001 = { kind: 'tcp', host: undefined, port: 8001, from: 'container port "admin"' } as const;

  test('nothing found: the defaults, from "default", silently', () => {
    assert.deepEqual(resolveAdminEndpoint({ ...base, annotated: none, discovery: { findings: [], warnings: [] } }), {
      address: '127.0.0.1',
      port: 9001,
      from: 'default',
      discovered: false,
      warnings: [],
    });
  });

  test('a found port replaces the default, and says so', () => {
    const endpoint = resolveAdminEndpoint({ ...base, annotated: none, discovery: { findings: [port8001], warnings: [] } });
    assert.equal(endpoint.port, 8001);
    assert.equal(endpoint.from, 'container port "admin"');
    assert.deepEqual(endpoint.warnings, [
      'Envoy admin found at 127.0.0.1:8001 (container port "admin"); the sidecar drains it there',
    ]);
  });

  test('found where the default already is: recorded, not warned', () => {
    const endpoint = resolveAdminEndpoint({ ...base, annotated: none, discovery: { findings: [{ ...port8001, port: 9001 }], warnings: [] } });
    assert.equal(endpoint.from, 'container port "admin"');
    assert.deepEqual(endpoint.warnings, []);
  });

  test('an annotated port wins over a found one, and the contradiction names both', () => {
    const endpoint = resolveAdminEndpoint({ ...base, annotated: { address: false, port: true }, discovery: { findings: [port8001], warnings: [] } });
    assert.equal(endpoint.port, 9001);
    assert.equal(endpoint.from, 'annotation shutdown-manager.io/envoy-admin-port');
    assert.deepEqual(endpoint.warnings, [
      'admin 127.0.0.1:9001 (annotation) but container port "admin" says port 8001',
    ]);
  });

  test('an annotated port keeps a host found in --config-yaml', () => {
    const finding = { kind: 'tcp', host: '::1', port: 19000, from: 'inline --config-yaml' } as const;
    const endpoint = resolveAdminEndpoint({ ...base, planPort: 19000, annotated: { address: false, port: true }, discovery: { findings: [finding], warnings: [] } });
    assert.deepEqual([endpoint.address, endpoint.port, endpoint.from], ['::1', 19000, 'annotation shutdown-manager.io/envoy-admin-port, address from inline --config-yaml']);
  });

  test('a found socket replaces a TCP default; an annotated host does not take it', () => {
    const socket = { kind: 'socket', address: 'unix:/admin/admin.sock', from: 'contour bootstrap' } as const;
    const found = resolveAdminEndpoint({ ...base, annotated: none, discovery: { findings: [socket], warnings: [] } });
    assert.deepEqual([found.address, found.from, found.discovered], ['unix:/admin/admin.sock', 'contour bootstrap', true]);
    const annotated = resolveAdminEndpoint({ ...base, annotated: { address: true, port: false }, discovery: { findings: [socket], warnings: [] } });
    assert.equal(annotated.address, '127.0.0.1');
    assert.match(annotated.warnings[0] ?? '', /^admin 127\.0\.0\.1:9001 \(annotation\) but contour bootstrap says unix:\/admin\/admin\.sock$/);
  });
});

describe('socketMount', () => {
  test('the most specific mount holding the socket directory, read-only, subPath kept', () => {
    const container = envoy({
      volumeMounts: [
        { name: 'root-ish', mountPath: '/var' },
        { name: 'run', mountPath: '/var/run/', subPath: 'envoy' },
        { name: 'other', mountPath: '/var/run/envoy/admin' },
      ],
    });
    assert.deepEqual(socketMount(container, '/var/run/envoy/admin.sock'), {
      found: true,
      mount: { name: 'run', mountPath: '/var/run/', subPath: 'envoy', readOnly: true },
    });
  });

  test('no mount, a sibling directory, or a subPathExpr: not found, with the reason', () => {
    const sibling = socketMount(envoy({ volumeMounts: [{ name: 'a', mountPath: '/adminx' }] }), '/admin/admin.sock');
    assert.deepEqual(sibling, { found: false, reason: 'container "envoy" mounts no volume at /admin or a parent directory (its mounts: /adminx)' });
    const expr = socketMount(envoy({ volumeMounts: [{ name: 'a', mountPath: '/admin', subPathExpr: '$(POD)' }] }), '/admin/admin.sock');
    assert.equal(expr.found, false);
  });
});

describe('envoyRunAs', () => {
  test("the container's user over the pod's, each group with it", () => {
    assert.deepEqual(envoyRunAs(envoy(), { runAsUser: 65534, runAsGroup: 65534 }), { user: 65534, group: 65534 });
    assert.deepEqual(envoyRunAs(envoy({ securityContext: { runAsUser: 101 } }), { runAsUser: 65534, runAsGroup: 7 }), { user: 101, group: 7 });
    assert.equal(envoyRunAs(envoy(), undefined), undefined);
  });
});

describe('injectPod: the admin address found in the pod', () => {
  function inject(pod: V1Pod) {
    const outcome = injectPod(pod, config, 'token');
    return outcome;
  }
  function sidecarOf(pod: V1Pod): V1Container {
    const found = pod.spec?.containers.find((c) => c.name === 'shutdown-manager');
    assert.ok(found, 'the pod has the sidecar');
    return found;
  }
  function statusOf(pod: V1Pod): Record<string, unknown> {
    return JSON.parse(pod.metadata?.annotations?.['shutdown-manager.io/status'] ?? '{}') as Record<string, unknown>;
  }

  test('Contour-shaped pod: the socket, its volume and Envoy\'s user', () => {
    const container = envoy({ volumeMounts: [{ name: 'envoy-admin', mountPath: '/admin' }] });
    const outcome = inject(podOf(container, { initContainers: [CONTOUR_INIT], securityContext: { runAsUser: 65534, runAsGroup: 65534 } }));
    assert.equal(outcome.action, 'inject');
    if (outcome.action !== 'inject') return;
    const sidecar = sidecarOf(outcome.pod);
    assert.ok(sidecar.args?.includes('--admin-address=unix:/admin/admin.sock'), 'the sidecar drains over the socket');
    assert.ok(!sidecar.args?.some((arg) => arg.startsWith('--admin-port')), 'no --admin-port next to the socket');
    assert.deepEqual(sidecar.volumeMounts?.[1], { name: 'envoy-admin', mountPath: '/admin', readOnly: true });
    assert.equal(sidecar.securityContext?.runAsUser, 65534);
    assert.equal(sidecar.securityContext?.runAsGroup, 65534);
    const status = statusOf(outcome.pod);
    assert.deepEqual(
      [status.adminAddress, status.adminPort, status.adminFrom, status.adminVolume, status.sidecarUser],
      ['unix:/admin/admin.sock', undefined, 'contour bootstrap', 'envoy-admin', 65534],
    );
  });

  test('a socket without a user: the sidecar keeps 65532, and a warning says what to set', () => {
    const container = envoy({ volumeMounts: [{ name: 'envoy-admin', mountPath: '/admin' }] });
    const outcome = inject(podOf(container, { initContainers: [CONTOUR_INIT] }));
    assert.equal(outcome.action, 'inject');
    if (outcome.action !== 'inject') return;
    assert.equal(sidecarOf(outcome.pod).securityContext?.runAsUser, 65532);
    assert.ok(outcome.warnings.some((w) => w === 'sidecar runs as 65532: unix:/admin/admin.sock must let it connect, or set runAsUser on "envoy"'), outcome.warnings.join('\n'));
  });

  test('a root Envoy: the sidecar is never made root', () => {
    const container = envoy({ volumeMounts: [{ name: 'envoy-admin', mountPath: '/admin' }], securityContext: { runAsUser: 0 } });
    const outcome = inject(podOf(container, { initContainers: [CONTOUR_INIT] }));
    assert.equal(outcome.action, 'inject');
    if (outcome.action !== 'inject') return;
    assert.equal(sidecarOf(outcome.pod).securityContext?.runAsUser, 65532);
    assert.ok(outcome.warnings.some((w) => w.includes('runs as root')), 'a warning that Envoy runs as root');
  });

  test('an annotated socket without a volume is denied; a discovered one is a warning', () => {
    const denied = inject(podOf(envoy(), {}, { 'shutdown-manager.io/envoy-admin-address': 'unix:/admin/admin.sock' }));
    assert.equal(denied.action, 'deny');
    if (denied.action === 'deny') {
      assert.equal(
        denied.message,
        'annotation shutdown-manager.io/envoy-admin-address: "unix:/admin/admin.sock" is not valid; expected a Unix socket in a volume the Envoy container mounts, so that the sidecar can mount it too; but container "envoy" mounts no volume at /admin or a parent directory (its mounts: none): mount the socket\'s volume in the Envoy container, or set annotation shutdown-manager.io/envoy-admin-address to the admin host',
      );
      assert.deepEqual(denied.settings, ['envoy-admin-address']);
    }
    const warned = inject(podOf(envoy(), { initContainers: [CONTOUR_INIT] }));
    assert.equal(warned.action, 'inject');
    if (warned.action === 'inject') {
      assert.ok(warned.warnings.some((w) => w === 'no volume holds admin socket unix:/admin/admin.sock: mount one at /admin in "envoy"'), warned.warnings.join('\n'));
    }
  });

  test('the webhook default as a socket without a volume is denied, naming the flag', () => {
    const socketConfig = parseWebhookConfig(['--admin-address=unix:/admin/admin.sock'], {}).injection;
    const outcome = injectPod(podOf(envoy()), socketConfig, 'token');
    assert.equal(outcome.action, 'deny');
    if (outcome.action === 'deny') assert.match(outcome.message, /^webhook flag --admin-address \(the default for every pod\): "unix:\/admin\/admin.sock" is not valid/);
  });

  test('hostNetwork: a warning naming the serve port; a hostPort on the serve port is denied', () => {
    const warned = inject(podOf(envoy(), { hostNetwork: true }));
    assert.equal(warned.action, 'inject');
    if (warned.action === 'inject') {
      assert.deepEqual(warned.warnings, [
        'hostNetwork: serve port 8090 must be unique on the node; set annotation shutdown-manager.io/serve-port',
      ]);
    }
    const denied = inject(podOf(envoy({ ports: [{ name: 'x', containerPort: 18090, hostPort: 8090 }] }), { hostNetwork: true }));
    assert.equal(denied.action, 'deny');
    if (denied.action === 'deny') assert.match(denied.message, /container "envoy" declares host port 8090 \(x\) on the node's network \(hostNetwork\)/);
  });

  test('a discovered admin port on the serve port is denied', () => {
    const container = envoy({ args: ['--config-yaml', 'admin: {address: {socket_address: {address: 127.0.0.1, port_value: 8090}}}'] });
    const outcome = inject(podOf(container));
    assert.equal(outcome.action, 'deny');
    if (outcome.action === 'deny') assert.match(outcome.message, /a port other than Envoy's admin port 8090 \(inline --config-yaml\)/);
  });

  test('a pod that says nothing records "default" and is not warned about', () => {
    const outcome = inject(podOf(envoy()));
    assert.equal(outcome.action, 'inject');
    if (outcome.action !== 'inject') return;
    assert.deepEqual(outcome.warnings, []);
    const status = statusOf(outcome.pod);
    assert.deepEqual([status.adminAddress, status.adminPort, status.adminFrom], ['127.0.0.1', 9001, 'default']);
  });
});
