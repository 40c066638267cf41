/**
 * The drain parameters: webhook-wide defaults (flags/env of the webhook), per-pod overrides (annotations),
 * and the flags the injected sidecar is started with. Defaults are Contour's shutdown-manager's.
 */
import { formatDuration } from './duration.js';
import { ConfigError, ConfigErrors } from './errors.js';
import type { Setting, ValuesOf } from './settings.js';
import * as kinds from './values.js';

export const POD_DRAIN_SETTINGS = {
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
  'drain-delay': {
    kind: kinds.durationMs,
    default: 0,
    help: "How long to wait after /shutdown before failing Envoy's health checks, while Envoy still serves: for load balancers that must see the endpoint leave first (externalTrafficPolicy: Local). Counts against the drain deadline.",
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
  listeners: {
    kind: kinds.nameList,
    default: [] as readonly string[],
    help: 'Count only these listeners (stat names such as 0.0.0.0_8080); empty counts every listener but admin.',
  } satisfies Setting<readonly string[]>,
  'recover-envoy': {
    kind: kinds.boolean,
    default: true,
    help: 'When the sidecar starts and finds Envoy left failing its health checks or draining (no pod deletion can be under way then), bring it back: POST /healthcheck/ok, or POST /quitquitquit when its listeners were drained, so that the kubelet restarts it.',
  } satisfies Setting<boolean>,
};

export type PodDrainValues = ValuesOf<typeof POD_DRAIN_SETTINGS> & { 'termination-grace-period': number };

/** Everything the injector needs to know about one pod's drain, resolved from defaults and annotations. */
export interface PodDrainPlan {
  readonly checkIntervalMs: number;
  readonly checkDelayMs: number;
  /** Wait between /shutdown and POST /healthcheck/fail. */
  readonly drainDelayMs: number;
  readonly minOpenConnections: number;
  readonly servePort: number;
  readonly adminPort: number;
  /** Listener stat names to count; empty counts them all. */
  readonly listeners: readonly string[];
  /** Bring back an Envoy found left draining when the sidecar starts. */
  readonly recoverEnvoy: boolean;
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
  // A pod may allow days; the sidecar's timers, like every duration here, stop at a day.
  return Math.min(graceMs - marginMs, kinds.MAX_DURATION_MS);
}

/** The plan's values under their setting names: the one place where setting names meet plan fields. */
export function podDrainValuesOf(plan: PodDrainPlan): PodDrainValues {
  return {
    'check-interval': plan.checkIntervalMs,
    'check-delay': plan.checkDelayMs,
    'drain-delay': plan.drainDelayMs,
    'min-open-connections': plan.minOpenConnections,
    'serve-port': plan.servePort,
    'admin-port': plan.adminPort,
    listeners: plan.listeners,
    'recover-envoy': plan.recoverEnvoy,
    'termination-grace-period': plan.terminationGracePeriodSeconds,
  };
}

/** Resolves the plan and checks that its parts fit together; `sourceOf` names where each value came from. */
export function makeDrainPlan(values: PodDrainValues, sourceOf: (name: keyof PodDrainValues) => string): PodDrainPlan {
  const plan: PodDrainPlan = {
    checkIntervalMs: values['check-interval'],
    checkDelayMs: values['check-delay'],
    drainDelayMs: values['drain-delay'],
    minOpenConnections: values['min-open-connections'],
    servePort: values['serve-port'],
    adminPort: values['admin-port'],
    listeners: values.listeners,
    recoverEnvoy: values['recover-envoy'],
    terminationGracePeriodSeconds: values['termination-grace-period'],
    drainTimeoutMs: drainTimeoutMs(values['termination-grace-period']),
  };
  const errors = drainTimingErrors(
    plan,
    sourceOf,
    'lower check-delay or drain-delay, or raise termination-grace-period (the deadline is the grace period minus a safety margin)',
  );
  if (errors.length > 0) throw new ConfigErrors(errors);
  return plan;
}

/**
 * What makes a drain impossible whatever Envoy does: no time left to poll, or the sidecar on Envoy's admin
 * port. Shared by the webhook (per pod) and the sidecar (its own flags), each with its own remedy.
 */
export function drainTimingErrors(
  plan: Pick<PodDrainPlan, 'checkDelayMs' | 'drainDelayMs' | 'drainTimeoutMs' | 'servePort' | 'adminPort'>,
  sourceOf: (name: 'check-delay' | 'drain-delay' | 'serve-port') => string,
  deadlineRemedy: string,
): ConfigError[] {
  const errors: ConfigError[] = [];
  const deadline = formatDuration(plan.drainTimeoutMs);
  if (plan.checkDelayMs >= plan.drainTimeoutMs) {
    const expected = `a check delay shorter than the drain deadline of ${deadline}; ${deadlineRemedy}`;
    errors.push(new ConfigError(sourceOf('check-delay'), formatDuration(plan.checkDelayMs), expected, 'check-delay'));
  } else if (plan.drainDelayMs + plan.checkDelayMs >= plan.drainTimeoutMs) {
    // The count may end the drain only check-delay after the (delayed) health-check failure: both must fit.
    const expected = `a drain delay that, added to the check delay of ${formatDuration(plan.checkDelayMs)}, stays below the drain deadline of ${deadline}; ${deadlineRemedy}`;
    errors.push(new ConfigError(sourceOf('drain-delay'), formatDuration(plan.drainDelayMs), expected, 'drain-delay'));
  }
  if (plan.servePort === plan.adminPort) {
    const expected = `a port other than Envoy's admin port ${plan.adminPort}`;
    errors.push(new ConfigError(sourceOf('serve-port'), String(plan.servePort), expected, 'serve-port'));
  }
  return errors;
}
