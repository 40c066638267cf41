/**
 * Where the webhook's serving certificate comes from, chosen here and nowhere else:
 *   --self-signed-certs  a Secret shared by the replicas, its CA given to the API server and renewed while
 *                        running (self-managed.ts);
 *   --dev-certs          files generated once for local use (files.ts), then served as mounted files;
 *   otherwise            the files of --tls-cert-file/--tls-key-file (cert-manager, a Secret volume),
 *                        reloaded when they change (mounted.ts).
 */
import type { Logger } from 'pino';
import { ConfigError, ConfigErrors } from '../config/errors.js';
import type { SelfSignedCertsConfig, WebhookConfig } from '../config/webhook.js';
import { MountedCertificate } from './mounted.js';
import type { TlsSource } from './tls-source.js';

export type { TlsSource } from './tls-source.js';


export type TlsSettings = Pick<WebhookConfig, 'tlsCertFile' | 'tlsKeyFile' | 'devCerts' | 'selfSignedCerts'>;

export interface TlsSourceOptions {
  /** How often mounted files are polled for changes, besides fs.watch. */
  readonly pollIntervalMs?: number;
}

/**
 * The source the settings name, with its first certificate. Self-managed TLS that cannot start (after its
 * retries) is logged as fatal, for the pod's log, and resolves undefined: the caller exits, and the
 * kubelet's backoff takes over. Any other failure throws (TlsFileError, DevCertificatesError...).
 */
export async function openTlsSource(settings: TlsSettings, logger: Logger, options: TlsSourceOptions = {}): Promise<TlsSource | undefined> {
  if (settings.devCerts && settings.selfSignedCerts.enabled) {
    throw new ConfigErrors([
      new ConfigError('flag --dev-certs', 'true', 'false with --self-signed-certs, which manages the certificate itself'),
    ]);
  }
  if (settings.selfSignedCerts.enabled) return openSelfManaged(settings.selfSignedCerts, logger);
  if (settings.devCerts) {
    // Imported on demand, as self-managed TLS is: certificate generation (@peculiar/x509) costs memory that
    // a webhook serving mounted certificates never uses.
    const { ensureDevCertificates } = await import('./files.js');
    const { generated, caFile } = await ensureDevCertificates(settings.tlsCertFile, settings.tlsKeyFile);
    if (generated) logger.info({ certFile: settings.tlsCertFile, caFile }, 'generated development certificates');
  }
  return new MountedCertificate({
    certFile: settings.tlsCertFile,
    keyFile: settings.tlsKeyFile,
    logger,
    ...(options.pollIntervalMs === undefined ? {} : { pollIntervalMs: options.pollIntervalMs }),
  });
}

async function openSelfManaged(settings: SelfSignedCertsConfig, logger: Logger): Promise<TlsSource | undefined> {
  try {
    // Imported on demand: only self-managed TLS needs the Kubernetes client.
    const [{ SelfManagedCertificates }, { KubeCertificateStore, loadInClusterConfig }, { serviceDnsNames }] = await Promise.all([
      import('./self-managed.js'),
      import('../kube/client.js'),
      import('./generate.js'),
    ]);
    const { namespace, serviceName, secretName, webhookConfigurationName } = settings;
    const store = new KubeCertificateStore(loadInClusterConfig(), { namespace, secretName, webhookConfigurationName });
    const manager = new SelfManagedCertificates({
      store,
      dnsNames: serviceDnsNames(serviceName, namespace),
      commonName: `${serviceName}.${namespace}.svc`,
      logger,
    });
    return { certificate: await manager.obtain(), start: (apply) => manager.start(apply), stop: () => manager.stop() };
  } catch (error) {
    // Retries with backoff already happened inside obtain(); exiting lets the kubelet's own backoff take over.
    logger.fatal({ err: error }, error instanceof Error ? error.message : String(error));
    return undefined;
  }
}
