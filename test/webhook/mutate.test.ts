/** POST /mutate over real TLS with fixture AdmissionReviews; each returned patch is applied and the result checked. */
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import jsonPatch from 'fast-json-patch';
import { admitReview, loadReview, postReview, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

type Json = any; // fixtures are free-form JSON that the tests navigate

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook();
});
after(() => webhook.close());

async function review(body: Json): Promise<Json> {
  const result = await postReview(webhook, body);
  assert.equal(result.status, 200, result.text);
  return result.json();
}

function applyResponse(pod: Json, response: Json): Json {
  assert.equal(response.patchType, 'JSONPatch');
  const operations = JSON.parse(Buffer.from(response.patch, 'base64').toString('utf8'));
  return jsonPatch.applyPatch(structuredClone(pod), operations, true, false).newDocument;
}

function container(pod: Json, name: string): Json {
  return pod.spec.containers.find((c: Json) => c.name === name);
}

/** The token the sidecar is given by environment; the hooks must present exactly this one. */
function shutdownToken(pod: Json): string {
  const env = container(pod, 'shutdown-manager').env;
  assert.deepEqual(env.map((e: Json) => e.name), ['NODE_OPTIONS', 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN']);
  return env[1].value;
}

function hook(path: '/shutdown' | '/wait', token: string, port = 8090): Json {
  return {
    httpGet: { path, port, scheme: 'HTTP', httpHeaders: [{ name: 'Authorization', value: `Bearer ${token}` }] },
  };
}

/** Envoy's hook: the only one that starts a drain. */
function shutdownHook(token: string, port = 8090): Json {
  return hook('/shutdown', token, port);
}

/** The sidecar's own hook: joins a drain, never starts one (a restart after a failed liveness probe runs it too). */
function waitHook(token: string, port = 8090): Json {
  return hook('/wait', token, port);
}

const STATE_VOLUME = { name: 'shutdown-manager-state', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } };

/**
 * The sidecar's readiness: /ready answers 503 until Envoy's admin API has answered once, then 200 for good,
 * so a pod with a wrong admin port never becomes Ready and a rollout stops at its first pod.
 */
function readinessProbe(port = 8090): Json {
  return {
    httpGet: { path: '/ready', port, scheme: 'HTTP' },
    initialDelaySeconds: 1,
    // Ready about two seconds after Envoy's admin API answers.
    periodSeconds: 2,
    // As the liveness probe: a sidecar throttled at its CPU limit misses 1 s.
    timeoutSeconds: 5,
    // About 75 s of silence: the liveness probe restarts a wedged sidecar first.
    failureThreshold: 15,
  };
}
const READINESS_PROBE = readinessProbe();

const HOOK_WARNING = 'shutdown-manager: replaced the existing preStop hook of container "envoy" with the shutdown-manager\'s';
/**
 * contour-daemonset-pod.json runs `contour bootstrap` without --admin-address, so its Envoy serves admin on
 * Contour's default socket /admin/admin.sock; the fixture mounts no volume there, so the sidecar could not reach it.
 */
const CONTOUR_STYLE_ADMIN_WARNINGS = [
  'shutdown-manager: Envoy admin found at unix:/admin/admin.sock (contour bootstrap); the sidecar drains it there',
  'shutdown-manager: no volume holds admin socket unix:/admin/admin.sock: mount one at /admin in "envoy"',
];

describe('an Envoy pod created by a Deployment', () => {
  test('gets the sidecar, both preStop hooks, liveness and readiness probes, a state volume, Envoy drain flags and a longer grace period', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const answer = await review(body);
    assert.equal(answer.apiVersion, 'admission.k8s.io/v1');
    assert.equal(answer.kind, 'AdmissionReview');
    assert.equal(answer.response.uid, body.request.uid);
    assert.equal(answer.response.allowed, true);
    assert.equal(answer.response.warnings, undefined);

    const pod = applyResponse(body.request.object, answer.response);
    assert.deepEqual(pod.spec.containers.map((c: Json) => c.name), ['envoy', 'shutdown-manager']);
    const sidecar = container(pod, 'shutdown-manager');
    assert.deepEqual(sidecar.args, [
      'mode=sidecar',
      '--check-interval=5s',
      '--check-delay=1m',
      '--drain-delay=0s',
      '--min-open-connections=0',
      '--quiet-period=10s',
      '--serve-port=8090',
      '--admin-address=127.0.0.1',
      '--admin-port=9001',
      '--recover-envoy=true',
      '--drain-timeout=4m50s',
      '--state-dir=/var/run/shutdown-manager',
    ]);
    assert.equal(sidecar.image, webhook.config.injection.sidecarImage);
    assert.deepEqual(sidecar.ports, [{ name: 'shutdown-mgr', containerPort: 8090, protocol: 'TCP' }]);
    assert.deepEqual(sidecar.livenessProbe, {
      httpGet: { path: '/healthz', port: 8090, scheme: 'HTTP' },
      initialDelaySeconds: 3,
      periodSeconds: 10,
      // A throttled sidecar must starve for about a minute before it is restarted, not 30 s.
      timeoutSeconds: 5,
      failureThreshold: 6,
    });
    assert.deepEqual(sidecar.readinessProbe, READINESS_PROBE);
    const token = shutdownToken(pod);
    assert.match(token, /^[A-Za-z0-9_-]{32}$/, 'a 192-bit random token');
    assert.deepEqual(sidecar.lifecycle.preStop, waitHook(token), "the sidecar's own hook never starts a drain");
    assert.deepEqual(sidecar.volumeMounts, [{ name: 'shutdown-manager-state', mountPath: '/var/run/shutdown-manager' }]);
    assert.equal(sidecar.securityContext.runAsNonRoot, true);
    assert.equal(sidecar.securityContext.readOnlyRootFilesystem, true);
    assert.equal(sidecar.securityContext.allowPrivilegeEscalation, false);
    assert.deepEqual(sidecar.securityContext.capabilities, { drop: ['ALL'] });
    assert.ok(sidecar.resources.requests.memory && sidecar.resources.limits.memory, 'the sidecar has a memory request and limit');

    const envoy = container(pod, 'envoy');
    assert.deepEqual(envoy.lifecycle.preStop, shutdownHook(token));
    assert.deepEqual(envoy.ports, body.request.object.spec.containers[0].ports, 'Envoy keeps its ports');
    assert.deepEqual(envoy.args, ['-c', '/etc/envoy/envoy.yaml', '--log-level', 'info', '--drain-strategy', 'immediate', '--drain-time-s', '290']);
    assert.equal(envoy.command, undefined);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 300);

    const status = JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']);
    assert.deepEqual(status, {
      version: '0.1.0',
      sidecar: 'shutdown-manager',
      envoyContainer: 'envoy',
      servePort: 8090,
      native: false,
      // Found in the pod (its Envoy declares port 9001 as "admin"), the default's value: recorded, not warned.
      adminAddress: '127.0.0.1',
      adminPort: 9001,
      adminFrom: 'container port "admin"',
      // What injection replaced, for uninject: Envoy had no hook, its args before the drain flags, the API server's 30 s.
      replaced: { envoyPreStop: null, envoyArgs: ['-c', '/etc/envoy/envoy.yaml', '--log-level', 'info'], terminationGracePeriodSeconds: 30 },
    });
    // Untouched parts stay as they were.
    assert.deepEqual(pod.metadata.managedFields, body.request.object.metadata.managedFields);
    assert.deepEqual(pod.spec.volumes, [...body.request.object.spec.volumes, STATE_VOLUME], 'the pod keeps its volumes');
    assert.equal(pod.metadata.generateName, 'envoy-7c9d8f6b5d-');
    assert.equal(pod.metadata.name, undefined);
  });

  test("the patch adds the sidecar's readiness probe, on the serve port the pod asks for", async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const operations = JSON.parse(Buffer.from((await review(body)).response.patch, 'base64').toString('utf8'));
    const added = operations.filter((op: Json) => op.op === 'add' && op.value?.name === 'shutdown-manager');
    assert.equal(added.length, 1, JSON.stringify(operations.map((op: Json) => [op.op, op.path])));
    assert.deepEqual(added[0].value.readinessProbe, READINESS_PROBE);

    body.request.object.metadata.annotations = { 'shutdown-manager.io/serve-port': '9095' };
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.deepEqual(container(pod, 'shutdown-manager').readinessProbe, readinessProbe(9095));
    assert.deepEqual(container(pod, 'envoy').readinessProbe, body.request.object.spec.containers[0].readinessProbe, "Envoy's own probe is untouched");
  });

  test('the patch escapes the "/" of annotation keys and adds the missing annotations map', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const answer = await review(body);
    const operations = JSON.parse(Buffer.from(answer.response.patch, 'base64').toString('utf8'));
    const annotationOps = operations.filter((op: Json) => op.path.startsWith('/metadata/annotations'));
    assert.deepEqual(annotationOps.map((op: Json) => [op.op, op.path]), [['add', '/metadata/annotations']]);

    body.request.object.metadata.annotations = { 'example.com/owner': 'edge-team' };
    const withMap = await review(body);
    const ops = JSON.parse(Buffer.from(withMap.response.patch, 'base64').toString('utf8'));
    assert.ok(ops.some((op: Json) => op.op === 'add' && op.path === '/metadata/annotations/shutdown-manager.io~1status'), 'the status annotation is added with its "/" escaped');
    const pod = applyResponse(body.request.object, withMap.response);
    assert.equal(pod.metadata.annotations['example.com/owner'], 'edge-team');
  });

  test('is idempotent: a pod that was already injected yields no patch, and injecting twice equals once', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const once = applyResponse(body.request.object, (await review(body)).response);
    body.request.object = once;
    const again = await review(body);
    assert.equal(again.response.allowed, true);
    assert.equal(again.response.patch, undefined);
    assert.equal(again.response.patchType, undefined);
  });

  test('every pod gets its own shutdown token', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const first = shutdownToken(applyResponse(body.request.object, (await review(body)).response));
    const second = shutdownToken(applyResponse(body.request.object, (await review(body)).response));
    assert.notEqual(first, second);
  });

  test('answers v1beta1 in kind', async () => {
    const body = await loadReview('v1beta1-review.json');
    const answer = await review(body);
    assert.equal(answer.apiVersion, 'admission.k8s.io/v1beta1');
    assert.equal(answer.response.uid, body.request.uid);
    assert.equal(answer.response.patchType, 'JSONPatch');
  });
});

