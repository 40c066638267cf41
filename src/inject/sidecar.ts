/** The pieces the injector adds to a pod: the shutdown-manager container, its state volume and the preStop hooks. */
import type { V1Container, V1LifecycleHandler, V1Probe, V1Volume, V1VolumeMount } from '@kubernetes/client-node';
import type { PodDrainValues } from '../config/drain.js';
import { SIDECAR_CONTAINER_NAME, SIDECAR_PATHS } from '../config/endpoints.js';
import { resourceRequirements, type SidecarResources } from '../config/resources.js';
import { toFlags } from '../config/settings.js';
import { SHUTDOWN_TOKEN_ENV, SIDECAR_SETTINGS } from '../config/sidecar.js';
import { adminSocketPath, type ProbeSchedule } from '../config/values.js';
import type { InjectionConfig } from '../config/webhook.js';

/**
 * Where the sidecar keeps its drain journal (which steps it sent to which Envoy process), so that a restarted
 * sidecar knows whether Envoy's listeners were drained. An emptyDir outlives the container but not the pod,
 * which is exactly the journal's lifetime; the root filesystem stays read-only.
 */
export const STATE_VOLUME_NAME = 'shutdown-manager-state';
export const STATE_DIR = '/var/run/shutdown-manager';

/** In memory: a few hundred bytes, written during a drain, never worth a disk. tmpfs pages count against the sidecar's memory limit. */
export function stateVolume(): V1Volume {
  return { name: STATE_VOLUME_NAME, emptyDir: { medium: 'Memory', sizeLimit: '1Mi' } };
}

/** The image's non-root user (the conventional "nonroot" 65532, as the Dockerfile sets); the container must not need root. */
export const SIDECAR_USER_ID = 65532;

/** Not imported: an ESM import of node:crypto reads all its exports and so loads WebCrypto too (see src/envoy/admin-client.ts). */
const { randomBytes } = process.getBuiltinModule('node:crypto');

const TOKEN_BYTES = 24;
/** Random bytes are drawn in batches: one call to the system's generator per 128 pods, not per pod. */
let tokenPool = Buffer.alloc(0);

/** A per-pod secret (192 random bits): only the kubelet's hooks, which carry it, may start a drain. */
export function newShutdownToken(): string {
  if (tokenPool.length < TOKEN_BYTES) tokenPool = randomBytes(TOKEN_BYTES * 128);
  const token = tokenPool.subarray(0, TOKEN_BYTES).toString('base64url');
  tokenPool = tokenPool.subarray(TOKEN_BYTES);
  return token;
}

/** Envoy's preStop hook, the only thing that starts a drain: it blocks until the sidecar has drained Envoy. */
export function shutdownHook(plan: PodDrainValues, token: string | undefined): V1LifecycleHandler {
  return sidecarHook(SIDECAR_PATHS.shutdown, plan, token);
}

/**
 * The sidecar's own preStop hook, and that of the app containers named by annotation wait-containers. The
 * kubelet also runs a container's hook when it restarts that container alone (a failed liveness probe):
 * there it must not drain a healthy Envoy, so it only joins a drain that Envoy's hook has started (or that
 * starts within --wait-window), which keeps the container alive while Envoy drains on pod deletion.
 */
export function waitHook(plan: PodDrainValues, token: string | undefined): V1LifecycleHandler {
  return sidecarHook(SIDECAR_PATHS.wait, plan, token);
}

function sidecarHook(path: string, plan: PodDrainValues, token: string | undefined): V1LifecycleHandler {
  const httpGet = { path, port: plan['serve-port'], scheme: 'HTTP' };
  if (token === undefined) return { httpGet };
  return { httpGet: { ...httpGet, httpHeaders: [{ name: 'Authorization', value: `Bearer ${token}` }] } };
}

/** The flags the sidecar is started with: every resolved drain parameter, so the pod spec tells the whole story. */
export function sidecarArgs(plan: PodDrainValues, probes: readonly ProbeSchedule[] = []): string[] {
  const { 'termination-grace-period': _boundByDrainTimeout, listeners, pollers, 'drain-timeout': drainTimeout, 'long-lived-grace': longLivedGrace, ...planned } = plan;
  const settings: Partial<typeof planned> = { ...planned };
  // A socket has no port: the flag would only mislead a reader of the pod spec.
  if (adminSocketPath(plan['admin-address']) !== undefined) delete settings['admin-port'];
  return [
    'mode=sidecar',
    ...toFlags(SIDECAR_SETTINGS, {
      ...settings,
      // Only when restricted: the sidecar's default already counts every listener.
      ...(listeners.length > 0 ? { listeners } : {}),
      // Only when declared: pods without pollers keep the spec they had.
      ...(pollers.length > 0 ? { pollers } : {}),
      // Only when set: off is the sidecar's default, and pods that do not use it keep the spec they had.
      ...(longLivedGrace !== null ? { 'long-lived-grace': longLivedGrace } : {}),
      // Only when Envoy has probes: the kubelet's checks of them are not clients.
      ...(probes.length > 0 ? { 'probe-ports': probes } : {}),
      'drain-timeout': drainTimeout,
      'state-dir': STATE_DIR,
    }),
  ];
}

