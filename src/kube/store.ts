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

/** The MutatingWebhookConfiguration as self-managed TLS reads it: the caBundles, and the certificate published. */
export interface WebhookConfigurationSnapshot {
  /** Every webhook of the configuration, in order. */
  readonly webhooks: readonly WebhookCaBundle[];
  /** The annotation shutdown-manager.io/serving-certificate (PEM); undefined when unset. */
  readonly servingCertificate: string | undefined;
  /** Whether metadata.annotations exists: the first annotation adds the map, guarded by the resourceVersion. */
  readonly hasAnnotations: boolean;
  readonly resourceVersion: string;
}

/** What one patch of the configuration changes; either part may be left out. */
export interface WebhookConfigurationChanges {
  /** These webhooks get this caBundle (PEM). */
  readonly caBundle?: { readonly webhooks: readonly WebhookCaBundle[]; readonly pem: string };
  /** The serving certificate to publish (PEM, no key). */
  readonly servingCertificate?: string;
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
  /** The caBundle of every webhook of the MutatingWebhookConfiguration, and the serving certificate published on it. */
  readWebhookConfiguration(options?: CallOptions): Promise<WebhookConfigurationSnapshot>;
  /**
   * One JSON patch: caBundle on the given webhooks only, and the serving-certificate annotation; KubeConflictError
   * (Changed) when a webhook no longer has that name at that index, or when the configuration had no annotations
   * when read and changed since.
   */
  patchWebhookConfiguration(read: WebhookConfigurationSnapshot, changes: WebhookConfigurationChanges, options?: CallOptions): Promise<void>;
}
