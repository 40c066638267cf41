/**
 * The pass that self-managed TLS (self-managed.ts) runs at start-up and on every check: idempotent, and the same on
 * every replica. 1. The Secret: created if missing, updated (guarded by the resourceVersion read) when unusable or due
 * for renewal; a replica that loses the race (AlreadyExists, Conflict) reads and uses the winner's. 2. The
 * configuration: one JSON patch sets what differs of each webhook's caBundle (the Secret's ca.crt) and the annotation
 * shutdown-manager.io/serving-certificate (its tls.crt). It resolves with the Secret's certificate; serving it, and
 * when, is the loop's decision. No leader election is needed: see docs/operations/self-managed-tls.md#how-it-keeps-trust.
 */
import type { Logger } from 'pino';
import { UserFacingError } from '../errors.js';
import { KubeConflictError } from '../kube/errors.js';
import type { CallOptions, CertificateStore, SecretSnapshot } from '../kube/store.js';
import { describeCertificate, inspectStoredCertificate, issueStoredCertificate, splitPemCertificates, type Inspection, type ServingCertificate } from './stored.js';

/** Self-managed TLS could not get a certificate; `retryable` says whether waiting might help. */
export class SelfManagedTlsError extends UserFacingError {
  override readonly name = 'SelfManagedTlsError';

