/**
 * The names of the pod annotations, apart from the code that reads them (annotations.ts, resources.ts): the
 * sidecar names one in a message, and must not load the tables that resolve them.
 */
export const ANNOTATION_PREFIX = 'shutdown-manager.io/';

export const ANNOTATIONS = {
  inject: `${ANNOTATION_PREFIX}inject`,
  envoyContainer: `${ANNOTATION_PREFIX}envoy-container`,
  status: `${ANNOTATION_PREFIX}status`,
  nativeSidecar: `${ANNOTATION_PREFIX}native-sidecar`,
  envoyAdminPort: `${ANNOTATION_PREFIX}envoy-admin-port`,
  envoyAdminAddress: `${ANNOTATION_PREFIX}envoy-admin-address`,
  envoyDrainFlags: `${ANNOTATION_PREFIX}envoy-drain-flags`,
  /** App containers whose preStop waits for Envoy's drain to end (comma-separated names). */
  waitContainers: `${ANNOTATION_PREFIX}wait-containers`,
  sidecarCpuRequest: `${ANNOTATION_PREFIX}sidecar-cpu-request`,
  sidecarCpuLimit: `${ANNOTATION_PREFIX}sidecar-cpu-limit`,
  sidecarMemoryRequest: `${ANNOTATION_PREFIX}sidecar-memory-request`,
  sidecarMemoryLimit: `${ANNOTATION_PREFIX}sidecar-memory-limit`,
} as const;

/**
 * Annotations the webhook writes on its own MutatingWebhookConfiguration, not on pods: self-managed TLS
 * (src/certs/reconcile.ts) publishes there the certificate it serves, and `check` verifies it (src/check/certificate.ts).
 */
export const CONFIGURATION_ANNOTATIONS = {
  /** The serving certificate and any intermediates, PEM, never the key. */
  servingCertificate: `${ANNOTATION_PREFIX}serving-certificate`,
} as const;
