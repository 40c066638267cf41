/**
 * The cluster as the checks see it: API objects read by read.ts, with nothing else in them. Types only
 * (`import type`): the checks stay pure, and nothing here loads @kubernetes/client-node.
 */
import type {
  V1Container,
  V1Deployment,
  V1EndpointSlice,
  V1MutatingWebhook,
  V1MutatingWebhookConfiguration,
  V1OwnerReference,
  V1Pod,
  V1PodDisruptionBudget,
  V1Service,
} from '@kubernetes/client-node';
import type { CertManagerCertificate } from './certificate.js';

export type { V1Container, V1Deployment, V1EndpointSlice, V1MutatingWebhook, V1MutatingWebhookConfiguration, V1OwnerReference, V1Pod, V1PodDisruptionBudget, V1Service };

/** The webhook's objects; each is undefined when absent (or not looked up because what leads to it is absent). */
export interface WebhookObjects {
  readonly configurationName: string;
  readonly configuration: V1MutatingWebhookConfiguration | undefined;
  /** The Service the configuration's first webhook calls. */
  readonly service: V1Service | undefined;
  readonly endpointSlices: readonly V1EndpointSlice[];
  readonly deployment: V1Deployment | undefined;
  /** Every PodDisruptionBudget in the webhook's namespace; the check finds the one that covers the Deployment. */
  readonly disruptionBudgets: readonly V1PodDisruptionBudget[];
  /**
   * The cert-manager Certificate the configuration's cert-manager.io/inject-ca-from annotation names, when it exists:
   * the public record of the serving certificate. No Secret is read (its private key comes with it).
   */
  readonly certificate: CertManagerCertificate | undefined;
}

/** The Envoy pods of one namespace, as its pod list returned them. */
export interface NamespacePods {
  readonly namespace: string;
  /** Labelled shutdown-manager.io/inject=enabled; false for namespaces scanned only with --all-namespaces. */
  readonly optedIn: boolean;
  readonly pods: readonly V1Pod[];
}

/** The owner of a ReplicaSet ("namespace/name" of the ReplicaSet), read for pods that need a restart. */
export type ReplicaSetOwners = ReadonlyMap<string, V1OwnerReference | undefined>;

export interface ClusterSnapshot {
  readonly webhook: WebhookObjects;
  readonly namespaces: readonly NamespacePods[];
  readonly replicaSetOwners: ReplicaSetOwners;
  /** -n/--namespace: the one namespace scanned; absent when every opted-in one was. */
  readonly scope?: string;
}
