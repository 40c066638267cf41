import assert from 'node:assert/strict';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import { once } from 'node:events';
import type { AddressInfo } from 'node:net';
import { after, before, describe, it } from 'node:test';
import * as tls from 'node:tls';
import {
  CertificateRequestError,
  generateCertificates,
  serviceDnsNames,
  type CertificateBundle,
} from '../../src/certs/generate.js';

const SERVICE_NAMES = serviceDnsNames('envoy-shutdown-manager', 'envoy-shutdown-manager');

/** A TLS server on loopback that answers "ok" to anyone who completes the handshake. */
async function startServer(bundle: CertificateBundle): Promise<{ port: number; close: () => Promise<void> }> {
  const server = tls.createServer({ cert: bundle.certPem, key: bundle.keyPem }, (socket) => {
    socket.end('ok');
  });
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  return {
    port,
    close: () =>
      new Promise<void>((resolve, reject) => {
        server.close((error) => (error ? reject(error) : resolve()));
      }),
  };
}

/** Connects, verifies with the given CA and identity check, and returns what the server sent. */
async function fetchOverTls(port: number, options: tls.ConnectionOptions): Promise<string> {
  const socket = tls.connect({ host: '127.0.0.1', port, ...options });
  try {
    await once(socket, 'secureConnect');
    socket.setEncoding('utf8');
    let received = '';
    for await (const chunk of socket) received += chunk as string;
    return received;
  } finally {
    socket.destroy();
  }
}

describe('generateCertificates', () => {
  let bundle: CertificateBundle;
  let server: { port: number; close: () => Promise<void> };

  before(async () => {
    bundle = await generateCertificates({ dnsNames: [...SERVICE_NAMES, 'localhost'], ipAddresses: ['127.0.0.1', '::1'] });
    server = await startServer(bundle);
  });
  after(async () => {
    await server.close();
  });

  it('writes PKCS#8 private keys', () => {
    for (const pem of [bundle.keyPem, bundle.caKeyPem]) {
      assert.match(pem, /^-----BEGIN PRIVATE KEY-----\n/);
      assert.equal(createPrivateKey(pem).asymmetricKeyType, 'ec');
    }
  });

  it('makes a CA that may sign and a leaf that may not', () => {
    const ca = new X509Certificate(bundle.caCertPem);
    const leaf = new X509Certificate(bundle.certPem);
    assert.equal(ca.ca, true);
    assert.equal(leaf.ca, false);
    assert.ok(leaf.checkIssued(ca), 'the leaf is issued by the CA');
    assert.ok(leaf.verify(ca.publicKey), "the leaf's signature checks with the CA's key");
    assert.deepEqual(leaf.keyUsage, ['1.3.6.1.5.5.7.3.1'], 'extended key usage is serverAuth only');
  });

  it('puts every DNS name and IP address into the SANs', () => {
    const sans = new X509Certificate(bundle.certPem).subjectAltName ?? '';
    for (const name of SERVICE_NAMES) assert.ok(sans.includes(`DNS:${name}`), `${name} in ${sans}`);
    assert.ok(sans.includes('DNS:localhost'), 'localhost is a SAN');
    assert.ok(sans.includes('IP Address:127.0.0.1'), '127.0.0.1 is a SAN');
    assert.match(sans, /IP Address:(0:0:0:0:0:0:0:1|::1)/);
  });

  it('reports notAfter as the certificate has it, about a year ahead by default', () => {
    const leaf = new X509Certificate(bundle.certPem);
    assert.equal(new Date(leaf.validTo).getTime(), bundle.notAfter.getTime());
    const days = (bundle.notAfter.getTime() - Date.now()) / 86_400_000;
    assert.ok(days > 364 && days <= 365.01, `valid for ${days} days`);
    assert.ok(new Date(leaf.validFrom).getTime() <= Date.now(), 'valid already');
  });

  it('is accepted by node:tls for the service DNS name', async () => {
    const serviceName = 'envoy-shutdown-manager.envoy-shutdown-manager.svc';
    const checked: string[] = [];
    const reply = await fetchOverTls(server.port, {
      ca: bundle.caCertPem,
      servername: serviceName,
      checkServerIdentity: (_host, cert) => {
        checked.push(serviceName);
        // The socket dials 127.0.0.1; check the name the API server would use instead.
        return tls.checkServerIdentity(serviceName, cert);
      },
    });
    assert.equal(reply, 'ok');
    assert.deepEqual(checked, [serviceName]);
  });

  it('is accepted by node:tls for 127.0.0.1 with the default identity check', async () => {
    assert.equal(await fetchOverTls(server.port, { ca: bundle.caCertPem }), 'ok');
  });

  it('fails the identity check for a name it does not carry', () => {
    const leaf = new X509Certificate(bundle.certPem);
    const error = tls.checkServerIdentity('other.example.com', {
      subject: { CN: 'localhost' },
      subjectaltname: leaf.subjectAltName,
    } as tls.PeerCertificate);
    assert.ok(error instanceof Error, 'an Error');
  });

  it('is rejected by a client that trusts another CA', async () => {
    const other = await generateCertificates({ dnsNames: ['localhost'] });
    await assert.rejects(fetchOverTls(server.port, { ca: other.caCertPem }), (error: NodeJS.ErrnoException) => {
      assert.match(error.code ?? '', /UNABLE_TO_VERIFY_LEAF_SIGNATURE|UNABLE_TO_GET_ISSUER_CERT_LOCALLY/);
      return true;
    });
  });

  it('is rejected when the server name is not in the certificate', async () => {
    await assert.rejects(
      fetchOverTls(server.port, { ca: bundle.caCertPem, servername: 'evil.example.com', checkServerIdentity: tls.checkServerIdentity }),
      (error: NodeJS.ErrnoException) => {
        assert.equal(error.code, 'ERR_TLS_CERT_ALTNAME_INVALID');
        return true;
      },
    );
  });

  it('uses a new CA every time', async () => {
    const again = await generateCertificates({ dnsNames: ['localhost'] });
    assert.notEqual(again.caCertPem, bundle.caCertPem);
    assert.notEqual(new X509Certificate(again.caCertPem).subject, new X509Certificate(bundle.caCertPem).subject);
  });
});

