/**
 * Self-managed TLS (--self-signed-certs): the webhook keeps its own CA and serving certificate in a Secret
 * shared by all replicas and gives the CA to the API server through the caBundle, so cert-manager is not
 * needed.
 *
 * Every replica runs the same idempotent pass (at startup, then every checkIntervalMs):
 *   1. Secret: GET. Missing → issue and CREATE; AlreadyExists → another replica won, GET and use its.
 *      Unusable or due for renewal → issue and UPDATE with the resourceVersion read; Conflict → another
 *      replica renewed first, GET and use its if it is valid.
 *   2. caBundle: every webhook of the configuration must hold the Secret's ca.crt; patch those that do not.
 *   3. Serve the Secret's certificate, if it is not already the one served: only after step 2, and after
 *      trustPropagationMs so that every API server instance has seen the new caBundle. The certificate
 *      being replaced stays trusted meanwhile, because ca.crt still holds its CA (see stored.ts).
 * Between those passes, every caBundleCheckIntervalMs, one GET of the configuration checks that its caBundle
 * is still the one last written: `kubectl replace` or a GitOps sync of the bare manifest wipes it, and with
 * failurePolicy Ignore new Envoy pods are admitted without the sidecar until it is back. When it differs,
 * the full pass runs at once (it reads the Secret first, so a bundle renewed by another replica is never
 * overwritten with an older one).
 *
 * Start-up (obtain) is bounded by startupBudgetMs in all, request timeouts included, so that the pod says
 * why it gave up before the startupProbe of manifests/self-signed runs out.
 *
 * No leader election is needed: the API server's optimistic concurrency picks one writer per change.
 */
import { setTimeout as sleep } from 'node:timers/promises';
import type { Logger } from 'pino';
import { KubeApiError, KubeConflictError } from '../kube/errors.js';
import type { CallOptions, CertificateStore, SecretSnapshot } from '../kube/store.js';
import type { TlsMaterial } from '../webhook/tls.js';
import { inspectStoredCertificate, issueStoredCertificate, type Inspection, type ServingCertificate } from './stored.js';

/** Self-managed TLS could not get a certificate; `retryable` says whether waiting might help. */
export class SelfManagedTlsError extends Error {
  override readonly name = 'SelfManagedTlsError';

  constructor(
    message: string,
    readonly retryable: boolean,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }
}

export interface RetryPolicy {
  readonly attempts: number;
  readonly initialDelayMs: number;
  readonly maxDelayMs: number;
}

/** A scheduled callback, cancellable. */
export interface TimerHandle {
  cancel(): void;
}

/** The periodic loop's clock and timers; tests drive them by hand instead of waiting. */
export interface LoopTimers {
  /** Monotonic milliseconds. */
  now(): number;
  /** Must not keep the process alive on its own: the server does that. */
  schedule(callback: () => void, delayMs: number): TimerHandle;
}

export const REAL_TIMERS: LoopTimers = {
  now: () => performance.now(),
  schedule: (callback, delayMs) => {
    const timer = setTimeout(callback, delayMs);
    timer.unref();
    return { cancel: () => clearTimeout(timer) };
  },
};

