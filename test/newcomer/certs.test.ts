/**
 * `npm run certs` and `npm start` in either order, with their default paths: the cluster certificates in
 * certs/, the development ones in certs/dev/, neither in the other's way. Each order runs in a fresh
 * directory standing for a fresh clone (dist/ and dev.env linked in), with the exact node command line
 * that the npm script runs once it has compiled, so that the checkout's own certs/ is never touched.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, symlink } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { REPO_ROOT, runNode, startNode, WEBHOOK_LISTENING } from '../support/process.js';
import { httpsRequest } from '../support/webhook.js';
import { within } from '../support/wait.js';
import { packageScripts, words } from './support.js';

const COMPILE_THEN_EXEC = /^npm run -s build && exec node (.+)$/;

/** The node arguments `npm run NAME` ends with: the script must compile, then exec node. */
function nodeArgsOf(name: string): string[] {
  const script = packageScripts()[name] ?? '';
  const match = COMPILE_THEN_EXEC.exec(script);
  assert.ok(match?.[1] !== undefined, `package.json scripts.${name} is "npm run -s build && exec node …": ${script}`);
  return words(match[1]);
}

/** A directory laid out like a fresh clone for what the scripts read: dist/ and dev.env. */
async function freshClone(t: TestContext): Promise<string> {
  const directory = await mkdtemp(join(tmpdir(), 'esm-clone-'));
  t.after(() => rm(directory, { recursive: true, force: true }));
  await symlink(join(REPO_ROOT, 'dist'), join(directory, 'dist'));
  await symlink(join(REPO_ROOT, 'dev.env'), join(directory, 'dev.env'));
  return directory;
}

async function runCerts(cwd: string): Promise<void> {
  const result = await runNode(nodeArgsOf('certs'), { cwd, timeoutMs: 30_000 });
  assert.equal(result.code, 0, `npm run certs: ${result.stderr}`);
}

/** npm start's command (plus --port=0) until it listens; answers /healthz trusting certs/dev/ca.crt; stops it. */
async function runStart(cwd: string): Promise<void> {
  const webhook = await startNode([...nodeArgsOf('start'), '--port=0'], { cwd, ready: WEBHOOK_LISTENING, readyTimeoutMs: 30_000 });
  try {
    const url = String(webhook.ready['url']);
    const health = await httpsRequest(`${url}/healthz`, { ca: await readFile(join(cwd, 'certs/dev/ca.crt'), 'utf8'), method: 'GET' });
    assert.equal(health.status, 200);
    webhook.child.kill('SIGTERM');
    assert.equal((await within(webhook.exited, 5_000, 'the webhook exiting')).code, 0, webhook.stderr());
  } finally {
    await webhook.kill();
  }
}

async function caOf(file: string): Promise<X509Certificate> {
  return new X509Certificate(await readFile(file));
}

/** Both sets exist, apart, each certificate issued by its own CA. */
async function assertBothSets(cwd: string): Promise<void> {
  for (const file of ['certs/ca.crt', 'certs/tls.crt', 'certs/tls.key', 'certs/dev/ca.crt', 'certs/dev/tls.crt', 'certs/dev/tls.key']) {
    await stat(join(cwd, file)).catch(() => assert.fail(`${file} is missing`));
  }
  const [clusterCa, devCa] = [await caOf(join(cwd, 'certs/ca.crt')), await caOf(join(cwd, 'certs/dev/ca.crt'))];
  assert.notEqual(clusterCa.fingerprint256, devCa.fingerprint256);
  assert.ok((await caOf(join(cwd, 'certs/tls.crt'))).checkIssued(clusterCa), 'certs/tls.crt is from certs/ca.crt');
  assert.ok((await caOf(join(cwd, 'certs/dev/tls.crt'))).checkIssued(devCa), 'certs/dev/tls.crt is from certs/dev/ca.crt');
  assert.ok((await caOf(join(cwd, 'certs/dev/tls.crt'))).checkIP('127.0.0.1'), 'the CA covers 127.0.0.1');
}

describe('npm run certs and npm start, in either order', () => {
  test('npm run certs, then npm start', { timeout: 60_000 }, async (t) => {
    const cwd = await freshClone(t);
    await runCerts(cwd);
    await runStart(cwd);
    await assertBothSets(cwd);
  });

  test('npm start, then npm run certs; then npm start again reuses its certificates', { timeout: 60_000 }, async (t) => {
    const cwd = await freshClone(t);
    await runStart(cwd);
    const devCa = await readFile(join(cwd, 'certs/dev/ca.crt'), 'utf8');
    await runCerts(cwd);
    await assertBothSets(cwd);
    await runStart(cwd);
    assert.equal(await readFile(join(cwd, 'certs/dev/ca.crt'), 'utf8'), devCa, 'development certificates are kept');
  });
});

test('git ignores both sets of certificates and tsc -b state', (t) => {
  const paths = ['certs/ca.crt', 'certs/tls.crt', 'certs/tls.key', 'certs/dev/ca.crt', 'certs/dev/tls.crt', 'certs/dev/tls.key', 'tsconfig.build.tsbuildinfo'];
  const result = spawnSync('git', ['check-ignore', '--no-index', ...paths], { cwd: REPO_ROOT, encoding: 'utf8' });
  if (result.error !== undefined || result.status === 128) return t.skip('not a git checkout');
  assert.deepEqual(result.stdout.trim().split('\n').sort(), [...paths].sort(), result.stderr);
});
