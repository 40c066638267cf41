/** Settings of webhook mode (the default): the TLS admission server and the webhook-wide drain defaults. */
import { DEFAULT_NAMESPACE, DEFAULT_SERVICE, SELF_SIGNED_SECRET_NAME, WEBHOOK_CONFIGURATION_NAME } from '../certs/names.js';
import { POD_DRAIN_SETTINGS, GRACE_PERIOD_SETTING, resolvePodDrain, type PodDrainValues } from './drain.js';
import { type ConfigError, ConfigErrors } from './errors.js';
import { parseLabelSelector, type LabelSelector } from './label-selector.js';
import { makeSidecarResources, RESOURCE_SETTINGS, type SidecarResources } from './resources.js';
import { envName, readSettings, type Setting, type ValuesOf } from './settings.js';
import { LOG_LEVEL_SETTING } from './sidecar.js';
import * as kinds from './values.js';
import { DEFAULT_SIDECAR_IMAGE } from '../version.js';

/** Contour's label, and the default of --pod-selector: the manifests' objectSelector says the same. */
export const DEFAULT_POD_SELECTOR = 'app=envoy';

/** What shapes an injection: shared by the webhook and the offline `inject` command. */
export const INJECTION_SETTINGS = {
  'pod-selector': {
    kind: kinds.labelSelector,
    default: parseLabelSelector(DEFAULT_POD_SELECTOR),
    help: "Which pods get the sidecar, in Kubernetes label-selector syntax (app=envoy; app.kubernetes.io/name=envoy,app.kubernetes.io/component=proxy; tier in (edge,gateway); !legacy). Every review is checked against it; the MutatingWebhookConfiguration's objectSelector must select the same pods (manifests/base makes it from this variable; `check` reports a difference).",
  } satisfies Setting<LabelSelector>,
  ...POD_DRAIN_SETTINGS,
  'termination-grace-period': GRACE_PERIOD_SETTING,
  'protect-shutdown': {
    kind: kinds.boolean,
    default: true,
    help: "Give each pod a random token that its sidecar's /shutdown requires. Needs Kubernetes 1.26+ (older kubelets drop the hooks' headers): set false there.",
  } satisfies Setting<boolean>,
  'sidecar-image': {
    kind: kinds.text,
    default: DEFAULT_SIDECAR_IMAGE,
    help: "Image of the injected shutdown-manager container (normally this very image). The default names this version's tag, the only reference a build knows; a release's install.yaml sets it to the webhook's own image pinned by digest (repository:version@sha256:…), so that a tag pushed again changes no pod.",
  } satisfies Setting<string>,
  'sidecar-image-pull-policy': {
    kind: kinds.oneOf('IfNotPresent', 'Always', 'Never'),
    default: 'IfNotPresent',
    help: 'imagePullPolicy of the injected container.',
  } satisfies Setting<string>,
  'native-sidecar': {
    kind: kinds.boolean,
    default: false,
    help: 'Inject the sidecar as a native sidecar (init container with restartPolicy Always, Kubernetes 1.29+); pods may override with an annotation.',
  } satisfies Setting<boolean>,
  'envoy-drain-flags': {
    kind: kinds.boolean,
    default: true,
    help: "Append --drain-strategy immediate and --drain-time-s <drain deadline> to Envoy's args when its command or args run envoy and neither flag is set (with Envoy's defaults, gradual over 600 s, part of the clients are cut at the deadline); warn when the flags set disagree. false leaves Envoy's args alone; pods may override with an annotation.",
  } satisfies Setting<boolean>,
  ...RESOURCE_SETTINGS,
};

export const WEBHOOK_SETTINGS = {
  ...INJECTION_SETTINGS,
  port: { kind: kinds.listenPort, default: 8443, help: 'HTTPS port of the admission webhook.' } satisfies Setting<number>,
  address: {
    kind: kinds.listenAddress,
    default: '',
    help: 'Address to listen on; empty means every interface, IPv4 and IPv6 (the API server may reach the Service over either).',
  } satisfies Setting<string>,
  'tls-cert-file': {
    kind: kinds.text,
    default: 'certs/tls.crt',
    help: 'Serving certificate (PEM); re-read when the file changes, as cert-manager rotates it.',
  } satisfies Setting<string>,
  'tls-key-file': {
    kind: kinds.text,
    default: 'certs/tls.key',
    help: 'Private key of the serving certificate (PEM).',
  } satisfies Setting<string>,
  'dev-certs': {
    kind: kinds.boolean,
    default: false,
    help: 'Generate a development CA and a certificate for 127.0.0.1/localhost when the files are absent.',
  } satisfies Setting<boolean>,
  'self-signed-certs': {
    kind: kinds.boolean,
    default: false,
    help: 'Manage TLS without cert-manager: keep a CA and serving certificate in a Secret shared by all replicas, patch the caBundle of the MutatingWebhookConfiguration, renew before expiry.',
  } satisfies Setting<boolean>,
  namespace: {
    kind: kinds.text,
    default: DEFAULT_NAMESPACE,
    help: "The webhook's own namespace (set it from the downward API), where the self-signed certificate Secret lives.",
  } satisfies Setting<string>,
  'service-name': {
    kind: kinds.text,
    default: DEFAULT_SERVICE,
    help: 'The Service in front of the webhook: the self-signed certificate is issued for <service>.<namespace>.svc.',
  } satisfies Setting<string>,
  'tls-secret-name': {
    kind: kinds.text,
    default: SELF_SIGNED_SECRET_NAME,
    help: 'With --self-signed-certs: the Secret holding the CA and serving certificate.',
  } satisfies Setting<string>,
  'webhook-configuration-name': {
    kind: kinds.text,
    default: WEBHOOK_CONFIGURATION_NAME,
    help: 'With --self-signed-certs: the MutatingWebhookConfiguration whose caBundle is kept up to date.',
  } satisfies Setting<string>,
  'shutdown-delay': {
    kind: kinds.durationMs,
    default: 5_000,
    help: "After SIGTERM, keep answering (with /readyz failing) this long before closing, while the Service stops sending requests here; keep it well below the pod's terminationGracePeriodSeconds (30 s by default).",
  } satisfies Setting<number>,
  'body-limit': {
    kind: kinds.byteSize,
    default: 3 * 1024 * 1024,
    help: 'Largest AdmissionReview accepted, in bytes (the API server sends at most 3 MiB objects).',
  } satisfies Setting<number>,
  'log-level': LOG_LEVEL_SETTING,
};

