/**
 * The pure core of the webhook: (pod, config) in, a decision out. Nothing here knows about HTTP or
 * AdmissionReviews. The mutated pod shares every untouched subtree with the original (copy on write),
 * which keeps injection cheap and lets the JSON-patch diff skip unchanged parts by identity.
 */
import { isDeepStrictEqual } from 'node:util';
import type { V1Container, V1LifecycleHandler, V1Pod, V1PodSpec, V1VolumeMount } from '@kubernetes/client-node';
import { ANNOTATION_PREFIX, ANNOTATIONS } from '../config/annotation-names.js';
import { resolvePodDrainPlan, type ResolvedPlan } from '../config/annotations.js';
import type { PodDrainValues } from '../config/drain.js';
import { SIDECAR_CONTAINER_NAME } from '../config/endpoints.js';
import { ConfigError, ConfigErrors } from '../config/errors.js';
import { matchesLabels } from '../config/label-selector.js';
import { resolveSidecarResources, type SidecarResources } from '../config/resources.js';
import { adminSocketPath, boolean, injectSwitch, type ProbeSchedule } from '../config/values.js';
import type { InjectionConfig } from '../config/webhook.js';
import { PROJECT_VERSION } from '../version.js';
import { discoverAdmin } from './admin-discovery.js';
import {
  envoyRunAs,
  resolveAdminEndpoint,
  socketMount,
  unreachableSocketError,
  unreachableSocketWarning,
  type AdminEndpoint,
  type RunAs,
} from './admin-endpoint.js';
import { envoyProbes, findEnvoyContainer, type EnvoyContainerLookup } from './envoy-container.js';
import { decideEnvoyDrainFlags, type EnvoyDrainFlagsDecision } from './envoy-drain-flags.js';
import { buildSidecarContainer, shutdownHook, SIDECAR_USER_ID, STATE_VOLUME_NAME, stateVolume, waitHook } from './sidecar.js';
import { recordedHandler, type InjectionStatus, type ReplacedFields } from './status.js';
import { injectedToken, uninjectPod } from './uninjector.js';

export type SkipReason =
  /** The pod's labels do not match --pod-selector (what the webhook's objectSelector should have filtered). */
  | 'not-selected'
  | 'opted-out'
  | 'already-injected'
  | 'hand-configured'
  | 'no-envoy-container'
  | 'runs-to-completion';

export type InjectionOutcome =
  | { readonly action: 'inject'; readonly pod: V1Pod; readonly plan: PodDrainValues; readonly warnings: readonly string[] }
  | { readonly action: 'skip'; readonly reason: SkipReason; readonly warnings: readonly string[] }
  /** `settings` names what was wrong ("check-delay", "serve-port"): a short, bounded list for metrics. */
  | { readonly action: 'deny'; readonly message: string; readonly settings: readonly string[] };

export type { InjectionStatus } from './status.js';

/**
 * `shutdownToken` is the secret the pod's hooks will present to its sidecar; it is a parameter, not made
 * here, so that injection stays a pure function of its inputs (the webhook draws a fresh one per pod).
 */
export function injectPod(pod: V1Pod, config: InjectionConfig, shutdownToken: string): InjectionOutcome {
  try {
    return decide(pod, config, shutdownToken);
  } catch (error) {
    const errors = configErrorsOf(error);
    if (errors === undefined) throw error;
    return { action: 'deny', message: errors.map((e) => e.message).join('; '), settings: errors.map((e) => e.setting) };
  }
}

function configErrorsOf(error: unknown): readonly ConfigError[] | undefined {
  return error instanceof ConfigErrors ? error.errors : error instanceof ConfigError ? [error] : undefined;
}

/** Runs `check`, moving its ConfigErrors into `errors`, so that a pod is denied once, naming every mistake. */
function collect<T>(errors: ConfigError[], check: () => T): T | undefined {
  try {
    return check();
  } catch (error) {
    const found = configErrorsOf(error);
    if (found === undefined) throw error;
    errors.push(...found);
    return undefined;
  }
}

function decide(pod: V1Pod, config: InjectionConfig, token: string): InjectionOutcome {
  const annotations = pod.metadata?.annotations;
  // Checked on every review, as the objectSelector should already have: a configuration that drifted from
  // the flag, or a call made by hand, must not inject pods the operator did not select.
  if (!matchesLabels(config.podSelector, pod.metadata?.labels)) return skip('not-selected');
  if (!wantsInjection(annotations)) return skip('opted-out');

  if (annotations?.[ANNOTATIONS.status] !== undefined) return reinject(pod, config, token);
  if (hasSidecar(pod.spec)) {
    return skip('hand-configured', [`pod already has a container named "${SIDECAR_CONTAINER_NAME}" (configured by hand); not injecting`]);
  }
  return injectFresh(pod, config, token);
}

