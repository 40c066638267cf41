/**
 * cert-manager rotates the serving certificate in place: new TLS connections must see it without a restart, and
 * the expiry the alerts read (shutdown_manager_webhook_certificate_expiry_timestamp_seconds) must be the new one's.
 */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { readFile, rename, writeFile } from 'node:fs/promises';
import { connect } from 'node:tls';
import { after, before, test } from 'node:test';
import { setTimeout as sleep } from 'node:timers/promises';
import { generateCertificates } from '../../src/certs/generate.js';
import { sampleOf } from '../support/prometheus.js';
import { httpsRequest, localCertificates, startTestWebhook, type RunningWebhook } from '../support/webhook.js';

const EXPIRY = 'shutdown_manager_webhook_certificate_expiry_timestamp_seconds';

let webhook: RunningWebhook;
/** The CA of the certificate served now: the first test rotates it. */
let trustedCa = '';
before(async () => {
  webhook = await startTestWebhook([], 100);
  trustedCa = webhook.ca;
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

  const expected = new X509Certificate(next.certPem).fingerprint256;
  assert.equal(rotated, expected);
  trustedCa = next.caCertPem;
});

/** The expiry the webhook exports, read over a connection that trusts `ca`. */
async function exportedExpiry(ca: string): Promise<number | undefined> {
  const answer = await httpsRequest(`${webhook.server.url}/metrics`, { ca, method: 'GET' });
  assert.equal(answer.status, 200);
  return sampleOf(answer.text, EXPIRY);
}

const notAfterSeconds = (pem: string): number => Date.parse(new X509Certificate(pem).validTo) / 1000;

test('the expiry exported is the notAfter of the certificate served, before and after a rotation', async () => {
  const servedNow = await readFile(webhook.certFile, 'utf8');
  assert.equal(await exportedExpiry(trustedCa), notAfterSeconds(servedNow));

  // Another validity than the served one's (2 days), so that a stale value cannot pass for the new one.
  const next = await generateCertificates({ dnsNames: ['localhost'], ipAddresses: ['127.0.0.1'], validityDays: 9 });
  assert.notEqual(notAfterSeconds(next.certPem), notAfterSeconds(servedNow));
  await replaceFile(webhook.keyFile, next.keyPem);
  await replaceFile(webhook.certFile, next.certPem);
  const deadline = Date.now() + 5_000;
  let exported: number | undefined;
  while (Date.now() < deadline) {
    exported = await exportedExpiry(next.caCertPem).catch(() => undefined);
    if (exported === notAfterSeconds(next.certPem)) break;
    await sleep(50);
  }
  assert.equal(exported, notAfterSeconds(next.certPem), 'the expiry of the rotated certificate');
});
