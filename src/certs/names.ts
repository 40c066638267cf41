/**
 * Names shared by `npm run certs` and manifests/ (test/manifests checks that both agree): the hints the
 * CLI prints must name the Secret the Deployment mounts and the configuration the API server reads.
 */
export const DEFAULT_SERVICE = 'envoy-shutdown-manager';
export const DEFAULT_NAMESPACE = 'envoy-shutdown-manager';
/** Secret of type kubernetes.io/tls mounted by the webhook Deployment (written by cert-manager or by hand). */
export const TLS_SECRET_NAME = 'envoy-shutdown-manager-tls';
export const WEBHOOK_CONFIGURATION_NAME = 'shutdown-manager.io';
/** Secret where --self-signed-certs keeps the CA and serving certificate it manages. */
export const SELF_SIGNED_SECRET_NAME = 'envoy-shutdown-manager-self-signed';
export const WEBHOOK_NAME = 'inject.shutdown-manager.io';
/** File names inside --out; tls.crt/tls.key are also the keys of a kubernetes.io/tls Secret. */
export const CA_CERT_FILE = 'ca.crt';
export const CA_KEY_FILE = 'ca.key';
export const TLS_CERT_FILE = 'tls.crt';
export const TLS_KEY_FILE = 'tls.key';
