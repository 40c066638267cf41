/** `envoy-shutdown-manager inject` as users run it: the built entry point, files and pipes. */
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { before, describe, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { parse, parseAllDocuments } from 'yaml';
import { runBuiltEntry, type Finished } from '../support/process.js';

type Json = any; // parsed manifests, navigated freely by the assertions

const FIXTURES = fileURLToPath(new URL('../fixtures/manifests/', import.meta.url));

/** The full offline injection (--manual), which these tests are about; test/cli/opt-in.test.ts has the default. */
function inject(args: string[], input?: string, env: Record<string, string> = {}): Promise<Finished> {
  return runBuiltEntry(['inject', '--manual', ...args], { ...(input === undefined ? {} : { input }), env, timeoutMs: 15_000 });
}

/** The sidecar's readiness probe (see readinessProbe in src/inject/sidecar.ts), on the default serve port. */
const READINESS_PROBE = {
  httpGet: { path: '/ready', port: 8090, scheme: 'HTTP' },
  initialDelaySeconds: 1,
  periodSeconds: 2,
  timeoutSeconds: 5,
  failureThreshold: 15,
};

/** Splits a YAML stream into its documents' source text, on the `---` lines. */
function sourceDocuments(text: string): string[] {
  return text.split(/^---\n/m);
}

describe('a multi-document YAML stream', () => {
  const input = readFileSync(`${FIXTURES}mixed.yaml`, 'utf8');
  let result: Finished;
  before(async () => {
    result = await inject(['-f', `${FIXTURES}mixed.yaml`]);
  });

  test('exits 0', () => assert.equal(result.code, 0, result.stderr));

  test('documents without an Envoy pod template are written back byte for byte', () => {
    const before = sourceDocuments(input);
    const after = sourceDocuments(result.stdout);
    assert.equal(after.length, before.length);
    for (const index of [0, 2, 3, 4, 5]) assert.equal(after[index], before[index], `document ${index + 1} changed`);
  });

  test('the Deployment template gets the sidecar, its annotation overrides, and keeps its comment', () => {
    const deployment: Json = parseAllDocuments(result.stdout)[1]?.toJS();
    const spec = deployment.spec.template.spec;
    assert.deepEqual(spec.containers.map((c: Json) => c.name), ['envoy', 'shutdown-manager']);
    assert.ok(spec.containers[1].args.includes('--check-delay=15s'), "the annotation's check delay reaches the sidecar");
    assert.ok(spec.containers[1].args.includes('--state-dir=/var/run/shutdown-manager'), 'the sidecar keeps its state directory');
    assert.equal(spec.containers[0].lifecycle.preStop.httpGet.path, '/shutdown');
    assert.equal(spec.containers[1].lifecycle.preStop.httpGet.path, '/wait');
    assert.deepEqual(spec.containers[1].readinessProbe, READINESS_PROBE, "not Ready until Envoy's admin API has answered it");
    assert.deepEqual(spec.volumes, [{ name: 'shutdown-manager-state', emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } }]);
    assert.equal(spec.terminationGracePeriodSeconds, 300);
    assert.ok(deployment.spec.template.metadata.annotations['shutdown-manager.io/status'], 'the template is marked injected');
    assert.match(sourceDocuments(result.stdout)[1] ?? '', /replicas: 3 # one per zone/);
  });

  test('the CronJob is left alone with a note: a regular sidecar would keep its Jobs from finishing', () => {
    const before = sourceDocuments(input);
    assert.equal(sourceDocuments(result.stdout)[4], before[4]);
    assert.match(result.stderr, /note: \S*mixed\.yaml: document 5 \(CronJob edge\/envoy-canary\): not injected: a Job's pod needs annotation shutdown-manager.io\/native-sidecar: "true"/);
  });

  test('with native sidecars, the CronJob pod template is injected too', async () => {
    const native = await inject(['-f', `${FIXTURES}mixed.yaml`, '--native-sidecar']);
    assert.equal(native.code, 0, native.stderr);
    const cronJob: Json = parseAllDocuments(native.stdout)[4]?.toJS();
    const spec = cronJob.spec.jobTemplate.spec.template.spec;
    assert.deepEqual(spec.containers.map((c: Json) => c.name), ['envoy']);
    assert.deepEqual(spec.initContainers.map((c: Json) => [c.name, c.restartPolicy]), [['shutdown-manager', 'Always']]);
    assert.deepEqual(spec.initContainers[0].readinessProbe, READINESS_PROBE, 'a native sidecar has one too');
  });

  test("Envoy's args (the image's entrypoint runs envoy with them) get its drain flags, as separate strings", () => {
    const spec = (parseAllDocuments(result.stdout)[1]?.toJS() as Json).spec.template.spec;
    assert.deepEqual(spec.containers[0].args, ['-c', '/etc/envoy/envoy.yaml', '--drain-strategy', 'immediate', '--drain-time-s', '290']);
    assert.doesNotMatch(result.stderr, /document 2/, 'no note for the Deployment');
  });

  test('with --envoy-drain-flags=false, or the annotation set to "false", Envoy\'s args are left alone', async () => {
    const untouched = (output: string): void => {
      const spec = (parseAllDocuments(output)[1]?.toJS() as Json).spec.template.spec;
      assert.deepEqual(spec.containers.map((c: Json) => c.name), ['envoy', 'shutdown-manager'], 'still injected');
      assert.deepEqual(spec.containers[0].args, ['-c', '/etc/envoy/envoy.yaml']);
    };
    const byFlag = await inject(['-f', `${FIXTURES}mixed.yaml`, '--envoy-drain-flags=false']);
    assert.equal(byFlag.code, 0, byFlag.stderr);
    untouched(byFlag.stdout);
    const annotated = input.replace('shutdown-manager.io/check-delay: 15s', 'shutdown-manager.io/check-delay: 15s\n        shutdown-manager.io/envoy-drain-flags: "false"');
    const byAnnotation = await inject(['-f', '-'], annotated);
    assert.equal(byAnnotation.code, 0, byAnnotation.stderr);
    untouched(byAnnotation.stdout);
  });

  test('Envoy started by its image\'s default command is left alone, with a note giving the flags', async () => {
    const native = await inject(['-f', `${FIXTURES}mixed.yaml`, '--native-sidecar']);
    const cronJob: Json = parseAllDocuments(native.stdout)[4]?.toJS();
    assert.equal(cronJob.spec.jobTemplate.spec.template.spec.containers[0].args, undefined);
    assert.match(native.stderr, /note: \S*mixed\.yaml: document 5 \(CronJob edge\/envoy-canary\): cannot tell if "envoy" runs envoy: add --drain-strategy immediate --drain-time-s 290 yourself/);
  });

  test('injecting the output again changes nothing', async () => {
    const again = await inject(['-f', '-'], result.stdout);
    assert.equal(again.code, 0, again.stderr);
    assert.equal(again.stdout, result.stdout);
  });

  test('flags set the defaults, as on the webhook', async () => {
    const custom = await inject(['-f', `${FIXTURES}mixed.yaml`, '--check-interval=1s', '--native-sidecar', '--sidecar-image=registry.local/esm:dev']);
    assert.equal(custom.code, 0, custom.stderr);
    const spec = (parseAllDocuments(custom.stdout)[1]?.toJS() as Json).spec.template.spec;
    assert.equal(spec.initContainers[0].image, 'registry.local/esm:dev');
    assert.equal(spec.initContainers[0].restartPolicy, 'Always');
    assert.ok(spec.initContainers[0].args.includes('--check-interval=1s'), 'the --check-interval flag reaches the init container');
  });
});

describe('flags and tokens', () => {
  /** The Deployment's token, checked to be the one both of its hooks present. */
  const tokenOf = (output: string): string => {
    const spec = (parseAllDocuments(output)[1]?.toJS() as Json).spec.template.spec;
    const token: string = spec.containers[1].env.find((variable: Json) => variable.name === 'SHUTDOWN_MANAGER_SHUTDOWN_TOKEN').value;
    for (const container of spec.containers) {
      assert.deepEqual(container.lifecycle.preStop.httpGet.httpHeaders, [{ name: 'Authorization', value: `Bearer ${token}` }]);
    }
    return token;
  };

  test('`--name value` works like `--name=value`, and the server\'s environment is not read', async () => {
    const result = await inject(['-f', `${FIXTURES}mixed.yaml`, '--check-interval', '2s'], undefined, { SHUTDOWN_MANAGER_PORT: 'not-a-port' });
    assert.equal(result.code, 0, result.stderr);
    assert.ok((parseAllDocuments(result.stdout)[1]?.toJS() as Json).spec.template.spec.containers[1].args.includes('--check-interval=2s'), "the value after a space is taken as the flag's");
  });

  test('with a token seed the output is the same on every run; without, tokens differ and a note says so', async () => {
    const seeded = { SHUTDOWN_MANAGER_TOKEN_SEED: 'a-long-random-secret' };
    const first = await inject(['-f', `${FIXTURES}mixed.yaml`], undefined, seeded);
    const second = await inject(['-f', `${FIXTURES}mixed.yaml`], undefined, seeded);
    assert.equal(first.code, 0, first.stderr);
    assert.equal(first.stdout, second.stdout);
    assert.doesNotMatch(first.stderr, /tokens are random/);
    const otherSeed = await inject(['-f', `${FIXTURES}mixed.yaml`], undefined, { SHUTDOWN_MANAGER_TOKEN_SEED: 'another-secret' });
    assert.notEqual(tokenOf(otherSeed.stdout), tokenOf(first.stdout));
    const renamed = await inject(['-f', '-'], readFileSync(`${FIXTURES}mixed.yaml`, 'utf8').replace('name: envoy\n  namespace: edge\nspec:\n  replicas', 'name: envoy-b\n  namespace: edge\nspec:\n  replicas'), seeded);
    assert.notEqual(tokenOf(renamed.stdout), tokenOf(first.stdout), 'each workload has its own token');

    const random = [await inject(['-f', `${FIXTURES}mixed.yaml`]), await inject(['-f', `${FIXTURES}mixed.yaml`])];
    assert.notEqual(tokenOf(random[0]!.stdout), tokenOf(random[1]!.stdout));
    assert.match(random[0]!.stderr, /note: \/shutdown tokens are random, so every run changes the pod templates it injects; set SHUTDOWN_MANAGER_TOKEN_SEED/);
  });
});

describe('JSON', () => {
  test('a List is injected item by item and written as JSON', async () => {
    const result = await inject(['--filename', `${FIXTURES}list.json`]);
    assert.equal(result.code, 0, result.stderr);
    const list = JSON.parse(result.stdout);
    assert.deepEqual(list.items[0].spec.template.spec.containers.map((c: Json) => c.name), ['envoy', 'shutdown-manager']);
    assert.deepEqual(list.items[1], JSON.parse(readFileSync(`${FIXTURES}list.json`, 'utf8')).items[1]);
  });
});

describe('errors name what is wrong', () => {
  test('bad YAML: the document and the line', async () => {
    const result = await inject(['-f', '-'], 'kind: Namespace\nmetadata: {name: a}\n---\nkind: Pod\nmetadata:\n  labels: [app: envoy\nspec: {}\n');
    assert.equal(result.code, 1);
    assert.match(result.stderr, /^envoy-shutdown-manager inject: stdin: document 2 \(line 7, column \d+\): [^\n]+\n$/);
    assert.equal(result.stdout, '', 'nothing half-written to stdout');
  });

  test('a bad envoy-drain-flags annotation: the resource, the annotation and the accepted form', async () => {
    const yaml = readFileSync(`${FIXTURES}mixed.yaml`, 'utf8').replace('check-delay: 15s', 'envoy-drain-flags: "off"');
    const result = await inject(['-f', '-'], yaml);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /Deployment edge\/envoy: annotation shutdown-manager.io\/envoy-drain-flags: "off" is not valid; expected "true" or "false"/);
    assert.equal(result.stdout, '');
  });

  test('a bad annotation: the resource, the annotation and the accepted form', async () => {
    const yaml = readFileSync(`${FIXTURES}mixed.yaml`, 'utf8').replace('check-delay: 15s', 'check-delay: soon');
    const result = await inject(['-f', '-'], yaml);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /Deployment edge\/envoy: annotation shutdown-manager.io\/check-delay: "soon" is not valid; expected a Go duration/);
    assert.equal(result.stdout, '');
  });

  test('a missing file, a missing -f, an unknown flag', async () => {
    assert.match((await inject(['-f', '/nonexistent.yaml'])).stderr, /^envoy-shutdown-manager inject: cannot read \/nonexistent.yaml: ENOENT \(no such file or directory\)\n$/);
    const noFile = await inject([]);
    assert.equal(noFile.code, 2);
    assert.match(noFile.stderr, /missing FILE/);
    const unknown = await inject(['-f', '-', '--port=1'], '');
    assert.equal(unknown.code, 2);
    assert.match(unknown.stderr, /unknown flag --port /, "the server's flags mean nothing here");
  });

  test('a skipped Envoy pod is explained on stderr', async () => {
    const pod = 'apiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: envoy}}\nspec:\n  containers: [{name: a, image: busybox}]\n';
    const result = await inject(['-f', '-'], pod);
    assert.equal(result.code, 0);
    assert.equal(result.stdout, pod);
    assert.match(result.stderr, /note: stdin: document 1 \(Pod p\): not injected: no Envoy container found/);
    assert.deepEqual(parse(result.stdout).spec.containers.length, 1);
  });
});

