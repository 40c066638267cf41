/**
 * What the self-signed certificate Secret holds, and whether it can be served:
 *
 *   tls.crt  serving certificate, for every name of serviceDnsNames()
 *   tls.key  its private key
 *   ca.crt   the trust bundle: the CA that signed tls.crt first, then the previous CA while it is still
 *            valid. The MutatingWebhookConfiguration's caBundle is exactly this text.
 *
 * No CA key is stored: every renewal makes a fresh CA (docs/operations/self-managed-tls.md#how-it-keeps-trust).
 */
import { createPrivateKey, X509Certificate } from 'node:crypto';
import { generateCertificates } from './generate.js';
import type { TlsMaterial } from './material.js';
import { CA_CERT_FILE, TLS_CERT_FILE, TLS_KEY_FILE } from './names.js';

export type StoredData = Readonly<Record<string, string>>;

/** Renew once less than this share of the validity is left: a third of a year leaves months to fix a failing renewal. */
export const RENEW_WHEN_LEFT = 1 / 3;
/** generateCertificates backdates by 5 minutes; a certificate starting later than this is a clock problem. */
const FUTURE_TOLERANCE_MS = 10 * 60_000;
const PEM_CERTIFICATE = /-----BEGIN CERTIFICATE-----[\s\S]*?-----END CERTIFICATE-----/g;

export interface ServingCertificate {
  readonly material: TlsMaterial;
  /** The CA of the bundle that signed it: kept trusted through the next renewal. */
  readonly issuerPem: string;
  /** ca.crt: what the caBundle must be. */
  readonly trustBundlePem: string;
  /** The earlier of the certificate's and its CA's expiry. */
  readonly notAfter: Date;
  readonly renewAt: Date;
  /** SHA-256 fingerprint of the serving certificate, as X509Certificate prints it. */
  readonly fingerprint: string;
}

/** The fields that identify a certificate in log lines. */
export function describeCertificate(certificate: ServingCertificate): Record<string, string> {
  return {
    fingerprint: certificate.fingerprint,
    notAfter: certificate.notAfter.toISOString(),
    renewAt: certificate.renewAt.toISOString(),
  };
}

export type Inspection =
  | { readonly status: 'valid'; readonly certificate: ServingCertificate }
  /** Still servable, but past renewAt. */
  | { readonly status: 'due'; readonly certificate: ServingCertificate; readonly reason: string }
  | { readonly status: 'unusable'; readonly reason: string };

class UnusableError extends Error {}

function required(data: StoredData, key: string): string {
  const value = data[key];
  if (value === undefined || value.trim() === '') throw new UnusableError(`${key} is missing`);
  return value;
}

function parseCertificate(pem: string, key: string): X509Certificate {
  try {
    return new X509Certificate(pem);
  } catch {
    throw new UnusableError(`${key} is not a PEM certificate`);
  }
}

export function splitPemCertificates(text: string): string[] {
  return [...text.matchAll(PEM_CERTIFICATE)].map(([pem]) => `${pem}\n`);
}

interface Parsed {
  readonly certPem: string;
  readonly keyPem: string;
  readonly trustPem: string;
  readonly leaf: X509Certificate;
  readonly issuer: { readonly pem: string; readonly certificate: X509Certificate };
}

function parseStored(data: StoredData): Parsed {
  const certPem = required(data, TLS_CERT_FILE);
  const keyPem = required(data, TLS_KEY_FILE);
  const trustPem = required(data, CA_CERT_FILE);
  const leaf = parseCertificate(certPem, TLS_CERT_FILE);
  const cas = splitPemCertificates(trustPem).map((pem) => ({ pem, certificate: parseCertificate(pem, CA_CERT_FILE) }));
  if (cas.length === 0) throw new UnusableError(`${CA_CERT_FILE} holds no PEM certificate`);
  let key;
  try {
    key = createPrivateKey(keyPem);
  } catch {
    throw new UnusableError(`${TLS_KEY_FILE} is not a PEM private key`);
  }
  if (!leaf.checkPrivateKey(key)) throw new UnusableError(`${TLS_KEY_FILE} is not the key of ${TLS_CERT_FILE}`);
  const issuer = cas.find(({ certificate }) => leaf.checkIssued(certificate) && leaf.verify(certificate.publicKey));
  if (issuer === undefined) throw new UnusableError(`${TLS_CERT_FILE} is not signed by any CA in ${CA_CERT_FILE}`);
  return { certPem, keyPem, trustPem, leaf, issuer };
}

