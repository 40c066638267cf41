/**
 * The image's payload, run as the image runs it: exactly the files the Dockerfile's runtime stage copies
 * (package.json, and from the build stage what test/docker/dockerfile.ts `runtimeFiles` lists), in a fresh
 * directory with no node_modules anywhere above it, started with `node <app>/dist/entry.cjs`. Every mode must
 * work from it: the webhook answers a review over HTTPS, `inject` injects a manifest, the sidecar drains the
 * Envoy emulator and serves /metrics, and self-managed certificates reach the (fake) API server.
 * `npm run build` first (npm test does).
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { cpSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, parse, relative } from 'node:path';
import { after, before, describe, test, type TestContext } from 'node:test';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { SIDECAR_ENV } from '../../src/inject/sidecar.js';
import { closeAll, httpRequest, openTcpConnections } from '../support/connections.js';
import { FakeKubeApi } from '../support/fake-kube-api.js';
import { mountNamespaceLauncher, mountNamespaceProblem } from '../support/mount-namespace.js';
import { REPO_ROOT, startNode, WEBHOOK_LISTENING, type LoggingProcess } from '../support/process.js';
import { httpsRequest, loadReview } from '../support/webhook.js';
import { parseDockerfile, runtimeEnv, runtimeFiles } from './dockerfile.js';

/** Issue 22's target for everything the runtime stage adds on top of its base image. */
const PAYLOAD_LIMIT_BYTES = 10 * 1024 * 1024;

let root: string;
let entry: string;
/** The payload's size in bytes, as measured in before(). */
let payloadBytes: number;
const dockerfile = parseDockerfile(readFileSync(join(REPO_ROOT, 'Dockerfile'), 'utf8'));
/** What the image's ENV gives every process (NODE_ENV, the webhook's NODE_OPTIONS); a pod's env adds to it or replaces it. */
const IMAGE_ENV = runtimeEnv(dockerfile);

/** Copies the runtime stage's files to a fresh /tmp/…/app, as the image lays them out under /app. */
function installPayload(): { root: string; entry: string; bytes: number } {
  const base = mkdtempSync(join(tmpdir(), 'esm-image-'));
  const app = join(base, 'app');
  mkdirSync(app);
  const files = runtimeFiles(dockerfile);
  cpSync(join(REPO_ROOT, 'package.json'), join(app, 'package.json'));
  for (const { built, shipped } of files) {
    const source = join(REPO_ROOT, built);
    assert.ok(existsSync(source), `${built} is missing: run npm run build`);
    const target = join(app, relative('/app', shipped));
    mkdirSync(dirname(target), { recursive: true });
    cpSync(source, target, { recursive: true });
  }
  return { root: base, entry: join(app, 'dist', 'entry.cjs'), bytes: sizeOf(app) };
}

function sizeOf(path: string): number {
  const info = statSync(path);
  if (!info.isDirectory()) return info.size;
  return (spawnSync('find', [path, '-type', 'f', '-printf', '%s\n'], { encoding: 'utf8' }).stdout.split('\n').filter(Boolean)).reduce((sum, size) => sum + Number(size), 0);
}

/** No node_modules in the payload's directory nor any directory above it: Node would find packages there. */
function nodeModulesAbove(directory: string): string | undefined {
  for (let current = directory; ; current = dirname(current)) {
    if (existsSync(join(current, 'node_modules'))) return join(current, 'node_modules');
    if (current === parse(current).root) return undefined;
  }
}

async function started(t: TestContext, args: readonly string[], ready: (line: Record<string, unknown>) => boolean, options: { env?: Record<string, string>; launcher?: string[] } = {}): Promise<LoggingProcess> {
  const process = await startNode([entry, ...args], { ready, readyTimeoutMs: 15_000, cwd: dirname(entry), ...options, env: { ...IMAGE_ENV, ...options.env } });
  t.after(() => process.kill());
  return process;
}

