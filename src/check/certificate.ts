/**
 * The webhook's TLS as far as check can see it without reading a Secret: the caBundle the API server trusts (in the
 * MutatingWebhookConfiguration) and, with cert-manager, the Certificate object that describes the serving certificate
 * (its names, its notAfter, whether it is issued). The serving certificate itself sits in a Secret next to its
 * private key, and RBAC cannot grant tls.crt without tls.key: what only the Secret shows (whether the caBundle
 * verifies the certificate; with no Certificate object, its names and expiry) is reported as not observed, never as
 * ok. Self-managed TLS publishes the certificate it serves on the configuration (annotation
 * shutdown-manager.io/serving-certificate, src/certs/reconcile.ts): with it, those are judged on what the webhook says
 * it serves, and the findings say that this is its word, not a TLS handshake. node:crypto's X509Certificate only;
 * `now` is a parameter.
 */
import { X509Certificate } from 'node:crypto';
import { CONFIGURATION_ANNOTATIONS } from '../config/annotation-names.js';
import type { Finding } from './finding.js';

const SERVING_CERTIFICATE = CONFIGURATION_ANNOTATIONS.servingCertificate;
/** How every finding judged on the published certificate names it: the webhook's own word, not a handshake. */
const PUBLISHED = `the certificate the webhook says it serves (annotation ${SERVING_CERTIFICATE}, which the webhook writes itself: not a TLS handshake)`;

const DAY_MS = 86_400_000;
/** cert-manager renews 30 days ahead (manifests/cert-manager.yaml): closer than that, renewal is not happening. */
export const EXPIRY_WARNING_DAYS = 30;

const PEM_BLOCK = /-----BEGIN CERTIFICATE-----[\s\S]+?-----END CERTIFICATE-----/g;

/** The webhook's own gauge of the certificate it serves, and its alert: where to watch what check cannot see. */
const SERVED_EXPIRY_METRIC = 'shutdown_manager_webhook_certificate_expiry_timestamp_seconds';
const EXPIRY_ALERT = 'ShutdownManagerWebhookCertificateExpiresSoon';

/** Every certificate in a PEM bundle; undefined when one of them does not parse. */
export function parseBundle(pem: string): X509Certificate[] | undefined {
  try {
    return (pem.match(PEM_BLOCK) ?? []).map((block) => new X509Certificate(block));
  } catch {
    return undefined;
  }
}

/**
 * A cert-manager.io/v1 Certificate, as far as check reads it: public fields only (cert-manager keeps the key in
 * the Secret it writes, never in the Certificate).
 */
export interface CertManagerCertificate {
  /** `namespace/name`, for messages. */
  readonly ref: string;
  readonly secretName: string | undefined;
  readonly dnsNames: readonly string[];
  /** status.notAfter (RFC 3339), once issued. */
  readonly notAfter: string | undefined;
  /** The Ready condition: True once the Secret holds a valid certificate matching the spec. */
  readonly ready: { readonly status: string; readonly reason?: string; readonly message?: string } | undefined;
}

export interface CertificateInput {
  readonly caBundlePem: string | undefined;
  /** `Secret envoy-shutdown-manager/envoy-shutdown-manager-tls`: where the serving certificate is, for messages. */
  readonly servingSecretRef: string;
  /** The Secret the webhook serves from, by name: the Certificate must write that one. */
  readonly servingSecretName: string;
  /** The Certificate the configuration's cert-manager.io/inject-ca-from names, when it exists. */
  readonly certificate: CertManagerCertificate | undefined;
  /** The webhook runs with --self-signed-certs: it publishes the certificate it serves. */
  readonly selfManaged: boolean;
  /** With selfManaged, the annotation shutdown-manager.io/serving-certificate of the configuration, when set. */
  readonly publishedPem: string | undefined;
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
  const bundle = input.caBundlePem === undefined ? [] : parseBundle(input.caBundlePem);
  if (bundle === undefined) {
    return [finding('webhook.ca-bundle', 'failure', 'the caBundle of the webhook configuration is not PEM: the API server cannot call the webhook, and pods are admitted without it', input.renewal)];
  }
  if (bundle.length === 0) {
    return [finding('webhook.ca-bundle', 'failure', 'the webhook configuration has no caBundle: the API server cannot call the webhook, and pods are admitted without it', input.renewal)];
  }
  const certificate = input.certificate;
  if (certificate === undefined && input.selfManaged && input.publishedPem !== undefined) {
    return [...publishedFindings(input.publishedPem, bundle, input), caExpiryFinding(bundle, input)];
  }
  return [
    caBundleFinding(input, bundle.length),
    caExpiryFinding(bundle, input),
    ...(certificate === undefined ? unobservedFindings(input) : certManagerFindings(certificate, input)),
  ];
}