describe('pods of Jobs', () => {
  async function jobPod(annotations: Record<string, string>): Promise<Json> {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.spec.restartPolicy = 'Never';
    body.request.object.metadata.ownerReferences = [{ apiVersion: 'batch/v1', kind: 'Job', name: 'canary-29123', uid: 'u', controller: true }];
    body.request.object.metadata.annotations = annotations;
    return body;
  }

  test('are not given a regular sidecar, which would keep them from completing', async () => {
    const answer = await review(await jobPod({}));
    assert.equal(answer.response.allowed, true);
    assert.equal(answer.response.patch, undefined);
    assert.deepEqual(answer.response.warnings, [
      'shutdown-manager: not injected: a Job\'s pod needs annotation shutdown-manager.io/native-sidecar: "true"',
    ]);
  });

  test('get a native sidecar when asked', async () => {
    const body = await jobPod({ 'shutdown-manager.io/native-sidecar': 'true' });
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.equal(pod.spec.initContainers.at(-1).name, 'shutdown-manager');
    assert.equal(pod.spec.initContainers.at(-1).restartPolicy, 'Always');
  });
});

describe('native sidecars (Kubernetes 1.29+)', () => {
  test('the annotation injects an init container with restartPolicy Always, after the bootstrap init container', async () => {
    const body = await loadReview('contour-daemonset-pod.json');
    body.request.object.metadata.annotations['shutdown-manager.io/native-sidecar'] = 'true';
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.deepEqual(pod.spec.initContainers.map((c: Json) => c.name), ['envoy-initconfig', 'shutdown-manager']);
    assert.deepEqual(pod.spec.containers.map((c: Json) => c.name), ['envoy']);
    const sidecar = pod.spec.initContainers[1];
    assert.equal(sidecar.restartPolicy, 'Always');
    assert.equal(sidecar.lifecycle, undefined, 'stopped after Envoy, it has nothing to wait for');
    assert.ok(sidecar.args.includes('--state-dir=/var/run/shutdown-manager'), sidecar.args.join(' '));
    assert.deepEqual(sidecar.volumeMounts, [{ name: 'shutdown-manager-state', mountPath: '/var/run/shutdown-manager' }]);
    assert.deepEqual(pod.spec.volumes.at(-1), STATE_VOLUME);
    assert.equal(sidecar.livenessProbe.httpGet.path, '/healthz');
    // Allowed on a restartable init container, and counted toward the pod's Ready condition (1.29+).
    assert.deepEqual(sidecar.readinessProbe, READINESS_PROBE);
    assert.equal(container(pod, 'envoy').lifecycle.preStop.httpGet.path, '/shutdown');
    assert.equal(JSON.parse(pod.metadata.annotations['shutdown-manager.io/status']).native, true);

    body.request.object = pod;
    assert.equal((await review(body)).response.patch, undefined, 're-injection is a no-op for native sidecars too');
  });

  test('a bad value is denied', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = { 'shutdown-manager.io/native-sidecar': 'on' };
    const answer = await review(body);
    assert.equal(answer.response.allowed, false);
    assert.match(answer.response.status.message, /annotation shutdown-manager.io\/native-sidecar: "on" is not valid; expected "true" or "false"/);
  });
});