/**
 * The sidecar's readiness: GET /ready answers 503 until Envoy's admin API has answered the sidecar once, then
 * 200 for the life of the process (latched: a busy admin API never takes a serving pod out of its Service).
 * A pod whose admin port is wrong so never becomes Ready, and a rollout (maxUnavailable,
 * progressDeadlineSeconds) stops at its first pod instead of finding out when the pods are deleted, undrained.
 * A native sidecar may have one too (a restartable init container, 1.29+): it counts toward the pod's Ready
 * condition, and the next container still starts once the sidecar has started, not once it is ready.
 *
 * - periodSeconds 2: the pod becomes Ready within about two seconds of Envoy's admin API answering.
 * - initialDelaySeconds 1: the sidecar listens a few tenths of a second after it starts; a first probe at 0 s
 *   would find the port closed and leave a "Readiness probe failed" event on every pod start.
 * - timeoutSeconds 5, as the liveness probe: a Node process throttled at its CPU limit, or in a GC pause,
 *   easily misses 1 s, and a probe that times out counts as a failure.
 * - failureThreshold 15: once latched, /ready fails only by not answering (a sidecar that is not running is
 *   not ready without any probe), so each failure is a 5 s timeout and the next probe follows at once: 15 in
 *   a row are about 75 s of silence, longer than the ~60 s after which the liveness probe restarts a wedged
 *   sidecar. So starvation alone never takes a serving Envoy out of its Service: the restart comes first.
 */
export function readinessProbe(plan: PodDrainValues): V1Probe {
  return {
    httpGet: { path: SIDECAR_PATHS.ready, port: plan['serve-port'], scheme: 'HTTP' },
    initialDelaySeconds: 1,
    periodSeconds: 2,
    timeoutSeconds: 5,
    failureThreshold: 15,
  };
}

/**
 * V8's young generation grows to 16 MiB per semi-space under a flood of requests (thousands a second, even of
 * well-formed ones): strangers on the serve port then push the sidecar's resident memory past its 96 MiB budget
 * (of a 128Mi limit) although nothing is kept. Capped at 1 MiB, the same floods peak at 54-64 MiB (with the
 * optimizing compilers off too, see sidecar/command.ts); the few requests a pod's sidecar serves in its life never
 * notice the more frequent scavenges. Only V8 reads the flag, and NODE_OPTIONS is the one way to give it to this
 * container alone: it replaces the image's own NODE_OPTIONS, the webhook's cap (2 MiB, see the Dockerfile).
 */
export const SIDECAR_ENV = [{ name: 'NODE_OPTIONS', value: '--max-semi-space-size=1' }] as const;

/**
 * The shutdown-manager container. As a native sidecar (init container with restartPolicy Always) it is
 * stopped only after Envoy has exited, so it needs no preStop hook of its own: Envoy's hook does the waiting.
 *
 * The liveness probe stays, so that a wedged sidecar is replaced before the pod is deleted (Envoy's hook
 * would find nobody to drain it), but it is slow to fire: a Node process throttled at its 200m CPU limit
 * (CFS quota) or in a long GC pause easily misses a 1 s timeout, and 3 misses at a 10 s period restart it
 * after ~30 s of starvation. Here a probe may take 5 s and 6 must fail in a row: about a minute of
 * starvation. A false restart is harmless anyway: the sidecar's own hook only joins a drain (GET /wait),
 * and the state volume tells the new process what the old one did.
 */
export function buildSidecarContainer(plan: PodDrainValues, config: InjectionConfig, options: SidecarOptions): V1Container {
  const { token } = options;
  const template = cachedTemplate(plan, config, options);
  if (token === undefined) return template;
  // Spread over the template, the per-pod members keep their places: the container reads as it always has.
  return {
    ...template,
    env: [...SIDECAR_ENV, { name: SHUTDOWN_TOKEN_ENV, value: token }],
    ...(template.lifecycle === undefined ? {} : { lifecycle: { preStop: waitHook(plan, token) } }),
  };
}

export interface SidecarOptions {
  readonly native: boolean;
  readonly token: string | undefined;
  readonly resources: SidecarResources;
  /** The pod's volume holding Envoy's admin socket, mounted where Envoy mounts it; undefined for a TCP admin. */
  readonly adminMount?: V1VolumeMount | undefined;
  /** Envoy's user, so that the sidecar may connect to its admin socket; undefined keeps the image's user. */
  readonly runAs?: { readonly user: number; readonly group: number | undefined } | undefined;
  /** The kubelet's probes of Envoy while it terminates (envoyProbes); none when absent. */
  readonly probes?: readonly ProbeSchedule[];
}