/**
 * The certificate self-managed TLS publishes, judged as the API server judges what it is served: verified by a CA of
 * the caBundle (through the intermediates published with it), named for the Service, not expired. What it proves is
 * what the webhook says: only the webhook's RBAC (and cluster admins) may patch the configuration.
 */
function publishedFindings(pem: string, cas: readonly X509Certificate[], input: CertificateInput): Finding[] {
  const chain = parseBundle(pem);
  const leaf = chain?.[0];
  if (chain === undefined || leaf === undefined) {
    return [
      finding('webhook.ca-bundle', 'warning', `the annotation ${SERVING_CERTIFICATE} of the webhook configuration is not a PEM certificate: whether the caBundle verifies the served certificate is not observed`, input.renewal),
      ...unobservedFindings(input),
    ];
  }
  const count = `${cas.length} CA certificate${cas.length === 1 ? '' : 's'}`;
  const verified = issuedWithin(chain, cas);
  const caBundle = verified
    ? finding('webhook.ca-bundle', 'ok', `the caBundle (${count}) verifies ${PUBLISHED}`)
    : finding(
        'webhook.ca-bundle',
        'failure',
        `none of the caBundle's ${count} verifies ${PUBLISHED}: the API server refuses it, and pods are admitted without the webhook`,
        input.renewal,
      );
  const names = leaf.checkHost(input.serviceHost, { subject: 'never' }) !== undefined
    ? finding('webhook.certificate-names', 'ok', `the certificate the webhook says it serves names ${input.serviceHost} (annotation ${SERVING_CERTIFICATE})`)
    : finding(
        'webhook.certificate-names',
        'failure',
        `the certificate the webhook says it serves does not name ${input.serviceHost} (it names ${leaf.subjectAltName ?? 'nothing'}; annotation ${SERVING_CERTIFICATE}): the API server refuses it`,
        `give the webhook the --service-name and --namespace of the Service its configuration calls (it issues its certificate for those), then ${input.renewal}`,
      );
  const { status, text } = expiryText(new Date(Date.parse(leaf.validTo)), input.now);
  const expiry = finding(
    'webhook.certificate-expiry',
    status,
    `the certificate the webhook says it serves ${text} (annotation ${SERVING_CERTIFICATE})`,
    status === 'ok' ? undefined : input.renewal,
  );
  return [caBundle, names, expiry];
}

/** Whether a CA of `cas` signed the chain's leaf, directly or through the chain's other certificates (as TLS sends them). */
function issuedWithin(chain: readonly X509Certificate[], cas: readonly X509Certificate[]): boolean {
  const signs = (issuer: X509Certificate, subject: X509Certificate): boolean => issuer.ca && subject.checkIssued(issuer) && subject.verify(issuer.publicKey);
  let current = chain[0];
  for (let depth = 0; current !== undefined && depth < chain.length; depth++) {
    const subject: X509Certificate = current;
    if (cas.some((ca) => signs(ca, subject))) return true;
    current = chain.slice(1).find((intermediate) => intermediate !== subject && signs(intermediate, subject));
  }
  return false;
}

/** Whether the caBundle verifies the served certificate is only in the Secret: said so, never ok. */
function caBundleFinding(input: CertificateInput, count: number): Finding {
  const cas = `${count} CA certificate${count === 1 ? '' : 's'}`;
  const keeper =
    input.certificate === undefined
      ? ''
      : `; cert-manager's cainjector copies into it the CA of Certificate ${input.certificate.ref}`;
  return finding(
    'webhook.ca-bundle',
    'info',
    `the caBundle holds ${cas}; not observed: whether one of them verifies the serving certificate, which is in ${input.servingSecretRef} and check reads no Secret${keeper}`,
  );
}

/**
 * The caBundle's CAs expire on their own dates (cert-manager's CA lives 10 years, `npm run certs`' one year): once
 * the last has, the API server refuses any certificate, however valid itself. With several (a CA being rotated),
 * calls can work until the last of them expires, so that is the date reported.
 */
function caExpiryFinding(bundle: readonly X509Certificate[], input: CertificateInput): Finding {
  const latest = Math.max(...bundle.map((ca) => Date.parse(ca.validTo)));
  const { status, text } = expiryText(new Date(latest), input.now);
  const which = bundle.length === 1 ? 'the CA in the caBundle' : `the last of the caBundle's ${bundle.length} CAs to expire`;
  const fix = status === 'ok' ? undefined : `renew the CA and the caBundle: ${input.renewal}`;
  return finding('webhook.ca-bundle-expiry', status, `${which} ${text}`, fix);
}