describe('a Contour-style DaemonSet pod', () => {
  test('keeps its init container and longer grace period, takes annotation overrides, warns about the replaced hook', async () => {
    const body = await loadReview('contour-daemonset-pod.json');
    const answer = await review(body);
    assert.equal(answer.response.allowed, true);
    assert.deepEqual(answer.response.warnings, [...CONTOUR_STYLE_ADMIN_WARNINGS, HOOK_WARNING]);
    const pod = applyResponse(body.request.object, answer.response);
    assert.deepEqual(pod.spec.initContainers, body.request.object.spec.initContainers);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 600);
    const args = container(pod, 'shutdown-manager').args;
    assert.ok(args.includes('--check-delay=10s'), args.join(' '));
    assert.ok(args.includes('--drain-timeout=9m50s'), args.join(' '));
    assert.deepEqual(container(pod, 'envoy').lifecycle, {
      preStop: shutdownHook(shutdownToken(pod)),
    });
    assert.equal(pod.metadata.annotations['prometheus.io/port'], '8002');
  });

  test('a grace period asked for by annotation is taken as asked, even below the pod\'s (defaulted) 30 s', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = {
      'shutdown-manager.io/termination-grace-period': '20',
      'shutdown-manager.io/check-delay': '5s',
    };
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 20);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--drain-timeout=18s'), "the annotation's grace period is the drain deadline");
  });

  test('a check delay that fits only in the pod\'s own longer grace period is accepted', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.spec.terminationGracePeriodSeconds = 900;
    body.request.object.metadata.annotations = { 'shutdown-manager.io/check-delay': '10m' };
    const answer = await review(body);
    assert.equal(answer.response.allowed, true, JSON.stringify(answer.response.status));
    const args = container(applyResponse(body.request.object, answer.response), 'shutdown-manager').args;
    assert.ok(args.includes('--check-delay=10m') && args.includes('--drain-timeout=14m50s'), args.join(' '));
  });

  test('a pod whose grace period is already longer than configured keeps it, and the deadline follows it', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.spec.terminationGracePeriodSeconds = 900;
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.equal(pod.spec.terminationGracePeriodSeconds, 900);
    assert.ok(container(pod, 'shutdown-manager').args.includes('--drain-timeout=14m50s'), 'the deadline follows the longer grace period');
  });
});