/** Self-managed TLS (--self-signed-certs): where the shared certificate lives and whom to tell about its CA. */
export interface SelfSignedCertsConfig {
  readonly enabled: boolean;
  readonly namespace: string;
  readonly serviceName: string;
  readonly secretName: string;
  readonly webhookConfigurationName: string;
}

export interface WebhookConfig {
  readonly port: number;
  readonly address: string;
  readonly tlsCertFile: string;
  readonly tlsKeyFile: string;
  readonly devCerts: boolean;
  readonly bodyLimitBytes: number;
  readonly shutdownDelayMs: number;
  readonly logLevel: string;
  readonly selfSignedCerts: SelfSignedCertsConfig;
  readonly injection: InjectionConfig;
}

/** What the pure injector needs: the sidecar to add and the drain defaults that annotations may override. */
export interface InjectionConfig {
  /** Pods that do not match are admitted unchanged (skip reason not-selected). */
  readonly podSelector: LabelSelector;
  readonly sidecarImage: string;
  readonly sidecarImagePullPolicy: string;
  /** Default for pods without the native-sidecar annotation. */
  readonly nativeSidecar: boolean;
  /** Whether hooks carry a per-pod token that /shutdown requires. */
  readonly protectShutdown: boolean;
  /** Default for pods without the envoy-drain-flags annotation: add Envoy's drain flags, or leave its args alone. */
  readonly envoyDrainFlags: boolean;
  readonly defaults: PodDrainValues;
  /** The sidecar's requests and limits for pods without the resource annotations. */
  readonly sidecarResources: SidecarResources;
}

/** The injection settings as the injector takes them (the offline command reads only these, never the server's). */
export function injectionConfigOf(values: ValuesOf<typeof INJECTION_SETTINGS>): InjectionConfig {
  const sourceOf = (name: string): string => `flag --${name} (or ${envName(name)})`;
  // Both checks run, so that one start names every default that cannot work.
  const errors: ConfigError[] = [];
  const checked = <T>(make: () => T): T | undefined => {
    try {
      return make();
    } catch (error) {
      if (!(error instanceof ConfigErrors)) throw error;
      errors.push(...error.errors);
      return undefined;
    }
  };
  const defaults = checked(() => resolvePodDrain(values, sourceOf));
  const sidecarResources = checked(() => makeSidecarResources(values, sourceOf));
  if (defaults === undefined || sidecarResources === undefined) throw new ConfigErrors(errors);
  return {
    podSelector: values['pod-selector'],
    sidecarImage: values['sidecar-image'],
    sidecarImagePullPolicy: values['sidecar-image-pull-policy'],
    nativeSidecar: values['native-sidecar'],
    protectShutdown: values['protect-shutdown'],
    envoyDrainFlags: values['envoy-drain-flags'],
    defaults,
    sidecarResources,
  };
}

export function parseWebhookConfig(args: readonly string[], env: NodeJS.ProcessEnv): WebhookConfig {
  const values = readSettings(WEBHOOK_SETTINGS, args, env);
  return {
    port: values.port,
    address: values.address,
    tlsCertFile: values['tls-cert-file'],
    tlsKeyFile: values['tls-key-file'],
    devCerts: values['dev-certs'],
    bodyLimitBytes: values['body-limit'],
    shutdownDelayMs: values['shutdown-delay'],
    logLevel: values['log-level'],
    selfSignedCerts: {
      enabled: values['self-signed-certs'],
      namespace: values.namespace,
      serviceName: values['service-name'],
      secretName: values['tls-secret-name'],
      webhookConfigurationName: values['webhook-configuration-name'],
    },
    injection: injectionConfigOf(values),
  };
}