/** What cert-manager's Certificate says of the serving certificate: issued, for which names, until when. */
function certManagerFindings(certificate: CertManagerCertificate, input: CertificateInput): Finding[] {
  return [readyFinding(certificate, input), namesFinding(certificate, input), expiryFinding(certificate, input)];
}

function readyFinding(certificate: CertManagerCertificate, input: CertificateInput): Finding {
  const { ref, secretName } = certificate;
  if (secretName !== input.servingSecretName) {
    return finding(
      'webhook.certificate',
      'failure',
      `Certificate ${ref} writes Secret ${secretName ?? '(none)'}, but the webhook serves from ${input.servingSecretRef}: cert-manager renews a certificate nobody serves`,
      `make spec.secretName of Certificate ${ref} and the webhook Deployment's Secret volume the same`,
    );
  }
  const ready = certificate.ready;
  if (ready?.status === 'True') return finding('webhook.certificate', 'ok', `Certificate ${ref} is Ready: cert-manager issued the certificate in ${input.servingSecretRef}`);
  const why = ready === undefined ? 'has no Ready condition yet' : `is not Ready (${[ready.reason, ready.message].filter((part) => part !== undefined && part !== '').join(': ') || ready.status})`;
  return finding('webhook.certificate', 'failure', `Certificate ${ref} ${why}: the webhook may have no certificate to serve, or an outdated one`, input.renewal);
}

function namesFinding(certificate: CertManagerCertificate, input: CertificateInput): Finding {
  if (certificate.dnsNames.some((name) => dnsNameCovers(name, input.serviceHost))) {
    return finding('webhook.certificate-names', 'ok', `Certificate ${certificate.ref} names ${input.serviceHost}`);
  }
  const named = certificate.dnsNames.length === 0 ? 'no DNS name' : certificate.dnsNames.join(', ');
  return finding(
    'webhook.certificate-names',
    'failure',
    `Certificate ${certificate.ref} does not name ${input.serviceHost} (it names ${named}): the API server refuses the certificate`,
    `add ${input.serviceHost} to spec.dnsNames of Certificate ${certificate.ref}`,
  );
}

/** A SAN as Go's TLS stack matches it: exactly, or a leading `*` for one whole label. */
function dnsNameCovers(pattern: string, host: string): boolean {
  const wanted = host.toLowerCase();
  const name = pattern.toLowerCase();
  if (!name.startsWith('*.')) return name === wanted;
  const dot = wanted.indexOf('.');
  return dot > 0 && wanted.slice(dot) === name.slice(1);
}

function expiryFinding(certificate: CertManagerCertificate, input: CertificateInput): Finding {
  const notAfter = certificate.notAfter === undefined ? Number.NaN : Date.parse(certificate.notAfter);
  if (Number.isNaN(notAfter)) {
    return finding('webhook.certificate-expiry', 'info', `not observed: Certificate ${certificate.ref} has no status.notAfter (not issued yet?)${watchServedExpiry()}`);
  }
  const { status, text } = expiryText(new Date(notAfter), input.now);
  return finding('webhook.certificate-expiry', status, `the certificate ${text} (status.notAfter of Certificate ${certificate.ref})`, status === 'ok' ? undefined : input.renewal);
}

/** No Certificate object (self-managed TLS, or certificates made by hand): the names and expiry are in the Secret only. */
function unobservedFindings(input: CertificateInput): Finding[] {
  const unpublished = input.selfManaged && input.publishedPem === undefined ? `, and the webhook has not published it as annotation ${SERVING_CERTIFICATE} (an older webhook image?)` : '';
  const where = `the serving certificate is in ${input.servingSecretRef}, which check does not read, and no cert-manager Certificate describes it${unpublished}`;
  return [
    finding('webhook.certificate-names', 'info', `not observed: whether the certificate names ${input.serviceHost}: ${where}`),
    finding('webhook.certificate-expiry', 'info', `not observed: when the certificate expires: ${where}${watchServedExpiry()}`),
  ];
}

function watchServedExpiry(): string {
  return `; the webhook exports the served certificate's expiry as ${SERVED_EXPIRY_METRIC}, and ${EXPIRY_ALERT} fires ahead of it`;
}

/** How long until `expires`, in the words of the expiry findings, and what that means. */
function expiryText(expires: Date, now: Date): { status: Finding['status']; text: string } {
  const daysLeft = Math.floor((expires.getTime() - now.getTime()) / DAY_MS);
  const when = expires.toISOString().slice(0, 10);
  if (daysLeft < 0) return { status: 'failure', text: `expired on ${when}: every call fails TLS` };
  if (daysLeft < EXPIRY_WARNING_DAYS) return { status: 'warning', text: `expires in ${daysLeft} days (${when}) and has not been renewed` };
  return { status: 'ok', text: `expires in ${daysLeft} days (${when})` };
}