describe('pods that are admitted unchanged', () => {
  const cases: Array<[string, string | undefined]> = [
    ['non-envoy-pod.json', undefined],
    ['opted-out-pod.json', undefined],
    ['update-operation.json', undefined],
    [
      'ambiguous-envoy-pod.json',
      'shutdown-manager: not injected: 2 containers run an envoy image; set annotation shutdown-manager.io/envoy-container',
    ],
    [
      'contour-with-shutdown-manager.json',
      'shutdown-manager: pod already has a container named "shutdown-manager" (configured by hand); not injecting',
    ],
  ];
  for (const [fixture, warning] of cases) {
    test(fixture, async () => {
      const body = await loadReview(fixture);
      const answer = await review(body);
      assert.equal(answer.response.uid, body.request.uid);
      assert.equal(answer.response.allowed, true);
      assert.equal(answer.response.patch, undefined);
      assert.deepEqual(answer.response.warnings, warning === undefined ? undefined : [warning]);
    });
  }

  test('a pod with no container named envoy but one envoy image is injected around that container', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.spec.containers[0].name = 'proxy';
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.equal(container(pod, 'proxy').lifecycle.preStop.httpGet.path, '/shutdown');
  });

  test('the envoy-container annotation picks the container', async () => {
    const body = await loadReview('ambiguous-envoy-pod.json');
    body.request.object.metadata.annotations = { 'shutdown-manager.io/envoy-container': 'proxy-b' };
    const pod = applyResponse(body.request.object, (await review(body)).response);
    assert.equal(container(pod, 'proxy-b').lifecycle.preStop.httpGet.path, '/shutdown');
    assert.equal(container(pod, 'proxy-a').lifecycle, undefined);
  });
});

