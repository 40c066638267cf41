/** Webhook mode: read the settings, make sure certificates exist, serve until SIGTERM. */
import { setTimeout as delay } from 'node:timers/promises';
import { createLogger } from '../logging.js';
import { formatLabelSelector, toObjectSelector } from '../config/label-selector.js';
import { describeSettings, parseOrShowHelp } from '../config/settings.js';
import { parseWebhookConfig, WEBHOOK_SETTINGS } from '../config/webhook.js';
import { openTlsSource } from '../certs/source.js';
import { EXIT_FAILURE } from '../errors.js';
import { startWebhookServer } from './server.js';

const webhookUsage = (): string => `Usage: envoy-shutdown-manager [mode=webhook] [flags]

Runs the mutating admission webhook that injects the shutdown-manager sidecar into Envoy pods.
Every flag can also be set by its environment variable. Drain settings are the defaults that pod
annotations (shutdown-manager.io/<flag>) override.

Flags:
${describeSettings(WEBHOOK_SETTINGS)}
`;

export async function startWebhookFromArgs(args: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  const config = parseOrShowHelp(() => parseWebhookConfig(args, env), webhookUsage);
  if (config === undefined) return;
  const logger = createLogger(config.logLevel, 'webhook');

  const tls = await openTlsSource(config, logger);
  if (tls === undefined) {
    process.exitCode = EXIT_FAILURE; // self-managed TLS gave up, and said why in the log
    return;
  }
  const server = await startWebhookServer(config, logger, { certificate: tls.certificate });
  tls.start((material) => server.useCertificate(material));
  // The selector in both spellings: the objectSelector of the MutatingWebhookConfiguration must select the same pods.
  const { podSelector } = config.injection;
  logger.info(
    { url: server.url, podSelector: formatLabelSelector(podSelector), objectSelector: toObjectSelector(podSelector), drainDefaults: config.injection.defaults },
    'webhook listening',
  );

  const stop = (signal: NodeJS.Signals): void => {
    // Endpoints are removed while the pod terminates, not before: the API server may still call this replica
    // for a few seconds, and with failurePolicy Ignore a refused call is an Envoy pod without drain protection.
    server.markNotReady();
    logger.info({ signal, delay_ms: config.shutdownDelayMs }, 'shutting down: still serving while endpoints are removed');
    delay(config.shutdownDelayMs)
      .then(() => Promise.all([tls.stop(), server.close()]))
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