/**
 * A pod injected before (a template from `inject`, a pod from an old template): its injection is undone and
 * done again with today's version and settings, keeping its token. An identical result is left alone, so
 * that re-running `inject` changes nothing; another one replaces the old injection, with a warning saying so.
 */
function reinject(pod: V1Pod, config: InjectionConfig, token: string): InjectionOutcome {
  const removed = uninjectPod(pod);
  if (removed.action !== 'uninject') {
    const reason = removed.action === 'refuse' ? removed.message : 'no status';
    return hasSidecar(pod.spec) ? skip('already-injected', [`not re-injected: ${reason}`]) : injectFresh(pod, config, token);
  }
  const again = injectFresh(removed.pod, config, injectedToken(pod, removed.status) ?? token);
  if (again.action !== 'inject') return again.action === 'deny' ? again : skip(again.reason, [...again.warnings, 'the earlier injection is left as it is']);
  if (isDeepStrictEqual(asJson(again.pod), asJson(pod))) return skip('already-injected');
  const previous = removed.status.version === PROJECT_VERSION ? 'other settings' : `version ${removed.status.version}`;
  const warnings = [`re-injected: replaced an injection of ${previous}`, ...removed.warnings, ...again.warnings];
  return { ...again, warnings };
}

/** Plain JSON, as the pod is stored: no undefined members, key order irrelevant to the comparison. */
function asJson(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value)) as unknown;
}

function injectFresh(pod: V1Pod, config: InjectionConfig, token: string): InjectionOutcome {
  const annotations = pod.metadata?.annotations;
  const containers = pod.spec?.containers ?? [];

  // Every bad annotation is named in one denial: the settings, the Envoy container, the wait containers.
  const errors: ConfigError[] = [];
  const settings = collect(errors, () => readPodSettings(pod, config));
  const envoy = collect(errors, () => findEnvoyContainer(containers, annotations));
  const waitContainers = collect(errors, () => readWaitContainers(annotations, containers, envoy));
  if (settings === undefined || envoy === undefined || waitContainers === undefined) throw new ConfigErrors(errors);
  const { unknownAnnotations, native, manageEnvoyFlags, resources } = settings;
  if (!envoy.found) return skip('no-envoy-container', [`not injected: ${envoy.reason}`]);
  const envoyContainer = containers[envoy.index] as V1Container;
  const admin = decideAdminAccess(pod, envoyContainer, settings.plan);
  const { plan } = admin;
  assertRoomForSidecar(plan, pod.spec);
  if (!native && runsToCompletion(pod.spec)) {
    // A regular sidecar never exits, so the Job's pod would never complete.
    return skip('runs-to-completion', [`not injected: a Job's pod needs annotation ${ANNOTATIONS.nativeSidecar}: "true"`]);
  }

  const warnings = [...unknownAnnotations.map((key) => `unknown annotation ${key} ignored`), ...settings.warnings];
  warnings.push(...admin.warnings);
  if (pod.spec?.hostNetwork === true) warnings.push(hostNetworkWarning(plan));
  const hookWarning = preStopReplacementWarning(envoyContainer);
  if (hookWarning !== undefined) warnings.push(hookWarning);
  for (const name of waitContainers) {
    const app = containers.find((container) => container.name === name);
    if (app?.lifecycle?.preStop !== undefined) warnings.push(`replaced the preStop hook of "${name}" with a wait for Envoy's drain`);
  }
  const drainFlags: EnvoyDrainFlagsDecision = manageEnvoyFlags
    ? decideEnvoyDrainFlags(envoyContainer, plan)
    : { action: 'keep', warnings: [] };
  if (drainFlags.action === 'keep') warnings.push(...drainFlags.warnings);

  const status: InjectionStatus = {
    version: PROJECT_VERSION,
    sidecar: SIDECAR_CONTAINER_NAME,
    envoyContainer: envoyContainer.name,
    servePort: plan['serve-port'],
    native,
    ...(waitContainers.length > 0 ? { waitContainers } : {}),
    adminAddress: plan['admin-address'],
    ...(adminSocketPath(plan['admin-address']) === undefined ? { adminPort: plan['admin-port'] } : {}),
    adminFrom: admin.endpoint.from,
    ...(admin.mount === undefined ? {} : { adminVolume: admin.mount.name }),
    ...(admin.runAs === undefined ? {} : { sidecarUser: admin.runAs.user }),
    replaced: replacedFields(pod, envoyContainer, drainFlags.action === 'add', waitContainers),
  };
  const changes: PodChanges = {
    envoyIndex: envoy.index,
    envoyArgs: drainFlags.action === 'add' ? drainFlags.args : undefined,
    waitContainers: new Set(waitContainers),
    plan,
    config,
    resources,
    status,
    token: config.protectShutdown ? token : undefined,
    adminMount: admin.mount,
    runAs: admin.runAs,
    // The admin listener is never counted: a probe of Envoy's admin port needs no saying.
    probes: envoyProbes(envoyContainer).filter(({ port }) => adminSocketPath(plan['admin-address']) !== undefined || port !== plan['admin-port']),
  };
  return { action: 'inject', pod: mutate(pod, changes), plan, warnings };
}

