/**
 * The serving certificate against the caBundle the API server trusts: does the bundle verify it, does it name
 * the Service, when does it expire. node:crypto's X509Certificate only; `now` is a parameter.
 */
import { X509Certificate } from 'node:crypto';
import type { Finding } from './report.js';

const DAY_MS = 86_400_000;
/** cert-manager renews 30 days ahead (manifests/cert-manager.yaml): closer than that, renewal is not happening. */
export const EXPIRY_WARNING_DAYS = 30;

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** Every certificate in a PEM bundle; undefined when one of them does not parse. */
export function parseBundle(pem: string): X509Certificate[] | undefined {
  try {
    return (pem.match(PEM_BLOCK) ?? []).map((block) => new X509Certificate(block));
  } catch {
    return undefined;
  }
}

/** Whether a CA of the bundle signed the leaf, directly or through the intermediates sent with it. */
export function verifiedBy(chain: readonly X509Certificate[], bundle: readonly X509Certificate[]): boolean {
  return chain.some((certificate) => bundle.some((ca) => certificate.checkIssued(ca) && certificate.verify(ca.publicKey)));
}

export interface CertificateInput {
  readonly certificatePem: string | undefined;
  readonly caBundlePem: string | undefined;
  /** Where the certificate is, for messages: `Secret envoy-shutdown-manager/envoy-shutdown-manager-tls`. */
  readonly secretRef: string;
  /** `<service>.<namespace>.svc`: the name the API server dials. */
  readonly serviceHost: string;
  readonly now: Date;
  /** How to renew, for the fixes: depends on who manages the certificate. */
  readonly renewal: string;
}

function finding(check: string, status: Finding['status'], message: string, fix?: string): Finding {
  return { check, section: 'webhook', status, message, ...(fix === undefined ? {} : { fix }) };
}

export function certificateFindings(input: CertificateInput): Finding[] {
  const { secretRef, renewal } = input;
  if (input.certificatePem === undefined) {
    return [finding('webhook.certificate', 'failure', `${secretRef} has no tls.crt: the webhook has nothing to serve`, renewal)];
  }
  const chain = parseBundle(input.certificatePem);
  const leaf = chain?.[0];
  if (chain === undefined || leaf === undefined) {
    return [finding('webhook.certificate', 'failure', `tls.crt of ${secretRef} is not a PEM certificate`, renewal)];
  }
  return [caBundleFinding(input, chain), namesFinding(leaf, input), expiryFinding(leaf, input)];
}

function caBundleFinding(input: CertificateInput, chain: readonly X509Certificate[]): Finding {
  const bundle = input.caBundlePem === undefined ? [] : (parseBundle(input.caBundlePem) ?? []);
  if (bundle.length === 0) {
    return finding('webhook.ca-bundle', 'failure', 'the webhook configuration has no caBundle: the API server cannot call the webhook, and pods are admitted without it', input.renewal);
  }
  if (!verifiedBy(chain, bundle)) {
    return finding(
      'webhook.ca-bundle',
      'failure',
      `the caBundle does not verify the certificate in ${input.secretRef}: every call fails TLS, and pods are admitted without the sidecar`,
      input.renewal,
    );
  }
  return finding('webhook.ca-bundle', 'ok', `the caBundle verifies the certificate in ${input.secretRef}`);
}

function namesFinding(leaf: X509Certificate, input: CertificateInput): Finding {
  if (leaf.checkHost(input.serviceHost, { subject: 'never' }) !== undefined) {
    return finding('webhook.certificate-names', 'ok', `the certificate names ${input.serviceHost}`);
  }
  return finding(
    'webhook.certificate-names',
    'failure',
    `the certificate does not name ${input.serviceHost} (it names ${leaf.subjectAltName ?? 'nothing'}): the API server refuses it`,
    `issue it for ${input.serviceHost}: ${input.renewal}`,
  );
}

function expiryFinding(leaf: X509Certificate, input: CertificateInput): Finding {
  const expires = new Date(leaf.validTo);
  const daysLeft = Math.floor((expires.getTime() - input.now.getTime()) / DAY_MS);
  const when = expires.toISOString().slice(0, 10);
  if (daysLeft < 0) {
    return finding('webhook.certificate-expiry', 'failure', `the certificate expired on ${when}: every call fails TLS`, input.renewal);
  }
  if (daysLeft < EXPIRY_WARNING_DAYS) {
    return finding('webhook.certificate-expiry', 'warning', `the certificate expires in ${daysLeft} days (${when}) and has not been renewed`, input.renewal);
  }
  return finding('webhook.certificate-expiry', 'ok', `the certificate expires in ${daysLeft} days (${when})`);
}
