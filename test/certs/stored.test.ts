/** The Secret's contents: when a certificate is valid, due for renewal or unusable, and which CAs stay trusted. */
import assert from 'node:assert/strict';
import { X509Certificate } from 'node:crypto';
import { describe, it } from 'node:test';
import { generateCertificates, serviceDnsNames } from '../../src/certs/generate.js';
import { inspectStoredCertificate, issueStoredCertificate, splitPemCertificates, trustBundle } from '../../src/certs/stored.js';

const DNS_NAMES = serviceDnsNames('envoy-shutdown-manager', 'envoy-shutdown-manager');
const DAY_MS = 86_400_000;
const NOW = new Date('2030-01-01T00:00:00Z');
const at = (days: number): Date => new Date(NOW.getTime() + days * DAY_MS);

async function issue(now = NOW, keepTrusting: readonly string[] = []) {
  return issueStoredCertificate({ dnsNames: DNS_NAMES, commonName: 'x.svc', validityDays: 90, now, keepTrusting });
}

describe('inspectStoredCertificate', () => {
  it('is valid for two thirds of the validity, then due, then unusable once expired', async () => {
    const { data } = await issue();
    assert.equal(inspectStoredCertificate(data, DNS_NAMES, at(59)).status, 'valid');
    const due = inspectStoredCertificate(data, DNS_NAMES, at(61));
    assert.equal(due.status, 'due');
    assert.match('reason' in due ? due.reason : '', /less than a third of its validity left/);
    const expired = inspectStoredCertificate(data, DNS_NAMES, at(91));
    assert.equal(expired.status, 'unusable');
    assert.match('reason' in expired ? expired.reason : '', /tls\.crt expired at 2030-04-01/);
  });

  it('refuses a certificate that only starts in the future (a wrong clock somewhere)', async () => {
    const { data } = await issue(at(1));
    const inspection = inspectStoredCertificate(data, DNS_NAMES, NOW);
    assert.equal(inspection.status, 'unusable');
    assert.match('reason' in inspection ? inspection.reason : '', /only valid from .*is a clock wrong\?/);
  });

  it('names what is wrong with a Secret it cannot use', async () => {
    const { data } = await issue();
    const other = await generateCertificates({ dnsNames: DNS_NAMES, now: NOW });
    const cases: [Record<string, string>, RegExp][] = [
      [{ ...data, 'tls.key': '' }, /tls\.key is missing/],
      [{ ...data, 'ca.crt': 'garbage' }, /ca\.crt holds no PEM certificate/],
      [{ ...data, 'ca.crt': other.caCertPem }, /tls\.crt is not signed by any CA in ca\.crt/],
      [{ ...data, 'tls.key': other.keyPem }, /tls\.key is not the key of tls\.crt/],
    ];
    for (const [broken, reason] of cases) {
      const inspection = inspectStoredCertificate(broken, DNS_NAMES, NOW);
      assert.equal(inspection.status, 'unusable');
      assert.match('reason' in inspection ? inspection.reason : '', reason);
    }
    const renamed = inspectStoredCertificate(data, ['other.example.svc'], NOW);
    assert.match('reason' in renamed ? renamed.reason : '', /not valid for other\.example\.svc \(it names DNS:envoy-shutdown-manager/);
  });
});

describe('trust bundle', () => {
  it('puts the new CA first, keeps the previous one while valid, once, and drops expired ones', async () => {
    const old = await issue(at(-100)); // expired by NOW
    const previous = await issue(at(-70));
    const previousCa = splitPemCertificates(previous.data['ca.crt'] ?? '')[0] as string;
    const expiredCa = splitPemCertificates(old.data['ca.crt'] ?? '')[0] as string;
    const next = await issue(NOW, [previousCa, previousCa, expiredCa]);

    const bundle = splitPemCertificates(next.data['ca.crt'] ?? '');
    assert.equal(bundle.length, 2);
    assert.ok(new X509Certificate(next.certificate.material.cert).checkIssued(new X509Certificate(bundle[0] as string)), 'the new leaf is issued by the first CA of the bundle');
    assert.equal(bundle[1], previousCa);
    assert.equal(next.certificate.trustBundlePem, next.data['ca.crt']);
  });

  it('is the new CA alone when there is nothing to keep', async () => {
    const { caCertPem } = await generateCertificates({ dnsNames: DNS_NAMES });
    assert.equal(trustBundle(caCertPem, [], new Date()), caCertPem);
  });
});
