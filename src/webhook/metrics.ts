/** Prometheus metrics of webhook mode, on a registry of its own (no global state shared with tests). */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import type { AdmissionDecision } from './admission.js';

/** Not imported: an ESM import of node:crypto reads all its exports (see src/envoy/admin-client.ts on node:tls). */
const { X509Certificate } = process.getBuiltinModule('node:crypto');

/** The notAfter of the first certificate of a PEM chain, in seconds since the epoch; undefined when it does not parse. */
export function certificateNotAfterSeconds(pem: Buffer | string): number | undefined {
  try {
    const notAfter = Date.parse(new X509Certificate(pem).validTo);
    return Number.isNaN(notAfter) ? undefined : notAfter / 1000;
  } catch {
    return undefined;
  }
}

export class WebhookMetrics {
  readonly registry = new Registry();

  private readonly reviews = new Counter({
    name: 'shutdown_manager_webhook_reviews_total',
    help: 'AdmissionReviews answered, by what was done: injected, skipped, denied, ignored (not a Pod CREATE), invalid (4xx) or error (5xx).',
    labelNames: ['result'] as const,
    registers: [this.registry],
  });

  private readonly injections = new Counter({
    name: 'shutdown_manager_webhook_injections_total',
    help: 'Pods into which the shutdown-manager was injected.',
    registers: [this.registry],
  });

  private readonly skips = new Counter({
    name: 'shutdown_manager_webhook_skips_total',
    help: 'Pods admitted unchanged, by reason.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  private readonly denials = new Counter({
    name: 'shutdown_manager_webhook_denials_total',
    help: 'Pods denied because of a bad setting, by the setting at fault.',
    labelNames: ['reason'] as const,
    registers: [this.registry],
  });

  private readonly duration = new Histogram({
    name: 'shutdown_manager_webhook_review_duration_seconds',
    help: 'Time to decode, decide and encode one AdmissionReview.',
    buckets: [0.0002, 0.0005, 0.001, 0.002, 0.005, 0.01, 0.025, 0.05, 0.1],
    registers: [this.registry],
  });

  /**
   * The API server cannot call a webhook whose certificate expired, and with failurePolicy Ignore nothing else
   * says so: the alerts read the expiry of what is served now, which a reload (rotated files, a renewal) updates.
   */
  private readonly certificateExpiry = new Gauge({
    name: 'shutdown_manager_webhook_certificate_expiry_timestamp_seconds',
    help: 'When the serving certificate now served expires (its notAfter), in seconds since the epoch; 0 if unknown.',
    registers: [this.registry],
  });

  constructor() {
    collectDefaultMetrics({ register: this.registry });
  }

  /**
   * Records the expiry of the certificate served from now on. One that cannot be read (never the case for one
   * node:tls accepted) sets 0, unknown, rather than keep the previous one's date; the alerts ignore 0.
   */
  servingCertificate(pem: Buffer | string): void {
    const notAfter = certificateNotAfterSeconds(pem);
    this.certificateExpiry.set(notAfter ?? 0);
  }

  /** A request that got no review: malformed (4xx) or a failure of ours (5xx). */
  countFailure(result: 'invalid' | 'error'): void {
    this.reviews.inc({ result });
  }

  /** Starts timing a review; the returned function records it with its outcome. */
  startReview(): (decision: AdmissionDecision) => void {
    const stop = this.duration.startTimer();
    return (decision) => {
      stop();
      switch (decision.action) {
        case 'inject':
          this.injections.inc();
          return this.reviews.inc({ result: 'injected' });
        case 'skip':
          this.skips.inc({ reason: decision.reason });
          return this.reviews.inc({ result: 'skipped' });
        case 'deny':
          for (const setting of new Set(decision.settings)) this.denials.inc({ reason: setting });
          return this.reviews.inc({ result: 'denied' });
        case 'ignore':
          return this.reviews.inc({ result: 'ignored' });
      }
    };
  }
}
