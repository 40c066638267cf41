/**
 * The drain parameters: webhook-wide defaults (flags/env of the webhook), per-pod overrides (annotations),
 * and the flags the injected sidecar is started with. Defaults are Contour's shutdown-manager's.
 */
import { formatDuration } from './duration.js';
import { ConfigError } from './errors.js';
import type { Setting, ValuesOf } from './settings.js';
import * as kinds from './values.js';

export const DRAIN_SETTINGS = {
  'check-interval': {
    kind: kinds.positiveDurationMs,
    default: 5_000,
    help: 'How often to poll Envoy for open downstream connections once the check delay is over.',
  } satisfies Setting<number>,
  'check-delay': {
    kind: kinds.durationMs,
    default: 60_000,
    help: 'How long to wait after telling Envoy to drain before the first poll (load balancers deregister meanwhile).',
  } satisfies Setting<number>,
  'min-open-connections': {
    kind: kinds.connectionCount,
    default: 0,
    help: 'The drain is over when open downstream connections are at or below this number.',
  } satisfies Setting<number>,
  'serve-port': {
    kind: kinds.port,
    default: 8090,
    help: "The sidecar's HTTP port for /healthz, /shutdown, /drain and /metrics.",
  } satisfies Setting<number>,
  'admin-port': {
    kind: kinds.port,
    default: 9001,
    help: "Envoy's admin port, reached on 127.0.0.1 inside the pod.",
  } satisfies Setting<number>,
};

export type DrainDefaults = ValuesOf<typeof DRAIN_SETTINGS> & { 'termination-grace-period': number };

/** Everything the injector needs to know about one pod's drain, resolved from defaults and annotations. */
export interface PodDrainPlan {
  readonly checkIntervalMs: number;
  readonly checkDelayMs: number;
  readonly minOpenConnections: number;
  readonly servePort: number;
  readonly adminPort: number;
  readonly terminationGracePeriodSeconds: number;
  /** When the sidecar gives up waiting: the grace period minus a margin for Envoy's own SIGTERM. */
  readonly drainTimeoutMs: number;
}

export const GRACE_PERIOD_SETTING = {
  kind: kinds.gracePeriodSeconds,
  default: 300,
  help: "Bounds the whole drain. The webhook-wide value raises a pod's terminationGracePeriodSeconds, never lowers it; the pod annotation sets it as given.",
} satisfies Setting<number>;

/**
 * The margin kept between the sidecar's deadline and the kubelet's SIGKILL, so that the preStop hooks
 * return and Envoy still receives SIGTERM: a tenth of the grace period, between 1 s and 10 s.
 */
export function drainTimeoutMs(gracePeriodSeconds: number): number {
  const graceMs = gracePeriodSeconds * 1000;
  const marginMs = Math.min(10_000, Math.max(1_000, Math.round(graceMs / 10)));
  return graceMs - marginMs;
}

/** Resolves the plan and checks that its parts fit together; `sourceOf` names where each value came from. */
export function makeDrainPlan(values: DrainDefaults, sourceOf: (name: keyof DrainDefaults) => string): PodDrainPlan {
  const plan: PodDrainPlan = {
    checkIntervalMs: values['check-interval'],
    checkDelayMs: values['check-delay'],
    minOpenConnections: values['min-open-connections'],
    servePort: values['serve-port'],
    adminPort: values['admin-port'],
    terminationGracePeriodSeconds: values['termination-grace-period'],
    drainTimeoutMs: drainTimeoutMs(values['termination-grace-period']),
  };
  if (plan.checkDelayMs >= plan.drainTimeoutMs) {
    throw new ConfigError(
      sourceOf('check-delay'),
      formatDuration(plan.checkDelayMs),
      `a check delay shorter than the drain deadline of ${formatDuration(plan.drainTimeoutMs)} ` +
        `(termination-grace-period ${plan.terminationGracePeriodSeconds}s minus a safety margin); ` +
        `lower check-delay or raise termination-grace-period`,
    );
  }
  if (plan.servePort === plan.adminPort) {
    throw new ConfigError(
      sourceOf('serve-port'),
      String(plan.servePort),
      `a port other than Envoy's admin port ${plan.adminPort}`,
    );
  }
  return plan;
}
