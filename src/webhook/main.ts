/** Webhook mode: read the settings, make sure certificates exist, serve until SIGTERM. */
import pino from 'pino';
import { describeSettings, HelpRequested } from '../config/settings.js';
import { parseWebhookConfig, WEBHOOK_SETTINGS, type WebhookConfig } from '../config/webhook.js';
import { ensureDevCertificates } from '../certs/files.js';
import { startWebhookServer } from './server.js';

const USAGE = `Usage: envoy-shutdown-manager [mode=webhook] [flags]

Runs the mutating admission webhook that injects the shutdown-manager sidecar into Envoy pods.
Every flag can also be set by its environment variable. Drain settings are the defaults that pod
annotations (shutdown-manager.io/<flag>) override.

Flags:
${describeSettings(WEBHOOK_SETTINGS)}
`;

export async function startWebhookFromArgs(args: readonly string[], env: NodeJS.ProcessEnv): Promise<void> {
  let config: WebhookConfig;
  try {
    config = parseWebhookConfig(args, env);
  } catch (error) {
    if (!(error instanceof HelpRequested)) throw error;
    process.stdout.write(USAGE);
    return;
  }
  const logger = pino({ level: config.logLevel, base: { mode: 'webhook' } });

  if (config.devCerts) {
    const { generated, caFile } = await ensureDevCertificates(config.tlsCertFile, config.tlsKeyFile);
    if (generated) logger.info({ certFile: config.tlsCertFile, caFile }, 'generated development certificates');
  }

  const server = await startWebhookServer(config, logger);
  logger.info({ url: server.url, drainDefaults: config.injection.defaults }, 'webhook listening');

  const stop = (signal: NodeJS.Signals): void => {
    logger.info({ signal }, 'shutting down: finishing in-flight reviews');
    server.close().then(
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