export interface SelfManagedOptions {
  readonly store: CertificateStore;
  /** Names the serving certificate must cover: serviceDnsNames(service, namespace). */
  readonly dnsNames: readonly string[];
  readonly commonName: string;
  readonly logger: Logger;
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
  readonly timers?: LoopTimers;
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

/** How many times a caBundle patch is retried when the webhook list changes between read and patch. */
const PATCH_ATTEMPTS = 3;

export function isRetryable(error: unknown): boolean {
  return (error instanceof KubeApiError || error instanceof SelfManagedTlsError) && error.retryable;
}

function messageOf(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
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
  private timer: TimerHandle | undefined;
  private running: Promise<void> | undefined;
  private failures = 0;
  /** The trust bundle the caBundle was last made equal to; what the light check compares against. */
  private reconciledBundle: string | undefined;
  /** LoopTimers time at which the next full check is due. */
  private fullCheckDue = 0;

  constructor(private readonly options: SelfManagedOptions) {}

  private get store(): CertificateStore {
    return this.options.store;
  }

  private get logger(): Logger {
    return this.options.logger;
  }

  private now(): Date {
    return this.options.clock?.() ?? new Date();
  }

  private get timers(): LoopTimers {
    return this.options.timers ?? REAL_TIMERS;
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
        const certificate = await this.reconcile();
        this.served = certificate;
        this.logger.info(this.describe(certificate), 'self-signed certificate ready');
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
    this.timer?.cancel();
    this.timer = undefined;
    await this.running?.catch(() => undefined);
  }

  /**
   * One pass of the loop: makes the Secret and the caBundle right, then serves the Secret's certificate if
   * it is not the one served. Resolves with whether the served certificate changed.
   */
  async check(): Promise<'unchanged' | 'switched'> {
    const certificate = await this.reconcile();
    if (certificate.fingerprint === this.served?.fingerprint) return 'unchanged';
    // The caBundle holds the new CA now, but each API server instance applies that change asynchronously.
    // The certificate served until then stays valid and trusted, so waiting costs nothing.
    if (this.served !== undefined) {
      await sleep(this.options.trustPropagationMs ?? SELF_MANAGED_DEFAULTS.trustPropagationMs, undefined, { signal: this.stopping.signal });
    }
    this.apply?.(certificate.material);
    this.served = certificate;
    this.logger.info(this.describe(certificate), 'serving the renewed self-signed certificate');
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
    this.timer = this.timers.schedule(() => {
      this.timer = undefined;
      this.running = this.tick().finally(() => {
        this.running = undefined;
      });
    }, delayMs);
  }

  /** The full check when it is due or the caBundle drifted; otherwise only the caBundle's GET. */
  private async tick(): Promise<void> {
    try {
      if (this.timers.now() >= this.fullCheckDue || (await this.caBundleDrifted())) {
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

  private async reconcile(): Promise<ServingCertificate> {
    const certificate = await this.ensureSecret();
    await this.ensureCaBundle(certificate.trustBundlePem);
    this.reconciledBundle = certificate.trustBundlePem;
    return certificate;
  }

  /** Whether some webhook's caBundle is not the bundle last reconciled (reset by an apply, a sync...). */
  private async caBundleDrifted(): Promise<boolean> {
    const webhooks = await this.store.readCaBundles(this.request());
    const stale = webhooks.filter((webhook) => webhook.caBundle !== this.reconciledBundle).map((webhook) => webhook.name);
    if (webhooks.length > 0 && stale.length === 0) return false;
    this.logger.warn(
      { webhookConfiguration: this.store.webhookConfigurationName, webhooks: stale },
      'caBundle differs from the one last written (configuration replaced by kubectl or a GitOps sync, or renewed by ' +
        'another replica); checking the Secret and restoring it',
    );
    return true;
  }

  private inspect(snapshot: SecretSnapshot): Inspection {
    return inspectStoredCertificate(snapshot.data, this.options.dnsNames, this.now());
  }

  private async ensureSecret(): Promise<ServingCertificate> {
    const existing = await this.store.readSecret(this.request());
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
      await this.store.createSecret(issued.data, this.request());
      this.logger.info({ secret: this.store.secretRef, ...this.describe(issued.certificate) }, 'created the self-signed certificate Secret');
      return issued.certificate;
    } catch (error) {
      if (!(error instanceof KubeConflictError)) throw error;
    }
    const winner = await this.store.readSecret(this.request());
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
      await this.store.updateSecret(issued.data, snapshot, this.request());
      this.logger.info({ secret: this.store.secretRef, ...this.describe(issued.certificate) }, 'stored a new self-signed certificate');
      return issued.certificate;
    } catch (error) {
      if (!(error instanceof KubeConflictError)) throw error;
    }
    const current = await this.store.readSecret(this.request());
    const now = current === undefined ? undefined : this.inspect(current);
    if (now?.status === 'valid') {
      this.logger.info({ secret: this.store.secretRef }, 'another replica replaced the certificate first; using its');
      return now.certificate;
    }
    const what = now === undefined ? 'it was deleted' : `what is there now is not usable (${'reason' in now ? now.reason : ''})`;
    throw new SelfManagedTlsError(`Secret ${this.store.secretRef} changed while this replica replaced it, and ${what}`, true);
  }

  private issue(keepTrusting: readonly string[]): ReturnType<typeof issueStoredCertificate> {
    return issueStoredCertificate({
      dnsNames: this.options.dnsNames,
      commonName: this.options.commonName,
      validityDays: this.options.validityDays ?? SELF_MANAGED_DEFAULTS.validityDays,
      now: this.now(),
      // What this replica serves right now must stay trusted until it switches.
      keepTrusting: [...keepTrusting, ...(this.served === undefined ? [] : [this.served.issuerPem])],
    });
  }

  /** Makes every webhook's caBundle the trust bundle, patching only those that differ. */
  private async ensureCaBundle(bundle: string): Promise<void> {
    for (let attempt = 1; ; attempt++) {
      const webhooks = await this.store.readCaBundles(this.request());
      if (webhooks.length === 0) {
        throw new SelfManagedTlsError(`MutatingWebhookConfiguration ${this.store.webhookConfigurationName} has no webhooks to give the CA to`, false);
      }
      const stale = webhooks.filter((webhook) => webhook.caBundle !== bundle);
      if (stale.length === 0) return;
      try {
        await this.store.patchCaBundles(stale, bundle, this.request());
        const names = stale.map((webhook) => webhook.name);
        this.logger.info({ webhookConfiguration: this.store.webhookConfigurationName, webhooks: names }, 'caBundle updated');
        return;
      } catch (error) {
        // The webhook list changed between read and patch: read it again, a few times at most.
        if (!(error instanceof KubeConflictError) || attempt >= PATCH_ATTEMPTS) throw error;
      }
    }
  }

  private describe(certificate: ServingCertificate): Record<string, string> {
    return {
      fingerprint: certificate.fingerprint,
      notAfter: certificate.notAfter.toISOString(),
      renewAt: certificate.renewAt.toISOString(),
    };
  }
}