/** What injection is about to overwrite, for uninjection to put back. */
function replacedFields(pod: V1Pod, envoy: V1Container, argsChange: boolean, waitContainers: readonly string[]): ReplacedFields {
  const waitPreStops: Record<string, V1LifecycleHandler> = {};
  for (const container of pod.spec?.containers ?? []) {
    const hook = container.lifecycle?.preStop;
    if (hook !== undefined && waitContainers.includes(container.name)) waitPreStops[container.name] = recordedHandler(hook);
  }
  const envoyPreStop = envoy.lifecycle?.preStop;
  return {
    envoyPreStop: envoyPreStop === undefined ? null : recordedHandler(envoyPreStop),
    ...(argsChange ? { envoyArgs: envoy.args ?? null } : {}),
    terminationGracePeriodSeconds: pod.spec?.terminationGracePeriodSeconds ?? null,
    ...(Object.keys(waitPreStops).length > 0 ? { waitPreStops } : {}),
  };
}

/** How the sidecar reaches Envoy's admin API: the plan with the pod's admin address, and what a socket needs. */
interface AdminAccess {
  readonly plan: PodDrainValues;
  readonly endpoint: AdminEndpoint;
  /** The Envoy container's volume holding the admin socket, as the sidecar mounts it. */
  readonly mount: V1VolumeMount | undefined;
  /** Envoy's user, for the sidecar to connect to a socket only its owner may (Contour's is 0644). */
  readonly runAs: RunAs | undefined;
  readonly warnings: readonly string[];
}

/**
 * The admin address by annotation, else as the pod says it, else the default. A socket nobody can reach denies
 * the pod when it was configured (annotation or flag: a mistake to fix) and is a warning when only discovered.
 */
function decideAdminAccess(pod: V1Pod, envoy: V1Container, resolved: PodDrainValues): AdminAccess {
  const annotations = pod.metadata?.annotations;
  const endpoint = resolveAdminEndpoint({
    planAddress: resolved['admin-address'],
    planPort: resolved['admin-port'],
    annotated: {
      address: annotations?.[ANNOTATIONS.envoyAdminAddress] !== undefined,
      port: annotations?.[ANNOTATIONS.envoyAdminPort] !== undefined,
    },
    discovery: discoverAdmin(pod, envoy),
    envoyName: envoy.name,
  });
  const unchanged = endpoint.address === resolved['admin-address'] && endpoint.port === resolved['admin-port'];
  const plan = unchanged ? resolved : { ...resolved, 'admin-address': endpoint.address, 'admin-port': endpoint.port };
  const warnings = [...endpoint.warnings];
  const socket = adminSocketPath(endpoint.address);
  if (socket === undefined) {
    assertAdminPortIsNotServePort(plan, endpoint);
    return { plan, endpoint, mount: undefined, runAs: undefined, warnings };
  }
  const lookup = socketMount(envoy, socket);
  if (!lookup.found) {
    if (!endpoint.discovered) throw unreachableSocketError(endpoint, lookup.reason);
    warnings.push(unreachableSocketWarning(endpoint, envoy.name));
    return { plan, endpoint, mount: undefined, runAs: undefined, warnings };
  }
  const runAs = envoyRunAs(envoy, pod.spec?.securityContext);
  const userWarning = socketUserWarning(envoy, endpoint, runAs);
  if (userWarning !== undefined) warnings.push(userWarning);
  return { plan, endpoint, mount: lookup.mount, runAs: runAs?.user === 0 ? undefined : runAs, warnings };
}