describe('bad annotations deny the pod with a message naming each one', () => {
  test('every bad value at once, with the accepted form', async () => {
    const body = await loadReview('bad-annotations.json');
    const answer = await review(body);
    assert.equal(answer.response.uid, body.request.uid);
    assert.equal(answer.response.allowed, false);
    assert.equal(answer.response.status.code, 400);
    const message: string = answer.response.status.message;
    const expected = [
      'annotation shutdown-manager.io/check-interval: "5 seconds" is not valid; expected a Go duration such as 500ms, 5s, 2m or 1m30s, greater than zero',
      'annotation shutdown-manager.io/check-delay: "-1s" is not valid; expected a Go duration such as 500ms, 5s, 2m or 1m30s',
      'annotation shutdown-manager.io/min-open-connections: "none" is not valid; expected a whole number of connections, 0 or more',
      'annotation shutdown-manager.io/termination-grace-period: "1.5" is not valid; expected whole seconds from 2 to 86400, such as 300, or a duration such as 5m',
      'annotation shutdown-manager.io/envoy-admin-port: "70000" is not valid; expected a port number from 1 to 65535',
      'annotation shutdown-manager.io/serve-port: "http" is not valid; expected a port number from 1 to 65535',
    ];
    assert.ok(message.startsWith('envoy-shutdown-manager: '), message);
    for (const part of expected) assert.ok(message.includes(part), `missing: ${part}\nin: ${message}`);
  });

  const single: Array<[Record<string, string>, string]> = [
    [
      { 'shutdown-manager.io/serve-port': '8080' },
      'serve-port (annotation shutdown-manager.io/serve-port or the webhook default): "8080" is not valid; expected a port that no container uses; container "envoy" declares port 8080 (http)',
    ],
    [
      { 'shutdown-manager.io/serve-port': '9001' },
      'serve-port (annotation shutdown-manager.io/serve-port or the webhook default): "9001" is not valid; expected a port other than Envoy\'s admin port 9001 (container port "admin")',
    ],
    [
      { 'shutdown-manager.io/termination-grace-period': '30' },
      'default check-delay: "1m" is not valid; expected a check delay shorter than the drain deadline of 27s',
    ],
    [
      { 'shutdown-manager.io/drain-delay': '4m' },
      'annotation shutdown-manager.io/drain-delay: "4m" is not valid; expected a drain delay that, added to the check delay of 1m, stays below the drain deadline of 4m50s',
    ],
    [
      { 'shutdown-manager.io/drain-delay': 'a while' },
      'annotation shutdown-manager.io/drain-delay: "a while" is not valid; expected a Go duration such as 500ms, 5s, 2m or 1m30s, at most 24h',
    ],
    [
      { 'shutdown-manager.io/recover-envoy': 'maybe' },
      'annotation shutdown-manager.io/recover-envoy: "maybe" is not valid; expected "true" or "false"',
    ],
    [
      { 'shutdown-manager.io/envoy-drain-flags': 'off' },
      'annotation shutdown-manager.io/envoy-drain-flags: "off" is not valid; expected "true" or "false"',
    ],
    [
      { 'shutdown-manager.io/inject': 'yes' },
      'annotation shutdown-manager.io/inject: "yes" is not valid; expected "enabled" or "disabled" (or "true" or "false", as on the namespace label)',
    ],
    [
      { 'shutdown-manager.io/envoy-container': 'sidecar' },
      'annotation shutdown-manager.io/envoy-container: "sidecar" is not valid; expected the name of one of the pod\'s containers: "envoy"',
    ],
  ];
  for (const [annotations, message] of single) {
    test(JSON.stringify(annotations), async () => {
      const body = await loadReview('deployment-envoy-pod.json');
      body.request.object.metadata.annotations = annotations;
      const answer = await review(body);
      assert.equal(answer.response.allowed, false);
      assert.equal(answer.response.status.code, 400);
      assert.ok(answer.response.status.message.includes(message), answer.response.status.message);
    });
  }

  test('bad switches and bad drain settings are named together in one denial', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = {
      'shutdown-manager.io/envoy-drain-flags': 'no',
      'shutdown-manager.io/native-sidecar': 'on',
      'shutdown-manager.io/recover-envoy': '1',
      'shutdown-manager.io/drain-delay': '5 s',
    };
    const answer = await review(body);
    assert.equal(answer.response.allowed, false);
    const message: string = answer.response.status.message;
    for (const name of ['envoy-drain-flags: "no"', 'native-sidecar: "on"', 'recover-envoy: "1"', 'drain-delay: "5 s"']) {
      assert.ok(message.includes(`annotation shutdown-manager.io/${name} is not valid`), `missing ${name} in: ${message}`);
    }
  });

  test('an unknown annotation under our prefix is a warning, not a denial', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = { 'shutdown-manager.io/check-intervall': '1s' };
    const answer = await review(body);
    assert.equal(answer.response.allowed, true);
    assert.deepEqual(answer.response.warnings, [
      'shutdown-manager: unknown annotation shutdown-manager.io/check-intervall ignored',
    ]);
  });
});

describe('with --protect-shutdown=false (Kubernetes before 1.26, whose kubelet drops hook headers)', () => {
  let unprotected: RunningWebhook;
  before(async () => {
    unprotected = await startTestWebhook(['--protect-shutdown', 'false']);
  });
  after(() => unprotected.close());

  test('hooks carry no token and the sidecar gets none', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    const result = await postReview(unprotected, body);
    const pod = applyResponse(body.request.object, result.json().response);
    assert.deepEqual(container(pod, 'envoy').lifecycle.preStop, { httpGet: { path: '/shutdown', port: 8090, scheme: 'HTTP' } });
    assert.deepEqual(container(pod, 'shutdown-manager').lifecycle.preStop, { httpGet: { path: '/wait', port: 8090, scheme: 'HTTP' } });
    assert.deepEqual(container(pod, 'shutdown-manager').env, [{ name: 'NODE_OPTIONS', value: '--max-semi-space-size=1' }]);
  });
});

describe('drain-delay and recover-envoy', () => {
  test('reach the sidecar as flags', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = {
      'shutdown-manager.io/drain-delay': '20s',
      'shutdown-manager.io/recover-envoy': 'false',
    };
    const answer = await review(body);
    assert.equal(answer.response.allowed, true, JSON.stringify(answer.response.status));
    const args = container(applyResponse(body.request.object, answer.response), 'shutdown-manager').args;
    assert.ok(args.includes('--drain-delay=20s') && args.includes('--recover-envoy=false'), args.join(' '));
  });
});

