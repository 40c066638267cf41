import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { mkdtemp, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, it } from 'node:test';
import { DevCertificatesError, ensureDevCertificates } from '../../src/certs/files.js';

describe('ensureDevCertificates', () => {
  let dir: string;

  beforeEach(async () => {
    dir = await mkdtemp(join(tmpdir(), 'esm-dev-certs-'));
  });
  afterEach(async () => {
    await rm(dir, { recursive: true, force: true });
  });

  it('creates the directory, a certificate for localhost and loopback, a 0600 key and the CA', async () => {
    const certFile = join(dir, 'nested', 'tls.crt');
    const keyFile = join(dir, 'nested', 'tls.key');
    const result = await ensureDevCertificates(certFile, keyFile);
    assert.deepEqual(result, { generated: true, caFile: join(dir, 'nested', 'ca.crt') });

    const leaf = new X509Certificate(await readFile(certFile));
    const ca = new X509Certificate(await readFile(join(dir, 'nested', 'ca.crt')));
    assert.ok(leaf.checkIssued(ca) && leaf.verify(ca.publicKey), 'the leaf is signed by the CA');
    assert.equal(leaf.checkHost('localhost'), 'localhost');
    assert.equal(leaf.checkIP('127.0.0.1'), '127.0.0.1');
    assert.ok(leaf.checkIP('::1') !== undefined, 'the leaf covers the IPv6 loopback');
    assert.ok(leaf.checkPrivateKey(createPrivateKey(await readFile(keyFile))), "the key file holds the leaf's private key");
    assert.equal((await stat(keyFile)).mode & 0o777, 0o600);
  });

  it('leaves an existing pair alone', async () => {
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    await ensureDevCertificates(certFile, keyFile);
    const [cert, key] = await Promise.all([readFile(certFile, 'utf8'), readFile(keyFile, 'utf8')]);

    assert.deepEqual(await ensureDevCertificates(certFile, keyFile), { generated: false });
    assert.equal(await readFile(certFile, 'utf8'), cert);
    assert.equal(await readFile(keyFile, 'utf8'), key);
  });

  it('does not touch user-provided files, even if they are not PEM', async () => {
    const certFile = join(dir, 'mine.crt');
    const keyFile = join(dir, 'mine.key');
    await writeFile(certFile, 'not a certificate');
    await writeFile(keyFile, 'not a key');
    assert.deepEqual(await ensureDevCertificates(certFile, keyFile), { generated: false });
    assert.equal(await readFile(certFile, 'utf8'), 'not a certificate');
  });

  it('refuses to replace half a pair, naming both files', async () => {
    const certFile = join(dir, 'tls.crt');
    const keyFile = join(dir, 'tls.key');
    await writeFile(certFile, 'a certificate without its key');
    await assert.rejects(ensureDevCertificates(certFile, keyFile), (error: unknown) => {
      assert.ok(error instanceof DevCertificatesError, 'a DevCertificatesError');
      assert.ok(error.message.includes(certFile) && error.message.includes(keyFile), error.message);
      return true;
    });
    assert.equal(await readFile(certFile, 'utf8'), 'a certificate without its key');
  });
});
