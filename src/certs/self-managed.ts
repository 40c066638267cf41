/**
 * Self-managed TLS (--self-signed-certs): the webhook keeps its own CA and serving certificate in a Secret shared by
 * all replicas and gives the CA to the API server through the caBundle, so cert-manager is not needed. Every replica
 * runs the same idempotent pass (reconcile.ts) at start-up and every checkIntervalMs, checks the caBundle between
 * passes (every caBundleCheckIntervalMs), and serves a new certificate only once the caBundle holds its CA and
 * trustPropagationMs has passed. Start-up (obtain) is bounded by startupBudgetMs in all.
 *
 * Why each of these: docs/operations/self-managed-tls.md#how-it-keeps-trust.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { systemClock, type Clock } from '../clock.js';
import { messageOf } from '../errors.js';
import { KubeApiError } from '../kube/errors.js';
import type { CallOptions } from '../kube/store.js';
import type { TlsMaterial } from './material.js';
import { SecretReconciler, SelfManagedTlsError, type ManagedCertificateSettings } from './reconcile.js';
import { describeCertificate, type ServingCertificate } from './stored.js';

export interface RetryPolicy {
  readonly attempts: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
}

export interface SelfManagedOptions extends ManagedCertificateSettings {
  /** Tests move time forward with it; certificates are issued as of this clock too. */
  readonly clock?: () => Date;
  readonly validityDays?: number;
  readonly checkIntervalMs?: number;
  /** How often the caBundle alone is compared (one GET), between the full checks. */
  readonly caBundleCheckIntervalMs?: number;
  readonly trustPropagationMs?: number;
  readonly startupRetry?: RetryPolicy;
  /** Start-up gives up after this long in all, request timeouts and backoff included. */
  readonly startupBudgetMs?: number;
  /** Each request's timeout during start-up (never past the budget). */
  readonly startupRequestTimeoutMs?: number;
  /** First delay after a failed periodic check; doubles up to checkIntervalMs. */
  readonly failureRetryMs?: number;
  /** For the backoff jitter; tests pin it. */
  readonly random?: () => number;
  /** For the periodic loop (not start-up, which runs before anything else and uses real time). */
  readonly timers?: Clock;
}

export const SELF_MANAGED_DEFAULTS = {
  /** Renewed with a third left, i.e. about every eight months. */
  validityDays: 365,
  checkIntervalMs: 60 * 60_000,
  /** A wiped caBundle sends new Envoy pods out without the sidecar; one GET a minute bounds that to a minute. */
  caBundleCheckIntervalMs: 60_000,
  /** API servers watch webhook configurations; a few seconds covers the slowest instance. */
  trustPropagationMs: 5_000,
  /** 1 + 2 + 4 + 8 + 15 s (±20%): about half a minute of failing API calls is ridden out before exiting. */
  startupRetry: { attempts: 6, initialDelayMs: 1_000, maxDelayMs: 15_000 },
  /**
   * All of start-up, stalled requests included. manifests/self-signed's startupProbe allows more (see its
   * test), so the pod exits with its reason before the kubelet would kill it silently.
   */
  startupBudgetMs: 60_000,
  /** The API server answers in milliseconds; 5 s leaves room for several attempts within the budget. */
  startupRequestTimeoutMs: 5_000,
  failureRetryMs: 30_000,
} as const;

export function isRetryable(error: unknown): boolean {
  return (error instanceof KubeApiError || error instanceof SelfManagedTlsError) && error.retryable;
}

const seconds = (ms: number): string => `${(ms / 1000).toFixed(1)} s`;

/** Start-up ran out of time between two requests: the error worth reporting is the one before. */
class StartupBudgetSpent extends SelfManagedTlsError {}

export class SelfManagedCertificates {
  private served: ServingCertificate | undefined;
  private apply: ((material: TlsMaterial) => void) | undefined;
  private readonly stopping = new AbortController();
  /** Options for the next API request: start-up swaps in ones bounded by its budget. */
  private request: () => CallOptions = () => ({ signal: this.stopping.signal });
  private running: Promise<void> | undefined;
  private failures = 0;
  /** Loop-clock time at which the next full check is due. */
  private fullCheckDue = 0;
  private readonly reconciler: SecretReconciler;

  constructor(private readonly options: SelfManagedOptions) {
    const { store, dnsNames, commonName, logger } = options;
    this.reconciler = new SecretReconciler({
      store,
      dnsNames,
      commonName,
      logger,
      validityDays: options.validityDays ?? SELF_MANAGED_DEFAULTS.validityDays,
      clock: () => options.clock?.() ?? new Date(),
      request: () => this.request(),
      servedIssuerPem: () => this.served?.issuerPem,
    });
  }

  private get logger(): Logger {
    return this.options.logger;
  }

  private get timers(): Clock {
    return this.options.timers ?? systemClock;
  }

  /** The certificate currently served, once obtain() has succeeded. */
  get current(): ServingCertificate | undefined {
    return this.served;
  }

  /**
   * Startup: the certificate to listen with. Failures that may pass (API server unreachable, a lost race)
   * are retried with backoff, all within startupBudgetMs; the rest, and the last retry, throw
   * SelfManagedTlsError.
   */
  async obtain(): Promise<TlsMaterial> {
    const budgetMs = this.options.startupBudgetMs ?? SELF_MANAGED_DEFAULTS.startupBudgetMs;
    const started = performance.now();
    const deadline = started + budgetMs;
    this.request = () => this.startupRequest(deadline);
    try {
      return await this.obtainWithin(deadline, (attempt, error) => {
        const budget = `(start-up budget ${seconds(budgetMs)})`;
        return `gave up after ${attempt} attempt${attempt === 1 ? '' : 's'} in ${seconds(performance.now() - started)} ${budget}; last error: ${messageOf(error)}`;
      });
    } finally {
      this.request = () => ({ signal: this.stopping.signal });
    }
  }

