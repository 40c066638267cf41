/**
 * The port between self-managed TLS and the Kubernetes API: the five requests it makes, in its own terms
 * (PEM text rather than base64, `undefined` rather than a 404). src/kube/client.ts implements it with
 * @kubernetes/client-node; tests drive the real adapter against a fake API server.
 *
 * Failures are the typed errors of ./errors.ts.
 */

/** Secret data by key (tls.crt, tls.key, ca.crt), as text: every value we store is PEM. */
export type SecretData = Readonly<Record<string, string>>;

export interface SecretSnapshot {
  readonly data: SecretData;
  /** For the optimistic-concurrency update: it succeeds only if nobody wrote in between. */
  readonly resourceVersion: string;
  /** Kept on update: a Secret's type is immutable. */
  readonly type: string | undefined;
  /**
   * The object's metadata as read, opaque here: an update writes it back with only the data (and the
   * resourceVersion) changed, so labels, annotations and ownerReferences set by others are not lost.
   */
  readonly metadata: Readonly<Record<string, unknown>>;
}

export interface WebhookCaBundle {
  /** Position in the configuration's webhooks list; the patch checks the name still sits there. */
  readonly index: number;
  readonly name: string;
  /** The caBundle as PEM text; undefined when unset. */
  readonly caBundle: string | undefined;
}

export interface CallOptions {
  /** Aborts the request (shutdown); each request also has its own timeout. */
  readonly signal?: AbortSignal;
  /** This request's timeout instead of the store's: start-up uses shorter ones to stay within its budget. */
  readonly timeoutMs?: number;
}

export interface CertificateStore {
  /** Where things live, for log lines and messages. */
  readonly secretRef: string;
  readonly webhookConfigurationName: string;

  /** The Secret, or undefined when it does not exist. */
  readSecret(options?: CallOptions): Promise<SecretSnapshot | undefined>;
  /** Creates the Secret; KubeConflictError (AlreadyExists) when another replica created it first. */
  createSecret(data: SecretData, options?: CallOptions): Promise<SecretSnapshot>;
  /** Replaces the data of `previous`; KubeConflictError (Conflict) when it changed since it was read. */
  updateSecret(data: SecretData, previous: SecretSnapshot, options?: CallOptions): Promise<SecretSnapshot>;
  /** The caBundle of every webhook of the MutatingWebhookConfiguration, in order. */
  readCaBundles(options?: CallOptions): Promise<WebhookCaBundle[]>;
  /**
   * Sets caBundle on the given webhooks only; KubeConflictError (Changed) when one of them no longer has
   * that name at that index.
   */
  patchCaBundles(changes: readonly WebhookCaBundle[], caBundle: string, options?: CallOptions): Promise<void>;
}