/**
 * The sidecar cannot serve on Envoy's admin port. Checked here, once the admin port is settled (annotation,
 * found in the pod, or the default): before, a serve port equal to the default admin port would deny a pod
 * whose Envoy is elsewhere.
 */
function assertAdminPortIsNotServePort(plan: PodDrainValues, endpoint: AdminEndpoint): void {
  if (plan['admin-port'] !== plan['serve-port']) return;
  throw new ConfigError(
    'serve-port (annotation shutdown-manager.io/serve-port or the webhook default)',
    String(plan['serve-port']),
    `a port other than Envoy's admin port ${plan['admin-port']} (${endpoint.from})`,
    'serve-port',
  );
}

/**
 * A socket's mode decides who may connect: Contour's is 0644, so only Envoy's own user may. The sidecar takes
 * Envoy's user when the pod says it; never root, which runAsNonRoot refuses and the sidecar does not need.
 */
function socketUserWarning(envoy: V1Container, endpoint: AdminEndpoint, runAs: RunAs | undefined): string | undefined {
  if (runAs === undefined) {
    return `sidecar runs as ${SIDECAR_USER_ID}: ${endpoint.address} must let it connect, or set runAsUser on "${envoy.name}"`;
  }
  if (runAs.user === 0) {
    return `"${envoy.name}" runs as root: sidecar (${SIDECAR_USER_ID}) reaches ${endpoint.address} only if its mode lets it`;
  }
  return undefined;
}

/**
 * On the node's network the serve port is a port of the node, shared with every other hostNetwork pod there:
 * two Envoy DaemonSets with the same serve port collide on every node, and the second sidecar cannot start.
 */
function hostNetworkWarning(plan: PodDrainValues): string {
  return `hostNetwork: serve port ${plan['serve-port']} must be unique on the node; set annotation ${ANNOTATION_PREFIX}serve-port`;
}

interface PodSettings extends ResolvedPlan {
  readonly native: boolean;
  /** Add Envoy's drain flags (and warn about disagreeing ones), or leave its args alone. */
  readonly manageEnvoyFlags: boolean;
  readonly resources: SidecarResources;
}

/** The pod's annotations over the webhook's defaults; throws ConfigErrors naming every bad annotation at once. */
function readPodSettings(pod: V1Pod, config: InjectionConfig): PodSettings {
  if (!hasAnnotationOfOurs(pod.metadata?.annotations)) return defaultSettings(config, pod.spec?.terminationGracePeriodSeconds);
  return resolvePodSettings(pod, config);
}

/**
 * The settings of a pod without a single annotation of ours, most pods of a cluster, depend on the webhook's
 * configuration and the pod's grace period alone. Resolving them (plan, checks, resources) was a fifth of the
 * injector's time per pod; they are kept per configuration and grace period, bounded like the sidecar's
 * templates, and frozen: every such pod shares them. The listeners array frozen with them is the webhook's own
 * default, which nothing writes to either. A failure would not be kept, but cannot happen: such a pod's grace
 * period is never below the default, and the defaults were checked at start.
 */
const defaultSettingsByConfig = new WeakMap<InjectionConfig, Map<number | undefined, PodSettings>>();
const DEFAULT_SETTINGS_PER_CONFIG = 256;

function defaultSettings(config: InjectionConfig, gracePeriodSeconds: number | undefined): PodSettings {
  let byGracePeriod = defaultSettingsByConfig.get(config);
  if (byGracePeriod === undefined) defaultSettingsByConfig.set(config, (byGracePeriod = new Map()));
  let settings = byGracePeriod.get(gracePeriodSeconds);
  if (settings === undefined) {
    settings = resolvePodSettings({ spec: { containers: [], terminationGracePeriodSeconds: gracePeriodSeconds } }, config);
    Object.freeze(settings.plan.listeners);
    Object.freeze(settings.plan);
    Object.freeze(settings.unknownAnnotations);
    if (byGracePeriod.size >= DEFAULT_SETTINGS_PER_CONFIG) byGracePeriod.clear();
    byGracePeriod.set(gracePeriodSeconds, Object.freeze(settings));
  }
  return settings;
}

