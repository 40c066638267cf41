/** Webhook mode: read the settings, make sure certificates exist, serve until SIGTERM. */
import { setTimeout as delay } from 'node:timers/promises';
import type { Logger } from 'pino';
import { createLogger } from '../logging.js';
import { ConfigError, ConfigErrors } from '../config/errors.js';
import { describeSettings, parseOrShowHelp } from '../config/settings.js';
import { parseWebhookConfig, WEBHOOK_SETTINGS, type WebhookConfig } from '../config/webhook.js';
import type { SelfManagedCertificates } from '../certs/self-managed.js';
import { startWebhookServer } from './server.js';
import type { TlsMaterial } from './tls.js';

const USAGE = `Usage: envoy-shutdown-manager [mode=webhook] [flags]

Runs the mutating admission webhook that injects the shutdown-manager sidecar into Envoy pods.
Every flag can also be set by its environment variable. Drain settings are the defaults that pod
annotations (shutdown-manager.io/<flag>) override.

Flags:
${describeSettings(WEBHOOK_SETTINGS)}
`;

export async function startWebhookFromArgs(args: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  const config = parseOrShowHelp(() => parseWebhookConfig(args, env), USAGE);
  if (config === undefined) return;
  if (config.devCerts && config.selfSignedCerts.enabled) {
    throw new ConfigErrors([
      new ConfigError('flag --dev-certs', 'true', 'false with --self-signed-certs, which manages the certificate itself'),
    ]);
  }
  const logger = createLogger(config.logLevel, 'webhook');

  if (config.devCerts) {
    // Imported on demand, as the Kubernetes client below: certificate generation (@peculiar/x509) costs
    // several MiB of memory that a webhook serving mounted certificates never uses.
    const { ensureDevCertificates } = await import('../certs/files.js');
    const { generated, caFile } = await ensureDevCertificates(config.tlsCertFile, config.tlsKeyFile);
    if (generated) logger.info({ certFile: config.tlsCertFile, caFile }, 'generated development certificates');
  }

  let selfManaged: SelfManagedCertificates | undefined;
  let certificate: TlsMaterial | undefined;
  if (config.selfSignedCerts.enabled) {
    try {
      selfManaged = await createSelfManaged(config, logger);
      certificate = await selfManaged.obtain();
    } catch (error) {
      // Retries with backoff already happened inside obtain(); exiting lets the kubelet's own backoff take over.
      logger.fatal({ err: error }, error instanceof Error ? error.message : String(error));
      process.exitCode = 1;
      return;
    }
  }

  const server = await startWebhookServer(config, logger, certificate === undefined ? {} : { certificate });
  selfManaged?.start((material) => server.useCertificate(material));
  logger.info({ url: server.url, drainDefaults: config.injection.defaults }, 'webhook listening');

  const stop = (signal: NodeJS.Signals): void => {
    // Endpoints are removed while the pod terminates, not before: the API server may still call this replica
    // for a few seconds, and with failurePolicy Ignore a refused call is an Envoy pod without drain protection.
    server.markNotReady();
    logger.info({ signal, delay_ms: config.shutdownDelayMs }, 'shutting down: still serving while endpoints are removed');
    delay(config.shutdownDelayMs)
      .then(() => Promise.all([selfManaged?.stop(), server.close()]))
      .then(
        () => process.exit(0),
        (error: unknown) => {
          logger.error({ err: error }, 'shutdown failed');
          process.exit(1);
        },
      );
  };
  process.once('SIGTERM', stop);
  process.once('SIGINT', stop);
}

/** Imported on demand: only this mode needs the Kubernetes client. */
async function createSelfManaged(config: WebhookConfig, logger: Logger): Promise<SelfManagedCertificates> {
  const [{ SelfManagedCertificates }, { KubeCertificateStore, loadInClusterConfig }, { serviceDnsNames }] = await Promise.all([
    import('../certs/self-managed.js'),
    import('../kube/client.js'),
    import('../certs/generate.js'),
  ]);
  const { namespace, serviceName, secretName, webhookConfigurationName } = config.selfSignedCerts;
  const store = new KubeCertificateStore(loadInClusterConfig(), { namespace, secretName, webhookConfigurationName });
  return new SelfManagedCertificates({
    store,
    dnsNames: serviceDnsNames(serviceName, namespace),
    commonName: `${serviceName}.${namespace}.svc`,
    logger,
  });
}
