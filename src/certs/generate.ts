/**
 * A private CA and a serving certificate signed by it, for the admission webhook's TLS.
 *
 * The API server verifies the webhook against the caBundle of the MutatingWebhookConfiguration, so the
 * webhook needs a CA of its own (not a self-signed leaf): the CA goes into caBundle, the leaf into the
 * Secret mounted by the Deployment. cert-manager does the same in production; this module covers
 * `npm run certs`, `--dev-certs` and tests, where cert-manager is not available.
 *
 * ECDSA P-256 keeps generation in the millisecond range (tests generate many bundles) and is accepted
 * by the Go TLS stack of the API server and by node:tls.
 */
import { KeyObject, X509Certificate as NodeX509Certificate, randomBytes, webcrypto } from 'node:crypto';
import { isIP } from 'node:net';
import * as x509 from '@peculiar/x509';
import { UserFacingError } from '../errors.js';

export interface CertificateBundle {
  readonly caCertPem: string;
  readonly caKeyPem: string;
  readonly certPem: string;
  readonly keyPem: string;
  /** When the serving certificate expires (the CA is valid for exactly as long). */
  readonly notAfter: Date;
}

export interface CertificateRequest {
  readonly dnsNames: readonly string[];
  readonly ipAddresses?: readonly string[];
  /** Validity of the CA and of the serving certificate; default 365. */
  readonly validityDays?: number;
  /** Subject CN of the serving certificate; default the first DNS name (or IP). Clients match SANs, not CN. */
  readonly commonName?: string;
  /** The instant of issue; default now. Self-managed TLS passes its own clock so that renewal can be tested. */
  readonly now?: Date;
}

export const DEFAULT_VALIDITY_DAYS = 365;
/** 100 years: beyond that, a typo (days given in hours, say) is more likely than intent. */
export const MAX_VALIDITY_DAYS = 36_500;

/** A request that cannot produce a usable certificate; `field` names the offending input. */
export class CertificateRequestError extends UserFacingError {
  override readonly name = 'CertificateRequestError';

  constructor(
    readonly field: string,
    readonly value: string,
    readonly expected: string,
  ) {
    super(`${field}: ${JSON.stringify(value)} is not valid; expected ${expected}`);
  }
}

const DAY_MS = 86_400_000;
/** Backdating notBefore absorbs clock skew between this machine and the API server's nodes. */
const CLOCK_SKEW_MS = 5 * 60_000;

const EC_KEY: webcrypto.EcKeyGenParams = { name: 'ECDSA', namedCurve: 'P-256' };
const SIGNING: webcrypto.EcdsaParams = { name: 'ECDSA', hash: 'SHA-256' };

// RFC 1123 labels; a leading "*." is allowed because wildcard serving certificates are legitimate.
const DNS_LABEL = /^(?!-)[a-z0-9-]{1,63}(?<!-)$/i;

function checkDnsName(name: string): void {
  const bare = name.startsWith('*.') ? name.slice(2) : name;
  const valid = bare.length > 0 && bare.length <= 253 && bare.split('.').every((label) => DNS_LABEL.test(label));
  if (!valid) throw new CertificateRequestError('dnsNames', name, 'a DNS name such as my-svc.my-namespace.svc');
}

function checkRequest(request: CertificateRequest): number {
  const ips = request.ipAddresses ?? [];
  if (request.dnsNames.length === 0 && ips.length === 0) {
    throw new CertificateRequestError('dnsNames', '', 'at least one DNS name or IP address to put in the certificate');
  }
  request.dnsNames.forEach(checkDnsName);
  for (const ip of ips) {
    // The ASN.1 encoder only understands plain dotted IPv4 and colon-hex IPv6; reject anything else here
    // rather than emit a SAN that no client would match.
    if (isIP(ip) === 0 || (isIP(ip) === 6 && ip.includes('.'))) {
      throw new CertificateRequestError('ipAddresses', ip, 'an IPv4 address (10.0.0.1) or an IPv6 address without an embedded IPv4 part (::1)');
    }
  }
  const days = request.validityDays ?? DEFAULT_VALIDITY_DAYS;
  if (!Number.isInteger(days) || days < 1 || days > MAX_VALIDITY_DAYS) {
    throw new CertificateRequestError('validityDays', String(days), `a whole number of days from 1 to ${MAX_VALIDITY_DAYS}`);
  }
  return days;
}

/** A positive serial of 16 random bytes (RFC 5280 allows up to 20 and requires it to be positive). */
function serialNumber(): string {
  const bytes = randomBytes(16);
  bytes[0] = (bytes[0] as number) & 0x7f;
  return bytes.toString('hex');
}

async function newKeyPair(): Promise<webcrypto.CryptoKeyPair> {
  // Extractable: the private keys are written out as PKCS#8 for the Secret and the dev files.
  return (await webcrypto.subtle.generateKey(EC_KEY, true, ['sign', 'verify'])) as webcrypto.CryptoKeyPair;
}