describe('YAML as people write it', () => {
  test('flow style that starts like JSON is read as YAML', async () => {
    const pod = '{apiVersion: v1, kind: Pod, metadata: {name: p, labels: {app: envoy}}, spec: {containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2}]}}\n';
    const result = await inject(['-f', '-'], pod);
    assert.equal(result.code, 0, result.stderr);
    assert.deepEqual((parse(result.stdout) as Json).spec.containers.map((c: Json) => c.name), ['envoy', 'shutdown-manager']);
  });

  test('merge keys are resolved when reading the template', async () => {
    const yaml = [
      'x-labels: &labels {app: envoy}',
      'apiVersion: v1',
      'kind: Pod',
      'metadata:',
      '  name: p',
      '  labels:',
      '    <<: *labels',
      'spec:',
      '  containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2}]',
      '',
    ].join('\n');
    const result = await inject(['-f', '-'], yaml);
    assert.equal(result.code, 0, result.stderr);
    assert.equal((parse(result.stdout, { merge: true }) as Json).spec.containers.length, 2);
  });

  for (const [where, yaml] of [
    [
      'spec',
      'x-spec: &podspec\n  containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2}]\napiVersion: v1\nkind: Pod\nmetadata: {name: p, labels: {app: envoy}}\nspec:\n  <<: *podspec\n',
    ],
    [
      'metadata',
      'x-meta: &meta\n  labels: {app: envoy}\n  annotations: {prometheus.io/scrape: "true"}\napiVersion: v1\nkind: Pod\nmetadata:\n  <<: *meta\n  name: p\nspec:\n  containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2}]\n',
    ],
  ] as const) {
    test(`an edit that a merge key in ${where} would divert is refused rather than written wrong`, async () => {
      const result = await inject(['-f', '-'], yaml);
      assert.equal(result.code, 1, result.stdout);
      assert.match(result.stderr, /Pod p: its pod template uses YAML merge keys \(<<\) or anchors that an edit cannot go through; expand them first/);
      assert.equal(result.stdout, '');
    });
  }

  test('a template shared through an alias is refused with a clear message, not a stack trace', async () => {
    const yaml = [
      'apiVersion: v1',
      'kind: List',
      'items:',
      '- apiVersion: apps/v1',
      '  kind: Deployment',
      '  metadata: {name: a}',
      '  spec:',
      '    template: &shared',
      '      metadata: {labels: {app: envoy}}',
      '      spec: {containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2}]}',
      '- apiVersion: apps/v1',
      '  kind: Deployment',
      '  metadata: {name: b}',
      '  spec:',
      '    template: *shared',
      '',
    ].join('\n');
    const result = await inject(['-f', '-'], yaml);
    assert.equal(result.code, 1);
    assert.match(result.stderr, /^envoy-shutdown-manager inject: stdin: document 1: cannot edit items\.1\.spec\.template\..*expand them first/m);
    assert.doesNotMatch(result.stderr, /\n\s+at /, 'no stack trace');
    assert.equal(result.stdout, '');
  });

  test('--help lists the injection flags and the token seed', async () => {
    const result = await inject(['--help']);
    assert.equal(result.code, 0);
    assert.match(result.stdout, /-f, --filename FILE/);
    assert.match(result.stdout, /--token-seed\n/);
    assert.doesNotMatch(result.stdout, /--tls-cert-file/, 'server flags are not offered');
  });
});