describe('the runtime payload (what the image ships), every mode from it', () => {
  before(() => {
    const installed = installPayload();
    root = installed.root;
    entry = installed.entry;
    payloadBytes = installed.bytes;
    assert.equal(nodeModulesAbove(dirname(entry)), undefined, 'no node_modules reachable from the payload');
    assert.ok(installed.bytes <= PAYLOAD_LIMIT_BYTES, `${(installed.bytes / 1048576).toFixed(1)} MiB over the 10 MiB the image may add`);
    process.stdout.write(`# runtime payload: ${(installed.bytes / 1048576).toFixed(2)} MiB\n`);
  });
  after(() => rmSync(root, { recursive: true, force: true }));

  test('the docs state the payload as measured here (within 0.5 MiB)', () => {
    const measured = payloadBytes / 1048576;
    for (const [file, figure] of [
      ['docs/install.md', /plus ([\d.]+) MiB of its own/],
      ['docs/performance.md', /The runtime stage adds ([\d.]+) MiB/],
    ] as const) {
      const stated = Number(figure.exec(readFileSync(join(REPO_ROOT, file), 'utf8'))?.[1]);
      assert.ok(Number.isFinite(stated), `${file} states the payload (${String(figure)})`);
      assert.ok(Math.abs(stated - measured) <= 0.5, `${file} says ${stated} MiB; the payload measures ${measured.toFixed(2)} MiB`);
    }
  });

  test('the webhook answers an AdmissionReview over HTTPS with a patch', async (t) => {
    const certs = mkdtempSync(join(tmpdir(), 'esm-image-certs-'));
    t.after(() => rmSync(certs, { recursive: true, force: true }));
    const webhook = await started(t, ['--dev-certs', '--address=127.0.0.1', '--port=0', `--tls-cert-file=${certs}/tls.crt`, `--tls-key-file=${certs}/tls.key`], WEBHOOK_LISTENING);
    const review = await loadReview('deployment-envoy-pod.json');
    const answer = await httpsRequest(`${String(webhook.ready['url'])}/mutate`, { ca: readFileSync(join(certs, 'ca.crt'), 'utf8'), body: JSON.stringify(review), contentType: 'application/json' });
    assert.equal(answer.status, 200, answer.text);
    assert.equal(answer.json().response.allowed, true);
    assert.ok(answer.json().response.patch, 'a patch');
  });

  test('inject --manual injects a manifest', () => {
    const manifest = 'apiVersion: v1\nkind: Pod\nmetadata:\n  name: envoy\n  labels: {app: envoy}\nspec:\n  containers:\n  - name: envoy\n    image: envoyproxy/envoy:v1.31.2\n    args: ["-c", "/etc/envoy.yaml"]\n';
    const result = spawnSync(process.execPath, [entry, 'inject', '--manual', '-f', '-'], { input: manifest, encoding: 'utf8', timeout: 20_000, cwd: dirname(entry) });
    assert.equal(result.status, 0, result.stderr);
    assert.match(result.stdout, /name: shutdown-manager/);
    assert.match(result.stdout, /mode=sidecar/);
  });

  test('the sidecar drains the Envoy emulator (TCP-proxy connections counted) and serves /metrics', async (t) => {
    const envoy = await EnvoyEmulator.start();
    t.after(() => envoy.close());
    const sidecar = await started(
      t,
      ['mode=sidecar', '--serve-address=127.0.0.1', '--serve-port=0', `--admin-port=${envoy.ports.admin}`, '--check-delay=0', '--quiet-period=0s', '--check-interval=50ms', '--drain-timeout=10s'],
      (line) => line['event'] === 'listening',
      // The container's env as injected, over the image's: the sidecar's NODE_OPTIONS replaces the webhook's.
      { env: Object.fromEntries(SIDECAR_ENV.map(({ name, value }) => [name, value])) },
    );
    const url = (path: string): string => `http://127.0.0.1:${String(sidecar.ready['port'])}${path}`;
    const held = await openTcpConnections(envoy.ports.tcp, 2);
    const shutdown = httpRequest(url('/shutdown'), { timeoutMs: 15_000 });
    await sidecar.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 2, 10_000);
    await closeAll(held);
    assert.equal((await shutdown).status, 200);
    const metrics = await httpRequest(url('/metrics'));
    assert.equal(metrics.status, 200, metrics.body);
    assert.match(metrics.body, /^shutdown_manager_drain_state\{state="drained"\} 1$/m);
  });

  test('self-managed certificates: the webhook stores its CA in a Secret and patches the caBundle through the API server', async (t) => {
    const problem = mountNamespaceProblem();
    if (problem !== undefined) return t.skip(`${problem}: the ServiceAccount token's path is fixed`);
    const api = await FakeKubeApi.start();
    t.after(() => api.close());
    api.addWebhookConfiguration('shutdown-manager.io', ['shutdown-manager.io']);
    const account = mkdtempSync(join(tmpdir(), 'esm-image-sa-'));
    t.after(() => rmSync(account, { recursive: true, force: true }));
    writeFileSync(join(account, 'token'), api.token);
    writeFileSync(join(account, 'ca.crt'), api.caPem);
    writeFileSync(join(account, 'namespace'), 'envoy-shutdown-manager');
    const port = new URL(api.url).port;
    const launcher = mountNamespaceLauncher([{ source: account, target: '/var/run/secrets/kubernetes.io/serviceaccount' }]);
    const ensured = existsSync('/var/run/secrets/kubernetes.io/serviceaccount');
    if (!ensured) mkdirSync('/var/run/secrets/kubernetes.io/serviceaccount', { recursive: true });
    t.after(() => {
      if (!ensured) rmSync('/var/run/secrets', { recursive: true, force: true });
    });
    await started(t, ['--self-signed-certs', '--address=127.0.0.1', '--port=0'], WEBHOOK_LISTENING, {
      env: { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: port },
      launcher,
    });
    assert.ok(api.secretData('envoy-shutdown-manager', 'envoy-shutdown-manager-self-signed')?.['ca.crt'], 'the Secret holds the CA');
    assert.ok(api.caBundles('shutdown-manager.io')[0]?.includes('BEGIN CERTIFICATE'), 'the caBundle was patched');
  });
});