describe('long-lived-grace (off by default; a webhook flag sets the default, the annotation overrides it)', () => {
  let withGrace: RunningWebhook;
  before(async () => {
    withGrace = await startTestWebhook(['--long-lived-grace', '2m']);
  });
  after(() => withGrace.close());

  async function sidecarArgsOf(server: RunningWebhook, annotations: Record<string, string> | undefined): Promise<string[]> {
    const body = await loadReview('deployment-envoy-pod.json');
    if (annotations !== undefined) body.request.object.metadata.annotations = annotations;
    const { response, pod } = await admitReview(server, body);
    assert.equal(response.allowed, true, JSON.stringify(response.status));
    return container(pod, 'shutdown-manager').args;
  }

  const graceFlags = (args: string[]): string[] => args.filter((arg) => arg.startsWith('--long-lived-grace'));

  test('off: the sidecar gets no flag (its default is off), so pods that do not use it keep their spec', async () => {
    assert.deepEqual(graceFlags(await sidecarArgsOf(webhook, undefined)), []);
  });

  test('the annotation reaches the sidecar as a flag', async () => {
    assert.deepEqual(graceFlags(await sidecarArgsOf(webhook, { 'shutdown-manager.io/long-lived-grace': '45s' })), ['--long-lived-grace=45s']);
  });

  test("the webhook's flag is the default; the annotation overrides it, to off too", async () => {
    assert.deepEqual(graceFlags(await sidecarArgsOf(withGrace, undefined)), ['--long-lived-grace=2m']);
    assert.deepEqual(graceFlags(await sidecarArgsOf(withGrace, { 'shutdown-manager.io/long-lived-grace': '10s' })), ['--long-lived-grace=10s']);
    assert.deepEqual(graceFlags(await sidecarArgsOf(withGrace, { 'shutdown-manager.io/long-lived-grace': 'off' })), []);
  });

  test('a bad value denies the pod, naming the annotation and the accepted form', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.metadata.annotations = { 'shutdown-manager.io/long-lived-grace': '90' };
    const answer = await review(body);
    assert.equal(answer.response.allowed, false);
    assert.equal(answer.response.status.code, 400);
    const message: string = answer.response.status.message;
    assert.ok(message.includes('annotation shutdown-manager.io/long-lived-grace: "90" is not valid'), message);
    assert.ok(message.includes('or "off" (or empty) for none, but a number alone has no unit'), message);
  });
});

describe('the state volume', () => {
  test('is added when the pod has no volumes at all', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    delete body.request.object.spec.volumes;
    const answer = await review(body);
    const operations = JSON.parse(Buffer.from(answer.response.patch, 'base64').toString('utf8'));
    assert.ok(operations.some((op: Json) => op.op === 'add' && op.path === '/spec/volumes'), JSON.stringify(operations));
    assert.deepEqual(applyResponse(body.request.object, answer.response).spec.volumes, [STATE_VOLUME]);
  });

  test('a pod that has a volume of that name is denied, naming the volume', async () => {
    const body = await loadReview('deployment-envoy-pod.json');
    body.request.object.spec.volumes.push({ name: 'shutdown-manager-state', emptyDir: {} });
    const answer = await review(body);
    assert.equal(answer.response.allowed, false);
    assert.equal(answer.response.status.code, 400);
    assert.match(
      answer.response.status.message,
      /pod volume: "shutdown-manager-state" is not valid; expected a volume name other than the one the shutdown-manager adds .*rename the pod's volume "shutdown-manager-state"/,
    );
  });
});

/** The Envoy container's args after the patch, and the warnings the answer carried. */
async function envoyAfter(body: Json, webhookUnderTest: RunningWebhook = webhook): Promise<{ envoy: Json; warnings: string[] }> {
  const result = await postReview(webhookUnderTest, body);
  assert.equal(result.status, 200, result.text);
  const response = result.json().response;
  assert.equal(response.allowed, true, JSON.stringify(response.status));
  const warnings: string[] = response.warnings ?? [];
  for (const warning of warnings) assert.ok(warning.length < 120 && !warning.endsWith('…'), `too long for kubectl: ${warning}`);
  const name = JSON.parse(applyResponse(body.request.object, response).metadata.annotations['shutdown-manager.io/status']).envoyContainer;
  return { envoy: container(applyResponse(body.request.object, response), name), warnings };
}

async function deploymentWith(envoy: { command?: string[]; args?: string[]; image?: string }, annotations?: Record<string, string>): Promise<Json> {
  const body = await loadReview('deployment-envoy-pod.json');
  const spec = body.request.object.spec.containers[0];
  delete spec.command;
  delete spec.args;
  Object.assign(spec, envoy);
  if (annotations !== undefined) body.request.object.metadata.annotations = annotations;
  return body;
}