  private async obtainWithin(deadline: number, gaveUp: (attempt: number, error: unknown) => string): Promise<TlsMaterial> {
    const policy = this.options.startupRetry ?? SELF_MANAGED_DEFAULTS.startupRetry;
    let previous: unknown;
    for (let attempt = 1; ; attempt++) {
      try {
        const certificate = await this.reconciler.reconcile();
        this.served = certificate;
        this.logger.info(describeCertificate(certificate), 'self-signed certificate ready');
        return certificate.material;
      } catch (caught) {
        const error = caught instanceof StartupBudgetSpent && previous !== undefined ? previous : caught;
        previous = error;
        if (!isRetryable(error) || this.stopping.signal.aborted) {
          throw new SelfManagedTlsError(`self-signed certificate: ${messageOf(error)}`, false, { cause: error });
        }
        const delayMs = this.jitter(Math.min(policy.maxDelayMs, policy.initialDelayMs * 2 ** (attempt - 1)));
        // No point sleeping past the deadline: give up now, while the pod can still say why.
        if (attempt >= policy.attempts || performance.now() + delayMs >= deadline) {
          throw new SelfManagedTlsError(`self-signed certificate: ${gaveUp(attempt, error)}`, true, { cause: error });
        }
        this.logger.warn({ err: error, attempt, retryInMs: delayMs }, 'self-signed certificate not ready yet; retrying');
        await sleep(delayMs, undefined, { signal: this.stopping.signal });
      }
    }
  }

  /** A start-up request's options: its timeout never reaches past the deadline. */
  private startupRequest(deadline: number): CallOptions {
    const remainingMs = Math.floor(deadline - performance.now());
    if (remainingMs <= 0) throw new StartupBudgetSpent('the start-up budget ran out between two requests', true);
    const perRequestMs = this.options.startupRequestTimeoutMs ?? SELF_MANAGED_DEFAULTS.startupRequestTimeoutMs;
    return { signal: this.stopping.signal, timeoutMs: Math.min(perRequestMs, remainingMs) };
  }

  /** Re-checks periodically from now on, serving renewed certificates through `apply`. */
  start(apply: (material: TlsMaterial) => void): void {
    this.apply = apply;
    this.fullCheckDue = this.timers.now() + this.intervalMs();
    this.schedule(this.nextDelayMs());
  }

  /** Stops the loop and cancels a check in progress (its requests and its propagation wait). */
  async stop(): Promise<void> {
    this.stopping.abort();
    await this.running?.catch(() => undefined);
  }

  /**
   * One pass of the loop: makes the Secret and the caBundle right, then serves the Secret's certificate if
   * it is not the one served. Resolves with whether the served certificate changed.
   */
  async check(): Promise<'unchanged' | 'switched'> {
    const certificate = await this.reconciler.reconcile();
    if (certificate.fingerprint === this.served?.fingerprint) return 'unchanged';
    // The caBundle holds the new CA now, but each API server instance applies that change asynchronously.
    // The certificate served until then stays valid and trusted, so waiting costs nothing.
    if (this.served !== undefined) {
      await sleep(this.options.trustPropagationMs ?? SELF_MANAGED_DEFAULTS.trustPropagationMs, undefined, { signal: this.stopping.signal });
    }
    this.apply?.(certificate.material);
    this.served = certificate;
    this.logger.info(describeCertificate(certificate), 'serving the renewed self-signed certificate');
    return 'switched';
  }

  private intervalMs(): number {
    return this.options.checkIntervalMs ?? SELF_MANAGED_DEFAULTS.checkIntervalMs;
  }

  private caBundleIntervalMs(): number {
    return this.options.caBundleCheckIntervalMs ?? SELF_MANAGED_DEFAULTS.caBundleCheckIntervalMs;
  }

  /** Until the next caBundle check, or the full check if that comes first. */
  private nextDelayMs(): number {
    return Math.max(0, Math.min(this.caBundleIntervalMs(), this.fullCheckDue - this.timers.now()));
  }

  private jitter(delayMs: number): number {
    // ±20%: replicas started together by a rollout should not retry in lockstep against a busy API server.
    return Math.round(delayMs * (0.8 + 0.4 * (this.options.random ?? Math.random)()));
  }

  private schedule(delayMs: number): void {
    if (this.stopping.signal.aborted) return;
    this.timers.sleep(delayMs, this.stopping.signal).then(
      () => {
        this.running = this.tick().finally(() => {
          this.running = undefined;
        });
      },
      () => undefined, // stopped
    );
  }

  /** The full check when it is due or the caBundle drifted; otherwise only the caBundle's GET. */
  private async tick(): Promise<void> {
    try {
      if (this.timers.now() >= this.fullCheckDue || (await this.reconciler.caBundleDrifted())) {
        await this.check();
        this.fullCheckDue = this.timers.now() + this.intervalMs();
      }
      this.failures = 0;
      this.schedule(this.nextDelayMs());
    } catch (error) {
      if (this.stopping.signal.aborted) return;
      this.failures += 1;
      const first = this.options.failureRetryMs ?? SELF_MANAGED_DEFAULTS.failureRetryMs;
      // Never later than the next caBundle check would have been: a failure must not delay restoring it.
      const delayMs = Math.min(this.intervalMs(), this.caBundleIntervalMs(), first * 2 ** (this.failures - 1));
      this.logger.error(
        { err: error, failures: this.failures, retryInMs: delayMs, servedUntil: this.served?.notAfter.toISOString() },
        'self-signed certificate check failed; still serving the current certificate',
      );
      this.schedule(delayMs);
    }
  }
}
