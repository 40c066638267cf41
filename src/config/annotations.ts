/** Per-pod overrides: annotations under shutdown-manager.io/ override the webhook-wide drain defaults. */
import { POD_DRAIN_SETTINGS, GRACE_PERIOD_SETTING, resolvePodDrain, type PodDrainInput, type PodDrainValues } from './drain.js';
import { ANNOTATION_PREFIX, ANNOTATIONS } from './annotation-names.js';
import { ConfigError, ConfigErrors } from './errors.js';
import type { Setting } from './settings.js';
import { adminSocketPath, expectedForm } from './values.js';
import { formatDuration } from './duration.js';

/**
 * Every per-pod drain setting, by the name of its flag: an annotation with the same suffix overrides it.
 * One table for the webhook's flags, the annotations and the sidecar's flags.
 */
const OVERRIDE_SETTINGS: { readonly [Name in keyof PodDrainInput]: Setting<PodDrainInput[Name]> } = {
  ...POD_DRAIN_SETTINGS,
  'termination-grace-period': GRACE_PERIOD_SETTING,
};

/** The annotations not named like their flags: `admin-port` alone would not say whose admin port. */
const ANNOTATION_ALIASES: Readonly<Record<string, keyof PodDrainInput>> = { 'envoy-admin-port': 'admin-port', 'envoy-admin-address': 'admin-address' };

/** The setting an annotation suffix overrides; own keys only, so `constructor` or `__proto__` is no setting. */
function overriddenSetting(suffix: string): keyof PodDrainInput | undefined {
  if (Object.hasOwn(ANNOTATION_ALIASES, suffix)) return ANNOTATION_ALIASES[suffix];
  if (Object.hasOwn(OVERRIDE_SETTINGS, suffix) && !Object.values(ANNOTATION_ALIASES).includes(suffix as keyof PodDrainInput)) {
    return suffix as keyof PodDrainInput;
  }
  return undefined;
}

const KNOWN_SUFFIXES = new Set([
  ...Object.keys(OVERRIDE_SETTINGS).filter((name) => overriddenSetting(name) !== undefined),
  ...Object.keys(ANNOTATION_ALIASES),
  ...Object.values(ANNOTATIONS).map((key) => key.slice(ANNOTATION_PREFIX.length)),
]);

/** Kubernetes' own default, which the API server has set on every pod before admission. */
const KUBERNETES_DEFAULT_GRACE_SECONDS = 30;

export interface ResolvedPlan {
  readonly plan: PodDrainValues;
  /** Annotations under our prefix that mean nothing (most likely typos): reported, not fatal. */
  readonly unknownAnnotations: readonly string[];
  /** What the annotations do that the pod's author may not expect (a grace period lowered). */
  readonly warnings: readonly string[];
}

/**
 * The pod's drain plan: defaults, overridden by annotations. Throws ConfigErrors naming every bad
 * annotation, its value and the accepted form, so that the webhook can deny the pod with that message.
 *
 * The grace period: an annotation is taken as asked (even below the pod's value, with a warning: the API server
 * defaults every pod to 30 s, so the pod's value cannot tell intent from default); otherwise the webhook-wide value
 * only raises the pod's, never lowers it. The plan is checked once, with the grace period it will have.
 */
export function resolvePodDrainPlan(
  annotations: Readonly<Record<string, string>> | undefined,
  defaults: PodDrainValues,
  podGracePeriodSeconds: number | undefined,
): ResolvedPlan {
  const { 'drain-timeout': _derivedFromGracePeriod, ...values } = defaults;
  values['termination-grace-period'] = Math.max(
    defaults['termination-grace-period'],
    podGracePeriodSeconds ?? KUBERNETES_DEFAULT_GRACE_SECONDS,
  );
  const annotationOf = new Map<keyof PodDrainInput, string>();
  const errors: ConfigError[] = [];
  const unknownAnnotations: string[] = [];

  for (const [key, raw] of Object.entries(annotations ?? {})) {
    if (!key.startsWith(ANNOTATION_PREFIX)) continue;
    const suffix = key.slice(ANNOTATION_PREFIX.length);
    const name = overriddenSetting(suffix);
    if (name === undefined) {
      if (!KNOWN_SUFFIXES.has(suffix)) unknownAnnotations.push(key);
      continue;
    }
    annotationOf.set(name, key);
    const { kind } = OVERRIDE_SETTINGS[name];
    const value = kind.parse(String(raw));
    if (value === undefined) errors.push(new ConfigError(`annotation ${key}`, String(raw), expectedForm(kind, String(raw)), suffix));
    else (values as Record<keyof PodDrainInput, unknown>)[name] = value;
  }
  const socketKey = annotationOf.get('admin-address');
  const portKey = annotationOf.get('admin-port');
  if (portKey !== undefined && adminSocketPath(values['admin-address']) !== undefined) {
    const expected = `no port: Envoy's admin API is on the Unix socket ${values['admin-address']}${socketKey === undefined ? ' (the webhook default)' : ` (annotation ${socketKey})`}; remove this annotation, or set ${ANNOTATIONS.envoyAdminAddress} to the admin host`;
    errors.push(new ConfigError(`annotation ${portKey}`, String(values['admin-port']), expected, 'envoy-admin-port'));
  }
  if (errors.length > 0) throw new ConfigErrors(errors);

  const sourceOf = (name: keyof PodDrainInput): string => {
    const key = annotationOf.get(name);
    return key === undefined ? `default ${name}` : `annotation ${key}`;
  };
  // Without an admin annotation the injector may still find the admin port in the pod: it checks the clash then.
  const adminPortKnown = annotationOf.has('admin-port') || annotationOf.has('admin-address');
  const plan = resolvePodDrain(values, sourceOf, { adminPortKnown });
  const lowered = loweredGracePeriodWarning(annotationOf.get('termination-grace-period'), plan['termination-grace-period'], podGracePeriodSeconds);
  const warnings = [lowered, quietPeriodWarning(plan)].filter((warning) => warning !== undefined);
  return { plan, unknownAnnotations, warnings };
}

/**
 * A quiet period that reaches the deadline holds every drain to it (it counts from the drain's first read): not an
 * error, since the deadline still ends the drain, but rarely what the pod's author wants. Under 120 characters.
 */
function quietPeriodWarning(plan: PodDrainValues): string | undefined {
  if (plan['quiet-period'] === 0 || plan['drain-delay'] + plan['quiet-period'] < plan['drain-timeout']) return undefined;
  return `quiet-period ${formatDuration(plan['quiet-period'])} reaches the drain deadline ${formatDuration(plan['drain-timeout'])}: every drain lasts to it`;
}

/** The annotation is taken as asked, even below the pod's own grace period: said, since the pod's author may not expect it. */
function loweredGracePeriodWarning(key: string | undefined, planned: number, podGracePeriodSeconds: number | undefined): string | undefined {
  if (key === undefined || podGracePeriodSeconds === undefined || planned >= podGracePeriodSeconds) return undefined;
  return `annotation ${key} lowers the grace period from ${podGracePeriodSeconds}s to ${planned}s`;
}