describe("Envoy's own drain flags", () => {
  test('a Contour-style pod running `command: [envoy]` gets them appended to its args, with the deadline as drain time', async () => {
    const body = await loadReview('contour-daemonset-pod.json');
    const original = body.request.object.spec.containers[0];
    const { envoy, warnings } = await envoyAfter(body);
    assert.deepEqual(envoy.command, ['envoy']);
    assert.deepEqual(envoy.args, [...original.args, '--drain-strategy', 'immediate', '--drain-time-s', '590'], 'grace 600 s: deadline 9m50s');
    assert.deepEqual(warnings, [...CONTOUR_STYLE_ADMIN_WARNINGS, HOOK_WARNING]);
  });

  test('an args-only pod of the Envoy image gets them too (the image entrypoint prepends envoy to flags)', async () => {
    const { envoy, warnings } = await envoyAfter(await deploymentWith({ args: ['--config-path', '/etc/envoy/envoy.yaml'] }));
    assert.deepEqual(envoy.args, ['--config-path', '/etc/envoy/envoy.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '290']);
    assert.equal(envoy.command, undefined);
    assert.deepEqual(warnings, []);
  });

  test('the drain time is the deadline rounded up to whole seconds, from the grace period the pod will have', async () => {
    const body = await deploymentWith({ command: ['/usr/local/bin/envoy'], args: ['-c', '/etc/envoy/envoy.yaml'] }, {
      'shutdown-manager.io/termination-grace-period': '45',
      'shutdown-manager.io/check-delay': '5s',
    });
    const { envoy } = await envoyAfter(body);
    assert.deepEqual(envoy.args, ['-c', '/etc/envoy/envoy.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '41'], 'grace 45 s: deadline 40.5 s');
  });

  test('args whose first word is envoy, under any image, get them', async () => {
    const { envoy } = await envoyAfter(await deploymentWith({ image: 'registry.local/edge/proxy:3', args: ['envoy', '-c', '/etc/envoy/envoy.yaml'] }));
    assert.deepEqual(envoy.args.slice(3), ['--drain-strategy', 'immediate', '--drain-time-s', '290']);
  });

  const agreeing: Array<[string, string[]]> = [
    ['separate elements', ['-c', '/e.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '290']],
    ['flag and value in one element, as Contour writes them', ['-c /e.yaml', '--drain-time-s 120', '--drain-strategy immediate']],
    ['--flag=value', ['-c', '/e.yaml', '--drain-strategy=immediate', '--drain-time-s=600']],
    ['a gradual drain that ends before the deadline', ['-c', '/e.yaml', '--drain-strategy', 'gradual', '--drain-time-s', '240']],
  ];
  for (const [form, args] of agreeing) {
    test(`flags already set and fitting the plan are left alone, without a warning: ${form}`, async () => {
      const { envoy, warnings } = await envoyAfter(await deploymentWith({ command: ['envoy'], args }));
      assert.deepEqual(envoy.args, args);
      assert.deepEqual(warnings, []);
    });
  }

  test("Envoy's defaults set explicitly (gradual over 600 s) are left alone, with a warning", async () => {
    const args = ['-c', '/e.yaml', '--drain-strategy', 'gradual', '--drain-time-s', '600'];
    const { envoy, warnings } = await envoyAfter(await deploymentWith({ command: ['envoy'], args }));
    assert.deepEqual(envoy.args, args);
    assert.deepEqual(warnings, [
      "shutdown-manager: Envoy's gradual --drain-time-s 600 outlasts the 4m50s left: use --drain-strategy immediate",
    ]);
  });

  test('a drain time alone means a gradual drain (Envoy\'s default strategy); drain-delay shortens the time left', async () => {
    const args = ['-c', '/e.yaml', '--drain-time-s', '250'];
    const fits = await envoyAfter(await deploymentWith({ command: ['envoy'], args }));
    assert.deepEqual(fits.warnings, [], '250 s fit in 4m50s');
    const delayed = await envoyAfter(await deploymentWith({ command: ['envoy'], args }, { 'shutdown-manager.io/drain-delay': '1m' }));
    assert.deepEqual(delayed.envoy.args, args);
    assert.deepEqual(delayed.warnings, [
      "shutdown-manager: Envoy's gradual --drain-time-s 250 outlasts the 3m50s left: use --drain-strategy immediate",
    ]);
  });

  test('a drain time below check-delay is left alone; a warning when Envoy may be older than 1.29 (no skip_exit: its listeners close after the drain time)', async () => {
    const args = ['-c', '/e.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '30'];
    const old = await envoyAfter(await deploymentWith({ command: ['envoy'], args, image: 'envoyproxy/envoy:distroless-v1.28.7' }));
    assert.deepEqual(old.envoy.args, args);
    assert.deepEqual(old.warnings, ["shutdown-manager: Envoy's --drain-time-s 30 < check-delay 1m: listeners close while load balancers still send"]);
    const unknown = await envoyAfter(await deploymentWith({ command: ['envoy'], args, image: 'envoyproxy/envoy:latest' }));
    assert.deepEqual(unknown.warnings, [
      "shutdown-manager: Envoy's --drain-time-s 30 < check-delay 1m: before Envoy 1.29, listeners close while LBs still send",
    ]);
    const recent = await envoyAfter(await deploymentWith({ command: ['envoy'], args, image: 'envoyproxy/envoy:v1.31.2' }));
    assert.deepEqual(recent.warnings, [], 'from 1.29 the drain keeps the listeners open (skip_exit)');
  });

  test('a drain time that cannot be read here (a variable) is not judged', async () => {
    const args = ['-c', '/e.yaml', '--drain-time-s', '$(DRAIN_TIME)'];
    const { envoy, warnings } = await envoyAfter(await deploymentWith({ command: ['envoy'], args }));
    assert.deepEqual(envoy.args, args);
    assert.deepEqual(warnings, []);
  });

  const unknown: Array<[string, { command?: string[]; args?: string[] }]> = [
    ["the image's default command", {}],
    ['a shell wrapper', { command: ['/bin/sh', '-c'], args: ['exec envoy -c /e.yaml'] }],
    ['a flag-first args list under another image', { args: ['-c', '/e.yaml'] }],
  ];
  for (const [how, start] of unknown) {
    test(`Envoy started by ${how} is left alone, with a short warning giving the flags`, async () => {
      const body = await deploymentWith(start);
      if (how.includes('another image')) body.request.object.spec.containers[0].image = 'registry.local/edge/proxy:3';
      const { envoy, warnings } = await envoyAfter(body);
      assert.deepEqual(envoy.command, start.command);
      assert.deepEqual(envoy.args, start.args);
      assert.deepEqual(warnings, [
        'shutdown-manager: cannot tell if "envoy" runs envoy: add --drain-strategy immediate --drain-time-s 290 yourself',
      ]);
    });
  }

  test('a shell wrapper that sets the flags is checked like any other', async () => {
    const start = { command: ['/bin/sh', '-c'], args: ['exec envoy -c /e.yaml --drain-time-s 600'] };
    const { envoy, warnings } = await envoyAfter(await deploymentWith(start));
    assert.deepEqual(envoy.args, start.args);
    assert.deepEqual(warnings, [
      "shutdown-manager: Envoy's gradual --drain-time-s 600 outlasts the 4m50s left: use --drain-strategy immediate",
    ]);
  });

  test('annotation envoy-drain-flags: "false" leaves the args alone and silences the warnings', async () => {
    const added = await envoyAfter(await deploymentWith({ command: ['envoy'], args: ['-c', '/e.yaml'] }, { 'shutdown-manager.io/envoy-drain-flags': 'false' }));
    assert.deepEqual(added.envoy.args, ['-c', '/e.yaml']);
    assert.deepEqual(added.warnings, []);
    const gradual = ['-c', '/e.yaml', '--drain-time-s', '600'];
    const warned = await envoyAfter(await deploymentWith({ command: ['envoy'], args: gradual }, { 'shutdown-manager.io/envoy-drain-flags': 'false' }));
    assert.deepEqual(warned.envoy.args, gradual);
    assert.deepEqual(warned.warnings, []);
  });

  test('injecting the result again changes nothing: the flags are there once', async () => {
    for (const body of [await loadReview('contour-daemonset-pod.json'), await loadReview('deployment-envoy-pod.json')]) {
      const once = applyResponse(body.request.object, (await review(body)).response);
      body.request.object = once;
      const again = await review(body);
      assert.equal(again.response.patch, undefined);
      const args: string[] = container(once, 'envoy').args;
      assert.equal(args.filter((arg) => arg === '--drain-time-s').length, 1, args.join(' '));
      assert.equal(args.filter((arg) => arg === '--drain-strategy').length, 1, args.join(' '));
    }
  });

  describe('with --envoy-drain-flags=false', () => {
    let untouched: RunningWebhook;
    before(async () => {
      untouched = await startTestWebhook(['--envoy-drain-flags=false']);
    });
    after(() => untouched.close());

    test("Envoy's args are left alone; a pod annotation may still ask for the flags", async () => {
      const body = await loadReview('contour-daemonset-pod.json');
      const { envoy, warnings } = await envoyAfter(body, untouched);
      assert.deepEqual(envoy.args, body.request.object.spec.containers[0].args);
      assert.deepEqual(warnings, [...CONTOUR_STYLE_ADMIN_WARNINGS, HOOK_WARNING]);
      body.request.object.metadata.annotations['shutdown-manager.io/envoy-drain-flags'] = 'true';
      const asked = await envoyAfter(body, untouched);
      assert.deepEqual(asked.envoy.args.slice(-4), ['--drain-strategy', 'immediate', '--drain-time-s', '590']);
    });
  });
});
