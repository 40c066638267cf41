/** Per-pod overrides: annotations under shutdown-manager.io/ override the webhook-wide drain defaults. */
import {
  DRAIN_SETTINGS,
  drainSettingsOf,
  GRACE_PERIOD_SETTING,
  makeDrainPlan,
  type DrainDefaults,
  type PodDrainPlan,
} from './drain.js';
import { ConfigError, ConfigErrors } from './errors.js';
import type { Setting } from './settings.js';
import { expectedForm } from './values.js';

export const ANNOTATION_PREFIX = 'shutdown-manager.io/';

export const ANNOTATIONS = {
  inject: `${ANNOTATION_PREFIX}inject`,
  envoyContainer: `${ANNOTATION_PREFIX}envoy-container`,
  status: `${ANNOTATION_PREFIX}status`,
  nativeSidecar: `${ANNOTATION_PREFIX}native-sidecar`,
  envoyAdminPort: `${ANNOTATION_PREFIX}envoy-admin-port`,
  envoyDrainFlags: `${ANNOTATION_PREFIX}envoy-drain-flags`,
  /** App containers whose preStop waits for Envoy's drain to end (comma-separated names). */
  waitContainers: `${ANNOTATION_PREFIX}wait-containers`,
  sidecarCpuRequest: `${ANNOTATION_PREFIX}sidecar-cpu-request`,
  sidecarCpuLimit: `${ANNOTATION_PREFIX}sidecar-cpu-limit`,
  sidecarMemoryRequest: `${ANNOTATION_PREFIX}sidecar-memory-request`,
  sidecarMemoryLimit: `${ANNOTATION_PREFIX}sidecar-memory-limit`,
} as const;

/** Annotation suffix → the drain setting it overrides. */
const OVERRIDES: Readonly<Record<string, keyof DrainDefaults>> = {
  'check-interval': 'check-interval',
  'check-delay': 'check-delay',
  'drain-delay': 'drain-delay',
  'recover-envoy': 'recover-envoy',
  'min-open-connections': 'min-open-connections',
  'termination-grace-period': 'termination-grace-period',
  'envoy-admin-port': 'admin-port',
  'serve-port': 'serve-port',
  listeners: 'listeners',
};

const OVERRIDE_SETTINGS: { readonly [Name in keyof DrainDefaults]: Setting<DrainDefaults[Name]> } = {
  ...DRAIN_SETTINGS,
  'termination-grace-period': GRACE_PERIOD_SETTING,
};

const KNOWN_SUFFIXES = new Set([
  ...Object.keys(OVERRIDES),
  ...Object.values(ANNOTATIONS).map((key) => key.slice(ANNOTATION_PREFIX.length)),
]);

/** Kubernetes' own default, which the API server has set on every pod before admission. */
const KUBERNETES_DEFAULT_GRACE_SECONDS = 30;

export interface ResolvedPlan {
  readonly plan: PodDrainPlan;
  /** Annotations under our prefix that mean nothing (most likely typos): reported, not fatal. */
  readonly unknownAnnotations: readonly string[];
}

/**
 * The pod's drain plan: defaults, overridden by annotations. Throws ConfigErrors naming every bad
 * annotation, its value and the accepted form, so that the webhook can deny the pod with that message.
 *
 * The grace period: an annotation is taken as asked (even below the pod's value: the API server defaults
 * every pod to 30 s, so the pod's value cannot tell intent from default); otherwise the webhook-wide value
 * only raises the pod's, never lowers it. The plan is checked once, with the grace period it will have.
 */
export function resolvePodDrainPlan(
  annotations: Readonly<Record<string, string>> | undefined,
  defaults: PodDrainPlan,
  podGracePeriodSeconds: number | undefined,
): ResolvedPlan {
  const values = drainSettingsOf(defaults);
  values['termination-grace-period'] = Math.max(
    defaults.terminationGracePeriodSeconds,
    podGracePeriodSeconds ?? KUBERNETES_DEFAULT_GRACE_SECONDS,
  );
  const annotationOf = new Map<keyof DrainDefaults, string>();
  const errors: ConfigError[] = [];
  const unknownAnnotations: string[] = [];

  for (const [key, raw] of Object.entries(annotations ?? {})) {
    if (!key.startsWith(ANNOTATION_PREFIX)) continue;
    const suffix = key.slice(ANNOTATION_PREFIX.length);
    // Own keys only: `constructor` or `__proto__` must read as unknown, not as Object.prototype's members.
    const name = Object.hasOwn(OVERRIDES, suffix) ? OVERRIDES[suffix] : undefined;
    if (name === undefined) {
      if (!KNOWN_SUFFIXES.has(suffix)) unknownAnnotations.push(key);
      continue;
    }
    annotationOf.set(name, key);
    const { kind } = OVERRIDE_SETTINGS[name];
    const value = kind.parse(String(raw));
    if (value === undefined) errors.push(new ConfigError(`annotation ${key}`, String(raw), expectedForm(kind, String(raw)), suffix));
    else (values as Record<keyof DrainDefaults, unknown>)[name] = value;
  }
  if (errors.length > 0) throw new ConfigErrors(errors);

  const sourceOf = (name: keyof DrainDefaults): string => {
    const key = annotationOf.get(name);
    return key === undefined ? `default ${name}` : `annotation ${key}`;
  };
  return { plan: makeDrainPlan(values, sourceOf), unknownAnnotations };
}