  constructor(
    message: string,
    readonly retryable: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

/** Where the certificate is kept and whom it is for: self-managed TLS's settings, which it passes on. */
export interface ManagedCertificateSettings {
  readonly store: CertificateStore;
  /** Names the serving certificate must cover: serviceDnsNames(service, namespace). */
  readonly dnsNames: readonly string[];
  readonly commonName: string;
  readonly logger: Logger;
}

export interface ReconcilerOptions extends ManagedCertificateSettings {
  readonly validityDays: number;
  /** Certificates are inspected and issued as of this clock. */
  readonly clock: () => Date;
  /** Options for each API request, asked for just before it is made: start-up bounds them by its budget. */
  readonly request: () => CallOptions;
  /** The CA of the certificate this replica serves now, if any: a new trust bundle keeps it until the replica switches. */
  readonly servedIssuerPem: () => string | undefined;
}

/** How many times a configuration patch is retried when the webhook list changes between read and patch. */
const PATCH_ATTEMPTS = 3;
/**
 * The largest certificate chain published on the configuration: all its annotations share 256 KiB, and a
 * self-issued certificate is about 1 KiB. A larger tls.crt (edited by hand) is served but not published.
 */
export const MAX_PUBLISHED_CERTIFICATE_BYTES = 16 * 1024;

export class SecretReconciler {
  /** The trust bundle the caBundle was last made equal to; what caBundleDrifted() compares against. */
  private reconciledBundle: string | undefined;
  /** The serving certificate last published on the configuration (undefined: none, too large to publish). */
  private reconciledServing: string | undefined;

  constructor(private readonly options: ReconcilerOptions) {}

  private get store(): CertificateStore {
    return this.options.store;
  }

  private get logger(): Logger {
    return this.options.logger;
  }

  /**
   * One pass: makes the Secret hold a servable certificate, every caBundle trust it and the configuration publish
   * it; resolves with that certificate.
   */
  async reconcile(): Promise<ServingCertificate> {
    const certificate = await this.ensureSecret();
    const published = this.publishable(certificate);
    await this.ensureConfiguration(certificate.trustBundlePem, published);
    this.reconciledBundle = certificate.trustBundlePem;
    this.reconciledServing = published;
    return certificate;
  }

  /**
   * Whether some webhook's caBundle, or the published certificate, is not what was last reconciled (reset by an
   * apply, a sync..., or renewed by another replica).
   */
  async caBundleDrifted(): Promise<boolean> {
    const read = await this.store.readWebhookConfiguration(this.options.request());
    const stale = read.webhooks.filter((webhook) => webhook.caBundle !== this.reconciledBundle).map((webhook) => webhook.name);
    const unpublished = this.reconciledServing !== undefined && read.servingCertificate !== this.reconciledServing;
    if (read.webhooks.length > 0 && stale.length === 0 && !unpublished) return false;
    this.logger.warn(
      { webhookConfiguration: this.store.webhookConfigurationName, webhooks: stale, servingCertificateChanged: unpublished },
      'caBundle or published serving certificate differs from the one last written (configuration replaced by kubectl ' +
        'or a GitOps sync, or renewed by another replica); checking the Secret and restoring it',
    );
    return true;
  }

  /** The certificate chain served, as published: the PEM blocks of tls.crt (no key); undefined when too large. */
  private publishable(certificate: ServingCertificate): string | undefined {
    const chain = splitPemCertificates(certificate.material.cert.toString('utf8')).join('');
    if (Buffer.byteLength(chain) <= MAX_PUBLISHED_CERTIFICATE_BYTES) return chain;
    this.logger.warn(
      { webhookConfiguration: this.store.webhookConfigurationName, bytes: Buffer.byteLength(chain), limit: MAX_PUBLISHED_CERTIFICATE_BYTES },
      'the serving certificate chain is too large to publish on the configuration; check will not verify it',
    );
    return undefined;
  }

  private inspect(snapshot: SecretSnapshot): Inspection {
    return inspectStoredCertificate(snapshot.data, this.options.dnsNames, this.options.clock());
  }

  private async ensureSecret(): Promise<ServingCertificate> {
    const existing = await this.store.readSecret(this.options.request());
    return existing === undefined ? this.createOrAdopt() : this.adopt(existing);
  }

  /** Uses a valid Secret as it is; replaces one that is unusable or due for renewal. */
  private async adopt(snapshot: SecretSnapshot): Promise<ServingCertificate> {
    const inspection = this.inspect(snapshot);
    if (inspection.status === 'valid') return inspection.certificate;
    const message = inspection.status === 'due' ? 'renewing the self-signed certificate' : 'replacing an unusable self-signed certificate';
    this.logger.info({ secret: this.store.secretRef, reason: inspection.reason }, message);
    return this.replace(snapshot, inspection);
  }

  private async createOrAdopt(): Promise<ServingCertificate> {
    const issued = await this.issue([]);
    try {
      await this.store.createSecret(issued.data, this.options.request());
      this.logger.info({ secret: this.store.secretRef, ...describeCertificate(issued.certificate) }, 'created the self-signed certificate Secret');
      return issued.certificate;
    } catch (error) {
      if (!(error instanceof KubeConflictError)) throw error;
    }
    const winner = await this.store.readSecret(this.options.request());
    if (winner === undefined) {
      throw new SelfManagedTlsError(`Secret ${this.store.secretRef} was created by someone else, then deleted`, true);
    }
    this.logger.info({ secret: this.store.secretRef }, 'another replica created the Secret first; using its certificate');
    return this.adopt(winner);
  }

  private async replace(snapshot: SecretSnapshot, inspection: Exclude<Inspection, { status: 'valid' }>): Promise<ServingCertificate> {
    // A certificate due for renewal is still served (here and by the other replicas): keep trusting its CA.
    const issued = await this.issue(inspection.status === 'due' ? [inspection.certificate.issuerPem] : []);
    try {
      await this.store.updateSecret(issued.data, snapshot, this.options.request());
      this.logger.info({ secret: this.store.secretRef, ...describeCertificate(issued.certificate) }, 'stored a new self-signed certificate');
      return issued.certificate;
    } catch (error) {
      if (!(error instanceof KubeConflictError)) throw error;
    }
    const current = await this.store.readSecret(this.options.request());
    const now = current === undefined ? undefined : this.inspect(current);
    if (now?.status === 'valid') {
      this.logger.info({ secret: this.store.secretRef }, 'another replica replaced the certificate first; using its');
      return now.certificate;
    }
    const what = now === undefined ? 'it was deleted' : `what is there now is not usable (${'reason' in now ? now.reason : ''})`;
    throw new SelfManagedTlsError(`Secret ${this.store.secretRef} changed while this replica replaced it, and ${what}`, true);
  }

  private issue(keepTrusting: readonly string[]): ReturnType<typeof issueStoredCertificate> {
    const servedIssuerPem = this.options.servedIssuerPem();
    return issueStoredCertificate({
      dnsNames: this.options.dnsNames,
      commonName: this.options.commonName,
      validityDays: this.options.validityDays,
      now: this.options.clock(),
      // What this replica serves right now must stay trusted until it switches.
      keepTrusting: [...keepTrusting, ...(servedIssuerPem === undefined ? [] : [servedIssuerPem])],
    });
  }

  /**
   * Makes every webhook's caBundle the trust bundle and the published certificate `published` (when defined), in one
   * patch of what differs; none when nothing does.
   */
  private async ensureConfiguration(bundle: string, published: string | undefined): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const read = await this.store.readWebhookConfiguration(this.options.request());
      if (read.webhooks.length === 0) {
        throw new SelfManagedTlsError(`MutatingWebhookConfiguration ${this.store.webhookConfigurationName} has no webhooks to give the CA to`, false);
      }
      const stale = read.webhooks.filter((webhook) => webhook.caBundle !== bundle);
      const publish = published !== undefined && read.servingCertificate !== published;
      if (stale.length === 0 && !publish) return;
      try {
        await this.store.patchWebhookConfiguration(
          read,
          { ...(stale.length === 0 ? {} : { caBundle: { webhooks: stale, pem: bundle } }), ...(publish ? { servingCertificate: published } : {}) },
          this.options.request(),
        );
        const webhookConfiguration = this.store.webhookConfigurationName;
        if (stale.length > 0) this.logger.info({ webhookConfiguration, webhooks: stale.map((webhook) => webhook.name) }, 'caBundle updated');
        if (publish) this.logger.info({ webhookConfiguration }, 'serving certificate published on the configuration');
        return;
      } catch (error) {
        // The configuration changed between read and patch: read it again, a few times at most.
        if (!(error instanceof KubeConflictError) || attempt >= PATCH_ATTEMPTS) throw error;
      }
    }
  }
}
