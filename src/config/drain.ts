/**
 * The drain parameters of a pod, in one table and one shape all the way: the webhook's flags (its defaults),
 * the pod's annotations (overrides), the flags the injected sidecar is started with, and the sidecar's drain
 * loop all key them by the same names (`check-delay`, `min-open-connections`…). Only argv lies between the
 * injector and the sidecar. Defaults are Contour's shutdown-manager's.
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
    help: "The drain is over when open downstream connections are at or below this number: stragglers from before the health checks failed. A connection accepted after they failed still holds it while open (its request in flight), whatever this number.",
  } satisfies Setting<number>,
  'long-lived-grace': {
    kind: kinds.optionalDurationMs,
    default: null as number | null,
    help: "Off by default: connections Envoy cannot drain (upgraded ones such as WebSocket, and TCP-proxy ones: Envoy tells them nothing) hold the drain until the deadline like any other. When set, they no longer do: the drain ends once the connections Envoy can drain are at or below --min-open-connections and this long has passed since Envoy's health checks failed (the instant --check-delay counts from, which still applies); the long-lived ones left are counted, reported, and cut when Envoy exits.",
  } satisfies Setting<number | null>,
  'quiet-period': {
    kind: kinds.durationMs,
    default: 10_000,
    help: "The observed rule: once Envoy's health checks failed, the drain ends by its count only after no new client traffic (requests that are not health checks on HTTP listeners, new connections on others; the kubelet's probes (--probe-ports) and declared pollers (--pollers) taken out at their periods) has reached Envoy for this long, as well as --check-delay after the failure: so a load balancer that keeps sending past check-delay holds the drain until it stops, and the lag it took is reported. Counted from the drain's first read, so a drain lasts at least this long (never past its deadline, which still ends it). 0s: off, check-delay alone.",
  } satisfies Setting<number>,
  pollers: {
    kind: kinds.pollerList,
    default: [] as readonly kinds.ProbeSchedule[],
    help:
      "Steady pollers of Envoy's traffic ports that are not the load balancer, each as PORT/PERIOD: an uptime monitor, a scrape through Envoy, another system's check. Failing Envoy's health checks does not stop them, so under the observed rule they would hold every drain to its deadline: " +
      'on a listener whose stat name ends in the port, up to one request (or, on a TCP proxy, one new connection) per period is taken for the poller, and only what comes beyond is a client. Not for the load balancer\'s own check of a routed path: that load balancer never lets go, and a drain that ignores its check ends while it still sends; point its check at the health-check filter\'s path instead.',
  } satisfies Setting<readonly kinds.ProbeSchedule[]>,
  'serve-port': {
    kind: kinds.port,
    default: 8090,
    help: "The sidecar's HTTP port for /healthz, /shutdown, /drain and /metrics.",
  } satisfies Setting<number>,
  'admin-address': {
    kind: kinds.adminAddress,
    default: '127.0.0.1',
    help: "Where Envoy's admin API is, inside the pod (Envoy shares its network namespace): a host reached at --admin-port, or a Unix socket as unix:/admin/admin.sock (Contour's), in a volume both containers mount.",
  } satisfies Setting<string>,
  'admin-port': {
    kind: kinds.port,
    default: 9001,
    help: "Envoy's admin port, on --admin-address; unused when that is a Unix socket.",
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

/**
 * A pod's drain, the one shape its settings keep from the webhook's flags and the pod's annotations to the
 * sidecar's flags and its drain loop: each value under the name of the flag (and annotation) that sets it.
 * The injector calls a pod's resolved values its drain plan (`plan`).
 */
export type PodDrainValues = ValuesOf<typeof POD_DRAIN_SETTINGS> & {
  /** The pod's terminationGracePeriodSeconds. */
  'termination-grace-period': number;
  /**
   * When the sidecar gives up waiting, the sidecar's --drain-timeout: derived from the grace period (see
   * drainTimeoutMs), never set on its own.
   */
  'drain-timeout': number;
};

/** The values a user sets: everything but what is derived from them. */
export type PodDrainInput = Omit<PodDrainValues, 'drain-timeout'>;

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

const INPUT_NAMES = [...(Object.keys(POD_DRAIN_SETTINGS) as (keyof typeof POD_DRAIN_SETTINGS)[]), 'termination-grace-period'] as const;

/**
 * The pod's drain from `input` (which may hold other settings too, such as all of the webhook's): its own
 * values, in the table's order, and the deadline derived from them. Throws ConfigErrors when the parts do not
 * fit together; `sourceOf` names where each value came from. `adminPortKnown: false` leaves the serve port's
 * clash with the admin port to whoever settles the admin port later (the injector, from what the pod says).
 */
export function resolvePodDrain(
  input: PodDrainInput,
  sourceOf: (name: keyof PodDrainInput) => string,
  { adminPortKnown = true }: { readonly adminPortKnown?: boolean } = {},
): PodDrainValues {
  const own = Object.fromEntries(INPUT_NAMES.map((name) => [name, input[name]])) as PodDrainInput;
  const values: PodDrainValues = { ...own, 'drain-timeout': drainTimeoutMs(own['termination-grace-period']) };
  const errors = drainTimingErrors(
    values,
    sourceOf,
    'lower check-delay or drain-delay, or raise termination-grace-period (the deadline is the grace period minus a safety margin)',
  ).filter((error) => adminPortKnown || error.setting !== 'serve-port');
  if (errors.length > 0) throw new ConfigErrors(errors);
  return values;
}

/**
 * What makes a drain impossible whatever Envoy does: no time left to poll, or the sidecar on Envoy's admin
 * port. Shared by the webhook (per pod) and the sidecar (its own flags), each with its own remedy.
 */
export function drainTimingErrors(
  values: Pick<PodDrainValues, 'check-delay' | 'drain-delay' | 'drain-timeout' | 'serve-port' | 'admin-port' | 'admin-address'>,
  sourceOf: (name: 'check-delay' | 'drain-delay' | 'serve-port') => string,
  deadlineRemedy: string,
): ConfigError[] {
  const errors: ConfigError[] = [];
  const deadline = formatDuration(values['drain-timeout']);
  if (values['check-delay'] >= values['drain-timeout']) {
    const expected = `a check delay shorter than the drain deadline of ${deadline}; ${deadlineRemedy}`;
    errors.push(new ConfigError(sourceOf('check-delay'), formatDuration(values['check-delay']), expected, 'check-delay'));
  } else if (values['drain-delay'] + values['check-delay'] >= values['drain-timeout']) {
    // The count may end the drain only check-delay after the (delayed) health-check failure: both must fit.
    const expected = `a drain delay that, added to the check delay of ${formatDuration(values['check-delay'])}, stays below the drain deadline of ${deadline}; ${deadlineRemedy}`;
    errors.push(new ConfigError(sourceOf('drain-delay'), formatDuration(values['drain-delay']), expected, 'drain-delay'));
  }
  if (values['serve-port'] === values['admin-port'] && kinds.adminSocketPath(values['admin-address']) === undefined) {
    const expected = `a port other than Envoy's admin port ${values['admin-port']}`;
    errors.push(new ConfigError(sourceOf('serve-port'), String(values['serve-port']), expected, 'serve-port'));
  }
  return errors;
}
