/** Settings of sidecar mode: the drain server started by the injected container. */
import { POD_DRAIN_SETTINGS } from './drain.js';
import { envName, readSettings, type Setting, type ValuesOf } from './settings.js';
import * as kinds from './values.js';
import type { ProbeSchedule } from './values.js';

export const LOG_LEVEL_SETTING = {
  kind: kinds.oneOf('fatal', 'error', 'warn', 'info', 'debug', 'trace', 'silent'),
  default: 'info',
  help: 'Log level of the JSON logs on stdout.',
} satisfies Setting<string>;

export const SIDECAR_SETTINGS = {
  ...POD_DRAIN_SETTINGS,
  'serve-port': { ...POD_DRAIN_SETTINGS['serve-port'], kind: kinds.listenPort } satisfies Setting<number>,
  'serve-address': {
    kind: kinds.listenAddress,
    default: '',
    help: 'Address to serve on; empty means every interface, IPv4 and IPv6 (the kubelet calls hooks and probes on the pod IP, which may be either).',
  } satisfies Setting<string>,
  'drain-timeout': {
    kind: kinds.positiveDurationMs,
    default: 290_000,
    help: '/shutdown answers 503 and lets the pod go once the drain has lasted this long.',
  } satisfies Setting<number>,
  'admin-timeout': {
    kind: kinds.positiveDurationMs,
    default: 2_000,
    help: 'Timeout of each call to the Envoy admin API.',
  } satisfies Setting<number>,
  'admin-refusals': {
    kind: kinds.attempts,
    default: 3,
    help: "After this many consecutive refused connections Envoy is taken as exited and the drain as done, once Envoy's admin API has answered at least once.",
  } satisfies Setting<number>,
  'probe-ports': {
    kind: kinds.probeList,
    default: [] as readonly ProbeSchedule[],
    help:
      "The kubelet's readiness and liveness probes of Envoy, each as PORT/PERIOD (the injector reads them from Envoy's probes): on a listener whose stat name ends in the port (0.0.0.0_8080), " +
      "up to one new connection and request per probe period are taken for the probe, not for a client, so that a probe on a traffic port neither blinds the drain to that listener's clients nor holds it.",
  } satisfies Setting<readonly ProbeSchedule[]>,
  'drain-inbound-only': {
    kind: kinds.boolean,
    default: false,
    help: "Ask Envoy to drain only listeners with traffic_direction INBOUND (drain_listeners?inboundonly). Since Envoy 1.34 listeners left UNSPECIFIED, as Contour's and Envoy Gateway's are, are then not drained: for meshes whose outbound listeners must keep working.",
  } satisfies Setting<boolean>,
  'wait-window': {
    kind: kinds.positiveDurationMs,
    default: 5_000,
    help: "How long GET /wait (the sidecar's own preStop hook) waits for a drain to start before answering that none is under way. It never starts one: only Envoy's hook, GET /shutdown, does.",
  } satisfies Setting<number>,
  'state-dir': {
    kind: kinds.optionalDirectory,
    default: '',
    help: "A directory that outlives this container but not the pod (the injector mounts an emptyDir): the drain notes there which steps it sent to which Envoy process, so that a restarted sidecar knows whether Envoy's listeners were drained. Empty: no notes.",
  } satisfies Setting<string>,
  'shutdown-token': {
    kind: kinds.text,
    default: '',
    help: 'When set, /shutdown requires the header "Authorization: Bearer <token>" (the webhook injects one per pod). Pass it by environment variable, not flag.',
  } satisfies Setting<string>,
  'log-level': LOG_LEVEL_SETTING,
};

/** The variable the injected container receives its /shutdown token in. */
export const SHUTDOWN_TOKEN_ENV = envName('shutdown-token');

/**
 * The sidecar's settings, under their flag names: the pod's drain values (PodDrainValues, as the injector
 * resolved them and passed them as flags) and the sidecar's own. An empty shutdown-token leaves /shutdown open
 * (pods injected by hand).
 */
export type SidecarConfig = ValuesOf<typeof SIDECAR_SETTINGS>;

export function parseSidecarConfig(args: readonly string[], env: NodeJS.ProcessEnv): SidecarConfig {
  return readSettings(SIDECAR_SETTINGS, args, env);
}
