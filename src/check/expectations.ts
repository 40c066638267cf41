/**
 * What the pods should look like, read from the running webhook's Deployment (its flags and environment) with
 * the command line on top: the sidecar image it injects, the pods it selects, the Secret it serves from.
 */
import { SELF_SIGNED_SECRET_NAME, TLS_SECRET_NAME } from '../certs/names.js';
import { parseLabelSelector, type LabelSelector } from '../config/label-selector.js';
import { envName } from '../config/settings.js';
import * as kinds from '../config/values.js';
import { DEFAULT_POD_SELECTOR } from '../config/webhook.js';
import { DEFAULT_SIDECAR_IMAGE, PROJECT_VERSION } from '../version.js';
import type { V1Container, V1Deployment } from '@kubernetes/client-node';

export interface Expectations {
  readonly podSelector: LabelSelector;
  /** Where the selector came from, for the report: `--pod-selector`, the Deployment, or the default. */
  readonly podSelectorFrom: string;
  readonly sidecarImage: string;
  readonly injectorVersion: string;
}

/** The webhook container: the one named webhook, else the first. */
function webhookContainer(deployment: V1Deployment | undefined): V1Container | undefined {
  const containers = deployment?.spec?.template.spec?.containers ?? [];
  return containers.find((container) => container.name === 'webhook') ?? containers[0];
}

/** A setting of the webhook as its container sets it: a flag (`--name=value`, `--name value`), then a literal env value. */
export function webhookSetting(deployment: V1Deployment | undefined, name: string): string | undefined {
  const container = webhookContainer(deployment);
  if (container === undefined) return undefined;
  const args = [...(container.command ?? []), ...(container.args ?? [])];
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] as string;
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3);
    if (arg === `--${name}`) return args[i + 1] === undefined || args[i + 1]?.startsWith('--') ? 'true' : args[i + 1];
  }
  return container.env?.find((variable) => variable.name === envName(name))?.value || undefined;
}

export function expectationsOf(deployment: V1Deployment | undefined, podSelectorFlag: string | undefined): Expectations {
  const fromDeployment = webhookSetting(deployment, 'pod-selector');
  const [selector, from] =
    podSelectorFlag !== undefined
      ? [podSelectorFlag, '--pod-selector']
      : fromDeployment !== undefined
        ? [fromDeployment, 'the webhook Deployment']
        : [DEFAULT_POD_SELECTOR, 'the default'];
  return {
    podSelector: parseLabelSelector(selector),
    podSelectorFrom: from,
    sidecarImage: webhookSetting(deployment, 'sidecar-image') ?? DEFAULT_SIDECAR_IMAGE,
    injectorVersion: deployment?.metadata?.labels?.['app.kubernetes.io/version'] ?? PROJECT_VERSION,
  };
}

/** Whether the webhook runs with --self-signed-certs (a flag or its variable, in any spelling the webhook takes). */
export function selfManaged(deployment: V1Deployment | undefined): boolean {
  return kinds.boolean.parse(webhookSetting(deployment, 'self-signed-certs') ?? 'false') === true;
}

/**
 * The Secret the webhook serves from: with --self-signed-certs, the one it manages (--tls-secret-name);
 * otherwise the Secret volume it mounts (cert-manager's, or one made by hand).
 */
export function servingSecretName(deployment: V1Deployment | undefined): string {
  if (selfManaged(deployment)) {
    return webhookSetting(deployment, 'tls-secret-name') ?? SELF_SIGNED_SECRET_NAME;
  }
  const volumes = deployment?.spec?.template.spec?.volumes ?? [];
  return volumes.find((volume) => volume.secret?.secretName !== undefined)?.secret?.secretName ?? TLS_SECRET_NAME;
}