function privateKeyPem(key: webcrypto.CryptoKey): string {
  return KeyObject.from(key).export({ type: 'pkcs8', format: 'pem' }) as string;
}

/** Generates a fresh CA and a serving certificate for the given names, signed by that CA. */
export async function generateCertificates(request: CertificateRequest): Promise<CertificateBundle> {
  const days = checkRequest(request);
  const ipAddresses = request.ipAddresses ?? [];
  // The library would otherwise fall back to a process-global provider; pass Node's explicitly.
  const crypto = webcrypto;
  const notBefore = new Date((request.now ?? new Date()).getTime() - CLOCK_SKEW_MS);
  const notAfter = new Date(notBefore.getTime() + CLOCK_SKEW_MS + days * DAY_MS);
  // Whole seconds: X.509 UTCTime has no fractions, and the returned notAfter must equal the certificate's.
  notAfter.setMilliseconds(0);
  notBefore.setMilliseconds(0);

  const caKeys = await newKeyPair();
  const leafKeys = await newKeyPair();
  const commonName = request.commonName ?? request.dnsNames[0] ?? ipAddresses[0] ?? 'envoy-shutdown-manager';
  // A unique CA name keeps clients from confusing CAs generated on different runs (issuer matching is by name).
  const caName = `CN=envoy-shutdown-manager CA ${serialNumber().slice(0, 8)}`;

  const ca = await x509.X509CertificateGenerator.createSelfSigned(
    {
      serialNumber: serialNumber(),
      name: caName,
      notBefore,
      notAfter,
      keys: caKeys,
      signingAlgorithm: SIGNING,
      extensions: [
        // pathLength 0: this CA signs serving certificates only, never another CA.
        new x509.BasicConstraintsExtension(true, 0, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.keyCertSign | x509.KeyUsageFlags.cRLSign, true),
        await x509.SubjectKeyIdentifierExtension.create(caKeys.publicKey, false, crypto),
      ],
    },
    crypto,
  );

  const names: x509.JsonGeneralName[] = [
    ...request.dnsNames.map((value) => ({ type: 'dns' as const, value })),
    ...ipAddresses.map((value) => ({ type: 'ip' as const, value })),
  ];
  const leaf = await x509.X509CertificateGenerator.create(
    {
      serialNumber: serialNumber(),
      subject: [{ CN: [commonName] }],
      issuer: ca.subject,
      notBefore,
      notAfter,
      publicKey: leafKeys.publicKey,
      signingKey: caKeys.privateKey,
      signingAlgorithm: SIGNING,
      extensions: [
        new x509.BasicConstraintsExtension(false, undefined, true),
        new x509.KeyUsagesExtension(x509.KeyUsageFlags.digitalSignature | x509.KeyUsageFlags.keyEncipherment, true),
        new x509.ExtendedKeyUsageExtension([x509.ExtendedKeyUsage.serverAuth], false),
        new x509.SubjectAlternativeNameExtension(names, false),
        await x509.SubjectKeyIdentifierExtension.create(leafKeys.publicKey, false, crypto),
        await x509.AuthorityKeyIdentifierExtension.create(caKeys.publicKey, false, crypto),
      ],
    },
    crypto,
  );

  const bundle: CertificateBundle = {
    caCertPem: ca.toString('pem') + '\n',
    caKeyPem: privateKeyPem(caKeys.privateKey),
    certPem: leaf.toString('pem') + '\n',
    keyPem: privateKeyPem(leafKeys.privateKey),
    notAfter: leaf.notAfter,
  };
  verifyBundle(bundle, request);
  return bundle;
}

/**
 * Cross-checks the result with Node's own X.509 parser (OpenSSL), so that an encoding problem shows up
 * here, with the name that failed, and not as an opaque handshake failure in the API server.
 */
function verifyBundle(bundle: CertificateBundle, request: CertificateRequest): void {
  const ca = new NodeX509Certificate(bundle.caCertPem);
  const leaf = new NodeX509Certificate(bundle.certPem);
  if (!leaf.checkIssued(ca) || !leaf.verify(ca.publicKey)) {
    throw new Error('generated serving certificate does not verify against the generated CA');
  }
  for (const name of request.dnsNames) {
    if (!name.startsWith('*.') && leaf.checkHost(name, { wildcards: false }) === undefined) {
      throw new Error(`generated serving certificate does not match DNS name ${name}`);
    }
  }
  for (const ip of request.ipAddresses ?? []) {
    if (leaf.checkIP(ip) === undefined) throw new Error(`generated serving certificate does not match IP address ${ip}`);
  }
}

/** The names the API server may use for a Service: it dials `<svc>.<ns>.svc`, the others cover in-cluster clients. */
export function serviceDnsNames(service: string, namespace: string): string[] {
  return [service, `${service}.${namespace}`, `${service}.${namespace}.svc`, `${service}.${namespace}.svc.cluster.local`];
}