describe('generateCertificates options and errors', () => {
  it('honours validityDays and commonName', async () => {
    const bundle = await generateCertificates({ dnsNames: ['a.example'], validityDays: 7, commonName: 'webhook' });
    const days = (bundle.notAfter.getTime() - Date.now()) / 86_400_000;
    assert.ok(days > 6.9 && days <= 7.01, `valid for ${days} days`);
    assert.match(new X509Certificate(bundle.certPem).subject, /CN=webhook/);
    assert.ok(new Date(new X509Certificate(bundle.caCertPem).validTo).getTime() >= bundle.notAfter.getTime(), 'CA outlives leaf');
  });

  it('accepts an IP-only certificate', async () => {
    const bundle = await generateCertificates({ dnsNames: [], ipAddresses: ['10.96.0.10'] });
    assert.equal(new X509Certificate(bundle.certPem).checkIP('10.96.0.10'), '10.96.0.10');
  });

  const bad: [string, Parameters<typeof generateCertificates>[0], string][] = [
    ['no names at all', { dnsNames: [] }, 'dnsNames'],
    ['a DNS name with an underscore', { dnsNames: ['bad_name.svc'] }, 'dnsNames'],
    ['a DNS label over 63 characters', { dnsNames: [`${'a'.repeat(64)}.svc`] }, 'dnsNames'],
    ['an address that is not an IP', { dnsNames: ['a'], ipAddresses: ['1.2.3'] }, 'ipAddresses'],
    ['zero days', { dnsNames: ['a'], validityDays: 0 }, 'validityDays'],
    ['fractional days', { dnsNames: ['a'], validityDays: 1.5 }, 'validityDays'],
  ];
  for (const [what, request, field] of bad) {
    it(`rejects ${what}, naming ${field}`, async () => {
      await assert.rejects(generateCertificates(request), (error: unknown) => {
        assert.ok(error instanceof CertificateRequestError, 'a CertificateRequestError');
        assert.equal(error.field, field);
        assert.match(error.message, new RegExp(`^${field}: `));
        return true;
      });
    });
  }
});

describe('serviceDnsNames', () => {
  it('lists the four names a Service answers to, shortest first', () => {
    assert.deepEqual(serviceDnsNames('webhook', 'system'), [
      'webhook',
      'webhook.system',
      'webhook.system.svc',
      'webhook.system.svc.cluster.local',
    ]);
  });
});
