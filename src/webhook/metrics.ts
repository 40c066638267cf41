/** Prometheus metrics of webhook mode, on a registry of its own (no global state shared with tests). */
import { collectDefaultMetrics, Counter, Histogram, Registry } from 'prom-client';
import type { AdmissionDecision } from './admission.js';

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

  constructor() {
    collectDefaultMetrics({ register: this.registry });
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
