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
  return [caBundleFinding(input, chain), ...caExpiryFinding(input, chain), namesFinding(leaf, input), expiryFinding(leaf, input)];
}

/**
 * The CA of the caBundle that verifies the certificate expires too, on its own date (cert-manager's CA lives 10
 * years, `npm run certs`' one year): once it has, the API server refuses a certificate that is itself still valid.
 * None when no CA verifies it: caBundleFinding reports that.
 */
function caExpiryFinding(input: CertificateInput, chain: readonly X509Certificate[]): Finding[] {
  const bundle = input.caBundlePem === undefined ? [] : (parseBundle(input.caBundlePem) ?? []);
  const issuers = bundle.filter((ca) => verifiedBy(chain, [ca]));
  if (issuers.length === 0) return [];
  // With several (a CA being rotated), calls work until the last of them expires.
  const latest = Math.max(...issuers.map((ca) => Date.parse(ca.validTo)));
  const { status, text } = expiryText(new Date(latest), input.now);
  const fix = status === 'ok' ? undefined : `renew the CA and the caBundle: ${input.renewal}`;
  return [finding('webhook.ca-bundle-expiry', status, `the CA in the caBundle that verifies it ${text}`, fix)];
}

/** How long until `expires`, in the words of the expiry findings, and what that means. */
function expiryText(expires: Date, now: Date): { status: Finding['status']; text: string } {
  const daysLeft = Math.floor((expires.getTime() - now.getTime()) / DAY_MS);
  const when = expires.toISOString().slice(0, 10);
  if (daysLeft < 0) return { status: 'failure', text: `expired on ${when}: every call fails TLS` };
  if (daysLeft < EXPIRY_WARNING_DAYS) return { status: 'warning', text: `expires in ${daysLeft} days (${when}) and has not been renewed` };
  return { status: 'ok', text: `expires in ${daysLeft} days (${when})` };
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
  const { status, text } = expiryText(new Date(leaf.validTo), input.now);
  return finding('webhook.certificate-expiry', status, `the certificate ${text}`, status === 'ok' ? undefined : input.renewal);
}