/** Throws UnusableError when the certificate cannot be served for these names at this time. */
function checkServable(parsed: Parsed, dnsNames: readonly string[], now: Date): { notBefore: Date; notAfter: Date } {
  for (const name of dnsNames) {
    // SANs only, as the API server's Go TLS stack matches them.
    if (parsed.leaf.checkHost(name, { subject: 'never', wildcards: false }) === undefined) {
      throw new UnusableError(`${TLS_CERT_FILE} is not valid for ${name} (it names ${parsed.leaf.subjectAltName ?? 'nothing'})`);
    }
  }
  const notBefore = new Date(parsed.leaf.validFrom);
  const notAfter = new Date(Math.min(Date.parse(parsed.leaf.validTo), Date.parse(parsed.issuer.certificate.validTo)));
  if (notBefore.getTime() > now.getTime() + FUTURE_TOLERANCE_MS) {
    throw new UnusableError(`${TLS_CERT_FILE} is only valid from ${notBefore.toISOString()}; is a clock wrong?`);
  }
  if (notAfter.getTime() <= now.getTime()) throw new UnusableError(`${TLS_CERT_FILE} expired at ${notAfter.toISOString()}`);
  return { notBefore, notAfter };
}

/** Whether the Secret's data can be served for `dnsNames` at `now`, and whether it is due for renewal. */
export function inspectStoredCertificate(data: StoredData, dnsNames: readonly string[], now: Date): Inspection {
  let parsed: Parsed;
  let validity: { notBefore: Date; notAfter: Date };
  try {
    parsed = parseStored(data);
    validity = checkServable(parsed, dnsNames, now);
  } catch (error) {
    if (error instanceof UnusableError) return { status: 'unusable', reason: error.message };
    throw error;
  }
  const { notBefore, notAfter } = validity;
  const renewAt = new Date(notAfter.getTime() - (notAfter.getTime() - notBefore.getTime()) * RENEW_WHEN_LEFT);
  const certificate: ServingCertificate = {
    material: { cert: Buffer.from(parsed.certPem), key: Buffer.from(parsed.keyPem) },
    issuerPem: parsed.issuer.pem,
    trustBundlePem: parsed.trustPem,
    notAfter,
    renewAt,
    fingerprint: parsed.leaf.fingerprint256,
  };
  if (now.getTime() < renewAt.getTime()) return { status: 'valid', certificate };
  return { status: 'due', certificate, reason: `it expires at ${notAfter.toISOString()}, less than a third of its validity left` };
}

/** The new CA first, then the CAs to keep trusting that are still valid, each once. */
export function trustBundle(newCaPem: string, keepTrusting: readonly string[], now: Date): string {
  const seen = new Set<string>();
  const kept: string[] = [];
  for (const pem of [newCaPem, ...keepTrusting]) {
    const certificate = new X509Certificate(pem);
    if (seen.has(certificate.fingerprint256) || Date.parse(certificate.validTo) <= now.getTime()) continue;
    seen.add(certificate.fingerprint256);
    kept.push(pem.endsWith('\n') ? pem : `${pem}\n`);
  }
  return kept.join('');
}

export interface IssueRequest {
  readonly dnsNames: readonly string[];
  readonly commonName: string;
  readonly validityDays: number;
  readonly now: Date;
  /** CAs of certificates that may still be served somewhere (the previous Secret's, this replica's). */
  readonly keepTrusting: readonly string[];
}

/** A fresh CA and serving certificate, as Secret data and as what to serve. */
export async function issueStoredCertificate(request: IssueRequest): Promise<{ data: StoredData; certificate: ServingCertificate }> {
  const { dnsNames, commonName, validityDays, now } = request;
  const bundle = await generateCertificates({ dnsNames, commonName, validityDays, now });
  const data: StoredData = {
    [TLS_CERT_FILE]: bundle.certPem,
    [TLS_KEY_FILE]: bundle.keyPem,
    [CA_CERT_FILE]: trustBundle(bundle.caCertPem, request.keepTrusting, now),
  };
  const inspection = inspectStoredCertificate(data, dnsNames, now);
  // A fresh certificate that does not pass its own inspection is a bug here, not a runtime condition.
  if (inspection.status !== 'valid') throw new Error(`freshly issued certificate rejected: ${'reason' in inspection ? inspection.reason : ''}`);
  return { data, certificate: inspection.certificate };
}
