/** --self-signed-certs as users start it: the built entry point refuses clearly instead of spinning. */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { existsSync } from 'node:fs';
import { test } from 'node:test';
import { fileURLToPath } from 'node:url';
import { SERVICE_ACCOUNT_TOKEN_FILE } from '../../src/kube/client.js';

const ENTRY = fileURLToPath(new URL('../../dist/main.js', import.meta.url));

function run(args: readonly string[], env: NodeJS.ProcessEnv): { status: number | null; output: string } {
  const { KUBERNETES_SERVICE_HOST: _host, KUBERNETES_SERVICE_PORT: _port, ...inherited } = process.env;
  const result = spawnSync(process.execPath, [ENTRY, '--port=0', '--address=127.0.0.1', ...args], {
    encoding: 'utf8',
    timeout: 10_000,
    env: { ...inherited, ...env },
  });
  return { status: result.status, output: result.stdout + result.stderr };
}

test('outside a cluster, --self-signed-certs exits 1 at once and says why', () => {
  const { status, output } = run(['--self-signed-certs'], {});
  assert.equal(status, 1);
  assert.match(output, /"level":"fatal"/, 'logged as fatal');
  assert.match(output, /KUBERNETES_SERVICE_HOST\/PORT are not set: run it in a cluster, or use --dev-certs/);
});

test('without a mounted token, --self-signed-certs exits 1 pointing at automountServiceAccountToken', (t) => {
  if (existsSync(SERVICE_ACCOUNT_TOKEN_FILE)) return t.skip('this machine has a ServiceAccount token');
  const { status, output } = run(['--self-signed-certs'], { KUBERNETES_SERVICE_HOST: '127.0.0.1', KUBERNETES_SERVICE_PORT: '1' });
  assert.equal(status, 1);
  assert.match(output, /automountServiceAccountToken: true/);
});

test('--self-signed-certs with --dev-certs is a usage error', () => {
  const { status, output } = run(['--self-signed-certs', '--dev-certs'], {});
  assert.equal(status, 2);
  assert.match(output, /flag --dev-certs: "true" is not valid; expected false with --self-signed-certs/);
});