function hasAnnotationOfOurs(annotations: Readonly<Record<string, string>> | undefined): boolean {
  for (const key in annotations) if (key.startsWith(ANNOTATION_PREFIX)) return true;
  return false;
}

function resolvePodSettings(pod: V1Pod, config: InjectionConfig): PodSettings {
  const annotations = pod.metadata?.annotations;
  const errors: ConfigError[] = [];
  const resolved = collect(errors, () => resolvePodDrainPlan(annotations, config.defaults, pod.spec?.terminationGracePeriodSeconds));
  const native = collect(errors, () => booleanAnnotation(annotations, ANNOTATIONS.nativeSidecar));
  const manageEnvoyFlags = collect(errors, () => booleanAnnotation(annotations, ANNOTATIONS.envoyDrainFlags));
  const resources = collect(errors, () => resolveSidecarResources(annotations, config.sidecarResources));
  if (resolved === undefined || resources === undefined || errors.length > 0) throw new ConfigErrors(errors);
  return {
    ...resolved,
    native: native ?? config.nativeSidecar,
    manageEnvoyFlags: manageEnvoyFlags ?? config.envoyDrainFlags,
    resources,
  };
}

/**
 * The containers named by annotation wait-containers: each gets a preStop hook that waits for Envoy's drain
 * (GET /wait), so that an app behind a sidecar Envoy is not stopped while Envoy still forwards requests to
 * it. Only regular containers other than Envoy qualify: Envoy's own hook starts the drain. Throws a
 * ConfigError naming every name that does not qualify. `envoy` is undefined when it could not be looked up
 * (its annotation is wrong too): then only existence is checked.
 */
function readWaitContainers(
  annotations: Readonly<Record<string, string>> | undefined,
  containers: readonly V1Container[],
  envoy: EnvoyContainerLookup | undefined,
): readonly string[] {
  const raw = annotations?.[ANNOTATIONS.waitContainers];
  if (raw === undefined) return [];
  const names = [...new Set(String(raw).split(',').map((name) => name.trim()).filter((name) => name !== ''))];
  const envoyName = envoy?.found === true ? containers[envoy.index]?.name : undefined;
  const existing = new Set(containers.map((container) => container.name));
  const problems = [
    ...names.filter((name) => !existing.has(name)).map((name) => `there is no container ${JSON.stringify(name)}`),
    ...names.filter((name) => name === envoyName).map((name) => `${JSON.stringify(name)} is the Envoy container, whose own hook starts the drain`),
  ];
  if (problems.length === 0) return names;
  const candidates = containers.filter((container) => container.name !== envoyName).map((container) => JSON.stringify(container.name));
  throw new ConfigError(
    `annotation ${ANNOTATIONS.waitContainers}`,
    String(raw),
    `comma-separated names of the pod's containers other than Envoy (${candidates.join(', ') || 'it has none'}), but ${problems.join('; ')}`,
    'wait-containers',
  );
}

/** What the sidecar adds must not collide with the pod's own ports and volumes; throws naming each collision. */
function assertRoomForSidecar(plan: PodDrainValues, spec: V1PodSpec | undefined): void {
  const errors: ConfigError[] = [];
  collect(errors, () => assertServePortIsFree(plan, spec));
  collect(errors, () => assertStateVolumeIsFree(spec));
  if (errors.length > 0) throw new ConfigErrors(errors);
}

function skip(reason: SkipReason, warnings: readonly string[] = []): InjectionOutcome {
  return { action: 'skip', reason, warnings };
}

function wantsInjection(annotations: Readonly<Record<string, string>> | undefined): boolean {
  return booleanAnnotation(annotations, ANNOTATIONS.inject, injectSwitch) ?? true;
}

function booleanAnnotation(annotations: Readonly<Record<string, string>> | undefined, key: string, kind = boolean): boolean | undefined {
  const raw = annotations?.[key];
  if (raw === undefined) return undefined;
  const value = kind.parse(String(raw));
  if (value === undefined) throw new ConfigError(`annotation ${key}`, String(raw), kind.form, key.slice(ANNOTATION_PREFIX.length));
  return value;
}

function hasSidecar(spec: V1PodSpec | undefined): boolean {
  const all = [...(spec?.containers ?? []), ...(spec?.initContainers ?? [])];
  return all.some((container) => container.name === SIDECAR_CONTAINER_NAME);
}

/** Pods of Jobs (and CronJobs) are the ones that may not restart: they are meant to finish. */
function runsToCompletion(spec: V1PodSpec | undefined): boolean {
  return spec?.restartPolicy === 'Never' || spec?.restartPolicy === 'OnFailure';
}

