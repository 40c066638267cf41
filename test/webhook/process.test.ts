/** The webhook as users start it: the built entry point in a child process. */
import assert from 'node:assert/strict';
import { existsSync } from 'node:fs';
import { Agent, get } from 'node:https';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { SERVICE_ACCOUNT_TOKEN_FILE } from '../../src/kube/client.js';
import { runBuiltEntry, startWebhook } from '../support/process.js';
import { httpsRequest } from '../support/webhook.js';

test('--help lists every flag with its default and environment variable', async () => {
  const result = await runBuiltEntry(['--help']);
  assert.equal(result.code, 0, result.stderr);
  assert.match(result.stdout, /--check-delay\n.*\n\s+env SHUTDOWN_MANAGER_CHECK_DELAY, default 1m/);
  assert.match(result.stdout, /--termination-grace-period\n.*\n\s+env SHUTDOWN_MANAGER_TERMINATION_GRACE_PERIOD, default 300/);
});

test('a bad flag value exits 2 naming the flag', async () => {
  const result = await runBuiltEntry(['--check-interval=often']);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /flag --check-interval: "often" is not valid; expected a Go duration/);
});

test('an unknown mode exits 2', async () => {
  const result = await runBuiltEntry(['mode=proxy']);
  assert.equal(result.code, 2);
  assert.match(result.stderr, /unknown mode=proxy; expected mode=webhook \(the default\) or mode=sidecar/);
});

test('missing certificates are a clear error', async () => {
  const result = await runBuiltEntry(['--port=0', '--tls-cert-file=/nonexistent/tls.crt']);
  assert.equal(result.code, 1);
  assert.match(result.stderr, /cannot read the certificate \(--tls-cert-file\) \/nonexistent\/tls.crt: ENOENT/);
});

test('with --dev-certs it generates certificates, serves HTTPS; on SIGTERM it fails /readyz, keeps serving for the delay, then exits 0', async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'esm-process-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const webhook = await startWebhook(['--dev-certs', '--address=127.0.0.1', '--port=0', '--shutdown-delay=600ms', `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`]);
  t.after(() => webhook.kill());
  const { url } = webhook;
  assert.ok(url.startsWith('https://127.0.0.1:'), `no listening line, got ${url}`);
  assert.equal((await stat(join(directory, 'tls.key'))).mode & 0o777, 0o600);

  const ca = await readFile(join(directory, 'ca.crt'), 'utf8');
  const health = await httpsRequest(`${url}/healthz`, { ca, method: 'GET' });
  assert.equal(health.status, 200);

  // A client that keeps its connection open (as the API server does) must not hold the shutdown up.
  const keepAlive = new Agent({ keepAlive: true, ca });
  t.after(() => keepAlive.destroy());
  await new Promise<void>((resolve, reject) => {
    get(`${url}/healthz`, { agent: keepAlive }, (res) => res.resume().on('end', resolve)).on('error', reject);
  });
  assert.equal(Object.values(keepAlive.freeSockets).flat().length, 1, 'an idle keep-alive connection is open');

  const signalledAt = Date.now();
  webhook.child.kill('SIGTERM');
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal((await httpsRequest(`${url}/readyz`, { ca, method: 'GET' })).status, 503, 'leaving the Service');
  const during = await httpsRequest(`${url}/healthz`, { ca, method: 'GET' });
  assert.equal(during.status, 200, 'still serving');
  assert.equal(during.headers.connection, 'close', 'keep-alive connections end with their answer');
  const { code } = await webhook.exited;
  assert.equal(code, 0);
  const stoppedAfter = Date.now() - signalledAt;
  assert.ok(stoppedAfter >= 600, 'served for the whole delay');
  assert.ok(stoppedAfter < 600 + 2_500, `exited ${stoppedAfter} ms after SIGTERM: held up by an idle connection`);
});

// --self-signed-certs as users start it: refused clearly instead of spinning.
const selfSigned = (env: Record<string, string> = {}) =>
  runBuiltEntry(['--port=0', '--address=127.0.0.1', '--self-signed-certs'], { env: { KUBERNETES_SERVICE_HOST: '', KUBERNETES_SERVICE_PORT: '', ...env } });

test('outside a cluster, --self-signed-certs exits 1 at once and says why', async () => {
  const { code, stdout, stderr } = await selfSigned();
  const output = stdout + stderr;
  assert.equal(code, 1);
  assert.match(output, /"level":"fatal"/, 'logged as fatal');
  assert.match(output, /KUBERNETES_SERVICE_HOST\/PORT are not set: run it in a cluster, or use --dev-certs/);
});

test('without a mounted token, --self-signed-certs exits 1 pointing at automountServiceAccountToken', async (t) => {
  if (existsSync(SERVICE_ACCOUNT_TOKEN_FILE)) return t.skip('this machine has a ServiceAccount token');
  const { code, stdout, stderr } = await selfSigned({ KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: '1' });
  assert.equal(code, 1);
  assert.match(stdout + stderr, /automountServiceAccountToken: true/);
});

test('--self-signed-certs with --dev-certs is a usage error', async () => {
  const { code, stdout, stderr } = await runBuiltEntry(['--port=0', '--address=127.0.0.1', '--self-signed-certs', '--dev-certs']);
  assert.equal(code, 2);
  assert.match(stdout + stderr, /flag --dev-certs: "true" is not valid; expected false with --self-signed-certs/);
});

test('a port in use ends it with one line naming the address and the flag, exit 1 as the sidecar', async (t) => {
  const { createServer } = await import('node:net');
  const taken = createServer().listen(0, '127.0.0.1');
  await new Promise((resolve) => taken.once('listening', resolve));
  t.after(() => taken.close());
  const port = (taken.address() as { port: number }).port;
  const directory = await mkdtemp(join(tmpdir(), 'esm-port-in-use-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const result = await runBuiltEntry(['--dev-certs', '--address=127.0.0.1', `--port=${port}`, `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`]);
  assert.equal(result.code, 1);
  assert.equal(
    result.stderr,
    `envoy-shutdown-manager: cannot serve on 127.0.0.1:${port}: the port is taken (another process, or another webhook replica on the host network, listens on it): choose another --port\n`,
  );
});
