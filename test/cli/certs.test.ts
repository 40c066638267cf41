/** `npm run certs` as a user runs it: a child process, its files and its output. */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { mkdtemp, readFile, rm, stat } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, describe, it } from 'node:test';
import { exists } from '../../src/certs/files.js';
import { serviceDnsNames } from '../../src/certs/generate.js';
import { TLS_SECRET_NAME, WEBHOOK_CONFIGURATION_NAME } from '../../src/certs/names.js';
import { REPO_ROOT, runNode, type Finished } from '../support/process.js';

function runCli(args: readonly string[]): Promise<Finished> {
  return runNode(['--import', 'tsx', 'src/certs-main.ts', ...args], { cwd: REPO_ROOT, timeoutMs: 30_000 });
}

describe('certs CLI', () => {
  let dir: string;

  before(async () => {
    dir = await mkdtemp(join(tmpdir(), 'esm-certs-cli-'));
  });
  after(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('writes ca.crt, tls.crt and a 0600 tls.key for the service, and prints the caBundle', async () => {
    const out = join(dir, 'out');
    const run = await runCli(['--service', 'hook', '--namespace', 'ops', '--out', out, '--days', '30']);
    assert.equal(run.code, 0, run.stderr);

    const caPem = await readFile(join(out, 'ca.crt'), 'utf8');
    const leaf = new X509Certificate(await readFile(join(out, 'tls.crt')));
    const ca = new X509Certificate(caPem);
    assert.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey), 'the leaf is signed by the CA');
    for (const name of serviceDnsNames('hook', 'ops')) assert.equal(leaf.checkHost(name), name);
    const days = (new Date(leaf.validTo).getTime() - Date.now()) / 86_400_000;
    assert.ok(days > 29.9 && days <= 30.01, `valid for ${days} days`);
    assert.equal((await stat(join(out, 'tls.key'))).mode & 0o777, 0o600);
    assert.equal(await exists(join(out, 'ca.key')), false, 'the CA key is not kept by default');

    const line = run.stdout.split('\n').find((text) => text.startsWith('caBundle: '));
    assert.ok(line, run.stdout);
    assert.equal(Buffer.from(line.slice('caBundle: '.length), 'base64').toString('utf8'), caPem);
    assert.ok(run.stdout.includes(`kubectl -n ops create secret tls ${TLS_SECRET_NAME}`), run.stdout);
    assert.ok(run.stdout.includes(`kubectl patch mutatingwebhookconfiguration ${WEBHOOK_CONFIGURATION_NAME}`), 'prints the kubectl patch of the webhook configuration');
    // In the order the objects exist: the namespace and the webhook configuration first, then the Secret, then the patch.
    const order = ['kubectl apply -k manifests/base', 'create secret tls', 'kubectl patch mutatingwebhookconfiguration'].map((command) => run.stdout.indexOf(command));
    assert.ok(order.every((position, index) => position >= 0 && (index === 0 || position > (order[index - 1] ?? 0))), run.stdout);
  });

  it('keeps the CA key only when asked, with mode 0600', async () => {
    const out = join(dir, 'with-ca-key');
    const run = await runCli(['--out', out, '--keep-ca-key']);
    assert.equal(run.code, 0, run.stderr);
    assert.match(await readFile(join(out, 'ca.key'), 'utf8'), /^-----BEGIN PRIVATE KEY-----/);
    assert.equal((await stat(join(out, 'ca.key'))).mode & 0o777, 0o600);
    const leaf = new X509Certificate(await readFile(join(out, 'tls.crt')));
    assert.equal(leaf.checkHost('envoy-shutdown-manager.envoy-shutdown-manager.svc'), 'envoy-shutdown-manager.envoy-shutdown-manager.svc');
  });

  it('refuses to overwrite existing files without --force', async () => {
    const out = join(dir, 'twice');
    assert.equal((await runCli(['--out', out])).code, 0);
    const before = await readFile(join(out, 'ca.crt'), 'utf8');
    const again = await runCli(['--out', out]);
    assert.equal(again.code, 1);
    assert.match(again.stderr, /--force/);
    assert.equal(await readFile(join(out, 'ca.crt'), 'utf8'), before);
    assert.equal((await runCli(['--out', out, '--force'])).code, 0);
    assert.notEqual(await readFile(join(out, 'ca.crt'), 'utf8'), before);
  });

  const badRuns: [string[], string][] = [
    [['--sevice', 'x'], '--sevice'],
    [['--days', 'ten'], '--days'],
    [['--days', '0'], '--days'],
    [['--namespace', 'Not_A_Label'], '--namespace'],
    [['--ip', '300.1.1.1'], '--ip'],
    [['stray-positional'], 'stray-positional'],
  ];
  for (const [args, named] of badRuns) {
    it(`exits 2 naming ${named} for ${args.join(' ')}`, async () => {
      const out = join(dir, `bad-${named.replace(/\W/g, '')}`);
      const run = await runCli([...args, '--out', out]);
      assert.equal(run.code, 2);
      assert.ok(run.stderr.includes(named), run.stderr);
      assert.equal(await exists(out), false, 'nothing written');
    });
  }

  it('prints help and exits 0', async () => {
    const run = await runCli(['--help']);
    assert.equal(run.code, 0);
    for (const flag of ['--service', '--namespace', '--out', '--days', '--keep-ca-key']) {
      assert.ok(run.stdout.includes(flag), `${flag} in help`);
    }
  });
});