describe('what the sidecar could not reach is said on stderr', () => {
  test("an Authorino-like Deployment: the admin port found in the pod, and a hostNetwork DaemonSet's serve port", async () => {
    const yaml = [
      'apiVersion: apps/v1',
      'kind: Deployment',
      'metadata: {name: envoy, namespace: authorino}',
      'spec:',
      '  template:',
      '    metadata: {labels: {app: envoy}}',
      '    spec:',
      '      containers:',
      '      - name: envoy',
      '        image: envoyproxy/envoy:v1.31-latest',
      '        command: [/usr/local/bin/envoy]',
      '        ports: [{name: web, containerPort: 8000}, {name: admin, containerPort: 8001}]',
      '---',
      'apiVersion: apps/v1',
      'kind: DaemonSet',
      'metadata: {name: edge, namespace: ingress}',
      'spec:',
      '  template:',
      '    metadata: {labels: {app: envoy}}',
      '    spec:',
      '      hostNetwork: true',
      '      containers: [{name: envoy, image: envoyproxy/envoy:v1.31.2, command: [envoy]}]',
      '',
    ].join('\n');
    const result = await inject(['-f', '-'], yaml);
    assert.equal(result.code, 0, result.stderr);
    assert.match(
      result.stderr,
      /^note: stdin: document 1 \(Deployment authorino\/envoy\): Envoy admin found at 127\.0\.0\.1:8001 \(container port "admin"\); the sidecar drains it there$/m,
    );
    assert.match(
      result.stderr,
      /^note: stdin: document 2 \(DaemonSet ingress\/edge\): hostNetwork: serve port 8090 must be unique on the node; set annotation shutdown-manager.io\/serve-port$/m,
    );
    const sidecar = parseAllDocuments(result.stdout)[0]?.toJS().spec.template.spec.containers[1];
    assert.ok(sidecar.args.includes('--admin-port=8001'), sidecar.args.join(' '));
  });
});
