/** The webhook as users start it: the built entry point in a child process. */
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { Agent, get } from 'node:https';
import { once } from 'node:events';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { test } from 'node:test';
import { httpsRequest } from './support.js';
import { BUILT_MAIN } from '../support/sidecar-process.js';
import { cleanEnvironment } from '../support/env.js';

test('--help lists every flag with its default and environment variable', () => {
  const result = spawnSync(process.execPath, [BUILT_MAIN, '--help'], { encoding: 'utf8', timeout: 10_000, env: cleanEnvironment() });
  assert.equal(result.status, 0, result.stderr);
  assert.match(result.stdout, /--check-delay\n.*\n\s+env SHUTDOWN_MANAGER_CHECK_DELAY, default 1m/);
  assert.match(result.stdout, /--termination-grace-period\n.*\n\s+env SHUTDOWN_MANAGER_TERMINATION_GRACE_PERIOD, default 300/);
});

test('a bad flag value exits 2 naming the flag', () => {
  const result = spawnSync(process.execPath, [BUILT_MAIN, '--check-interval=often'], { encoding: 'utf8', timeout: 10_000, env: cleanEnvironment() });
  assert.equal(result.status, 2);
  assert.match(result.stderr, /flag --check-interval: "often" is not valid; expected a Go duration/);
});

test('an unknown mode exits 2', () => {
  const result = spawnSync(process.execPath, [BUILT_MAIN, 'mode=proxy'], { encoding: 'utf8', timeout: 10_000, env: cleanEnvironment() });
  assert.equal(result.status, 2);
  assert.match(result.stderr, /unknown mode=proxy; expected mode=webhook \(the default\) or mode=sidecar/);
});

test('missing certificates are a clear error', () => {
  const result = spawnSync(process.execPath, [BUILT_MAIN, '--port=0', '--tls-cert-file=/nonexistent/tls.crt'], {
    encoding: 'utf8',
    timeout: 10_000,
    env: cleanEnvironment(),
  });
  assert.equal(result.status, 1);
  assert.match(result.stderr, /cannot read the certificate \(--tls-cert-file\) \/nonexistent\/tls.crt: ENOENT/);
});

test('with --dev-certs it generates certificates, serves HTTPS; on SIGTERM it fails /readyz, keeps serving for the delay, then exits 0', async (t) => {
  const directory = await mkdtemp(join(tmpdir(), 'esm-process-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  const child = spawn(
    process.execPath,
    [BUILT_MAIN, '--dev-certs', '--address=127.0.0.1', '--port=0', '--shutdown-delay=600ms', `--tls-cert-file=${directory}/tls.crt`, `--tls-key-file=${directory}/tls.key`],
    { stdio: ['ignore', 'pipe', 'inherit'], env: cleanEnvironment() },
  );
  t.after(() => child.kill('SIGKILL'));

  const lines = createInterface({ input: child.stdout });
  let url: string | undefined;
  for await (const line of lines) {
    const entry = JSON.parse(line) as { msg: string; url?: string };
    if (entry.msg === 'webhook listening') {
      url = entry.url;
      break;
    }
  }
  assert.ok(url?.startsWith('https://127.0.0.1:'), `no listening line, got ${url}`);
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
  child.kill('SIGTERM');
  const exited = once(child, 'exit');
  await new Promise((resolve) => setTimeout(resolve, 150));
  assert.equal((await httpsRequest(`${url}/readyz`, { ca, method: 'GET' })).status, 503, 'leaving the Service');
  const during = await httpsRequest(`${url}/healthz`, { ca, method: 'GET' });
  assert.equal(during.status, 200, 'still serving');
  assert.equal(during.headers.connection, 'close', 'keep-alive connections end with their answer');
  const [code] = await exited;
  assert.equal(code, 0);
  const stoppedAfter = Date.now() - signalledAt;
  assert.ok(stoppedAfter >= 600, 'served for the whole delay');
  assert.ok(stoppedAfter < 600 + 2_500, `exited ${stoppedAfter} ms after SIGTERM: held up by an idle connection`);
});