/** The sidecar shares the pod's network namespace: a port another container listens on would make it crash-loop. */
function assertServePortIsFree(plan: PodDrainValues, spec: V1PodSpec | undefined): void {
  const running = [...(spec?.containers ?? []), ...(spec?.initContainers ?? []).filter(isNativeSidecar)];
  const hostNetwork = spec?.hostNetwork === true;
  for (const container of running) {
    // On the node's network a hostPort is bound in the same namespace as the sidecar's port.
    const clash = container.ports?.find(
      (port) => port.containerPort === plan['serve-port'] || (hostNetwork && port.hostPort === plan['serve-port']),
    );
    if (clash !== undefined) {
      throw new ConfigError(
        'serve-port (annotation shutdown-manager.io/serve-port or the webhook default)',
        String(plan['serve-port']),
        `a port that no container uses; container "${container.name}" declares ${clash.containerPort === plan['serve-port'] ? 'port' : 'host port'} ${plan['serve-port']}` +
          (clash.name ? ` (${clash.name})` : '') +
          (hostNetwork ? ' on the node\'s network (hostNetwork)' : ''),
        'serve-port',
      );
    }
  }
}

/** The sidecar's drain journal lives on a volume of a fixed name: a pod's own volume of that name would be shadowed. */
function assertStateVolumeIsFree(spec: V1PodSpec | undefined): void {
  if (!(spec?.volumes ?? []).some((volume) => volume.name === STATE_VOLUME_NAME)) return;
  throw new ConfigError(
    'pod volume',
    STATE_VOLUME_NAME,
    `a volume name other than the one the shutdown-manager adds (an emptyDir for its drain journal); rename the pod's volume "${STATE_VOLUME_NAME}"`,
    'volumes',
  );
}

function isNativeSidecar(container: V1Container): boolean {
  return container.restartPolicy === 'Always';
}

function preStopReplacementWarning(envoy: V1Container): string | undefined {
  if (envoy.lifecycle?.preStop === undefined) return undefined;
  return `replaced the existing preStop hook of container "${envoy.name}" with the shutdown-manager's`;
}

interface PodChanges {
  readonly envoyIndex: number;
  /** Envoy's new args (its own plus the drain flags), or undefined to leave them as they are. */
  readonly envoyArgs: readonly string[] | undefined;
  /** Names of the app containers whose preStop waits for the drain. */
  readonly waitContainers: ReadonlySet<string>;
  readonly plan: PodDrainValues;
  readonly config: InjectionConfig;
  readonly resources: SidecarResources;
  readonly status: InjectionStatus;
  readonly token: string | undefined;
  readonly adminMount: V1VolumeMount | undefined;
  readonly runAs: RunAs | undefined;
  /** The ports the kubelet probes Envoy on: the sidecar does not watch their listeners for client traffic. */
  readonly probes: readonly ProbeSchedule[];
}

function mutate(pod: V1Pod, changes: PodChanges): V1Pod {
  const { envoyIndex, envoyArgs, waitContainers, plan, config, resources, status, token, adminMount, runAs, probes } = changes;
  const spec = pod.spec as V1PodSpec;
  const containers = spec.containers.map((container, index) => {
    if (index === envoyIndex) {
      return {
        ...container,
        ...(envoyArgs === undefined ? {} : { args: [...envoyArgs] }),
        lifecycle: { ...container.lifecycle, preStop: shutdownHook(plan, token) },
      };
    }
    if (waitContainers.has(container.name)) return { ...container, lifecycle: { ...container.lifecycle, preStop: waitHook(plan, token) } };
    return container;
  });
  const sidecar = buildSidecarContainer(plan, config, { native: status.native, token, resources, adminMount, runAs, probes });
  // A native sidecar goes last among the init containers: bootstrap init containers (Contour's) run first.
  const placement = status.native
    ? { containers, initContainers: [...(spec.initContainers ?? []), sidecar] }
    : { containers: [...containers, sidecar] };
  return {
    ...pod,
    metadata: {
      ...pod.metadata,
      annotations: { ...pod.metadata?.annotations, [ANNOTATIONS.status]: JSON.stringify(status) },
    },
    spec: {
      ...spec,
      ...placement,
      volumes: [...(spec.volumes ?? []), stateVolume()],
      terminationGracePeriodSeconds: plan['termination-grace-period'],
    },
  };
}