/**
 * Built sidecar containers, without their token, by webhook configuration and then by everything else they
 * depend on. Building one (its args above all) was a tenth of a review's CPU, and a cluster's pods share a
 * handful of plans. Bounded: a flood of distinct plans (every grace period from 1 to 3600) only rebuilds.
 */
const templates = new WeakMap<InjectionConfig, Map<string, V1Container>>();
const TEMPLATES_PER_CONFIG = 256;

/**
 * The container for this plan with the token's members as placeholders, deeply frozen: it is shared by every
 * pod injected with the same plan, so a write to it anywhere would throw rather than leak into other pods.
 */
function cachedTemplate(plan: PodDrainValues, config: InjectionConfig, options: SidecarOptions): V1Container {
  let byKey = templates.get(config);
  if (byKey === undefined) templates.set(config, (byKey = new Map()));
  // Every input but the token's value is in the key, options that are added later included.
  const { token, native, resources, adminMount, runAs, probes, ...unkeyed } = options;
  // An option added later must join the key: this stops compiling until it does.
  const _everyOptionKeyed: Record<string, never> = unkeyed;
  const key = `${jsonOf(plan)} ${jsonOf(resources)} ${native} ${token !== undefined} ${JSON.stringify(adminMount ?? null)} ${JSON.stringify(runAs ?? null)} ${JSON.stringify(probes ?? [])}`;
  let template = byKey.get(key);
  if (template === undefined) {
    if (byKey.size >= TEMPLATES_PER_CONFIG) byKey.clear();
    template = deepFreeze(buildTemplate(plan, config, { ...options, token: token === undefined ? undefined : '' }));
    byKey.set(key, template);
  }
  return template;
}

/**
 * An object's part of a template key, kept per object: the settings of pods without annotations of ours, and the
 * webhook's default resources, are objects shared by every such pod (see injector.ts), whose JSON was a fortieth
 * of a review's CPU when written for each. Neither kind of object changes once made.
 */
const jsonByObject = new WeakMap<object, string>();

function jsonOf(value: PodDrainValues | SidecarResources): string {
  let json = jsonByObject.get(value);
  if (json === undefined) {
    // Resources as the pod spec writes them: their exact values are bigints, which JSON cannot hold.
    json = JSON.stringify('cpuRequest' in value ? resourceRequirements(value) : value);
    jsonByObject.set(value, json);
  }
  return json;
}

function deepFreeze<T>(value: T): T {
  if (typeof value === 'object' && value !== null && !Object.isFrozen(value)) {
    for (const child of Object.values(value)) deepFreeze(child);
    Object.freeze(value);
  }
  return value;
}

/** The container as documented on buildSidecarContainer; with a token, `options.token` is the placeholder. */
function buildTemplate(plan: PodDrainValues, config: InjectionConfig, options: SidecarOptions): V1Container {
  const container: V1Container = {
    name: SIDECAR_CONTAINER_NAME,
    image: config.sidecarImage,
    imagePullPolicy: config.sidecarImagePullPolicy,
    args: sidecarArgs(plan, options.probes ?? []),
    // The token by environment, not flag: it stays out of the process list.
    env: [...SIDECAR_ENV, ...(options.token === undefined ? [] : [{ name: SHUTDOWN_TOKEN_ENV, value: options.token }])],
    ports: [{ name: 'shutdown-mgr', containerPort: plan['serve-port'], protocol: 'TCP' }],
    livenessProbe: {
      httpGet: { path: SIDECAR_PATHS.healthz, port: plan['serve-port'], scheme: 'HTTP' },
      initialDelaySeconds: 3,
      periodSeconds: 10,
      timeoutSeconds: 5,
      failureThreshold: 6,
    },
    readinessProbe: readinessProbe(plan),
    lifecycle: { preStop: waitHook(plan, options.token) },
    // Defaults from npm run bench (see RESOURCE_SETTINGS): the request covers its peak during a drain with 10,000
    // connections counted (docs/performance.md, the table npm run bench writes), so the scheduler counts it; the limit is twice its peak
    // under floods of requests. Flags and annotations may change them.
    resources: resourceRequirements(options.resources),
    securityContext: {
      runAsNonRoot: true,
      runAsUser: options.runAs?.user ?? SIDECAR_USER_ID,
      runAsGroup: options.runAs?.group ?? SIDECAR_USER_ID,
      readOnlyRootFilesystem: true,
      allowPrivilegeEscalation: false,
      privileged: false,
      capabilities: { drop: ['ALL'] },
      seccompProfile: { type: 'RuntimeDefault' },
    },
    volumeMounts: [{ name: STATE_VOLUME_NAME, mountPath: STATE_DIR }, ...(options.adminMount === undefined ? [] : [{ ...options.adminMount }])],
    // Should the sidecar ever crash, its last log lines show in `kubectl describe pod`.
    terminationMessagePolicy: 'FallbackToLogsOnError',
  };
  if (!options.native) return container;
  const { lifecycle: _ownHookNotNeeded, ...rest } = container;
  return { ...rest, restartPolicy: 'Always' };
}
