/** cert-manager rotates the serving certificate in place: new TLS connections must see it without a restart. */
import assert from 'node:assert/strict';
import { rename, writeFile } from 'node:fs/promises';
import { connect } from 'node:tls';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { localCertificates, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

let webhook: RunningWebhook;
before(async () => {
  webhook = await startTestWebhook([], 100);
});
after(() => webhook.close());

/** Fingerprint of the certificate a brand-new TLS connection is served (no verification: we only look). */
function servedFingerprint(): Promise<string> {
  const { port } = new URL(webhook.server.url);
  return new Promise((resolve, reject) => {
    const socket = connect({ host: '127.0.0.1', port: Number(port), rejectUnauthorized: false }, () => {
      const fingerprint = socket.getPeerCertificate().fingerprint256;
      socket.end();
      resolve(fingerprint);
    });
    socket.setTimeout(2_000, () => socket.destroy(new Error('TLS handshake timed out')));
    socket.on('error', reject);
  });
}

async function replaceFile(path: string, contents: string): Promise<void> {
  // As a Secret volume does: the new content appears at once, never half-written.
  await writeFile(`${path}.new`, contents);
  await rename(`${path}.new`, path);
}

async function waitForFingerprintChange(from: string, limitMs: number): Promise<string> {
  const deadline = Date.now() + limitMs;
  while (Date.now() < deadline) {
    const current = await servedFingerprint();
    if (current !== from) return current;
    await sleep(50);
  }
  return from;
}

test('a rotated certificate is served to new connections, a half-rotated pair is not', async () => {
  const original = await servedFingerprint();
  const next = await localCertificates();

  // Only the certificate changed: it does not match the key, so the old pair must stay in service.
  await replaceFile(webhook.certFile, next.certPem);
  assert.equal(await waitForFingerprintChange(original, 600), original);

  await replaceFile(webhook.keyFile, next.keyPem);
  const rotated = await waitForFingerprintChange(original, 5_000);
  assert.notEqual(rotated, original, 'the new certificate was never served');

  const expected = new (await import('node:crypto')).X509Certificate(next.certPem).fingerprint256;
  assert.equal(rotated, expected);
});
