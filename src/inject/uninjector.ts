/**
 * Injection undone (like `linkerd uninject`): the pure inverse of injectPod, driven by the status annotation.
 * It removes exactly what injection added (the sidecar, its state volume, the status annotation) and puts
 * back what injection replaced, as the status recorded it: Envoy's preStop hook and args, the pod's grace
 * period, the wait containers' own hooks. A status written before those were recorded is undone as far as
 * it goes, with a warning naming what stays.
 */
import type { V1Container, V1LifecycleHandler, V1Pod, V1PodSpec } from '@kubernetes/client-node';
import { ANNOTATIONS } from '../config/annotation-names.js';
import { SIDECAR_PATHS } from '../config/endpoints.js';
import { SHUTDOWN_TOKEN_ENV } from '../config/sidecar.js';
import { STATE_VOLUME_NAME } from './sidecar.js';
import { readInjectionStatus, type InjectionStatus, type ReplacedFields } from './status.js';

export type UninjectionOutcome =
  | { readonly action: 'uninject'; readonly pod: V1Pod; readonly status: InjectionStatus; readonly warnings: readonly string[] }
  | { readonly action: 'skip'; readonly reason: 'not-injected'; readonly warnings: readonly string[] }
  /** The status annotation cannot be read: nothing says what to undo. */
  | { readonly action: 'refuse'; readonly message: string };

export function uninjectPod(pod: V1Pod): UninjectionOutcome {
  const raw = pod.metadata?.annotations?.[ANNOTATIONS.status];
  if (raw === undefined) return { action: 'skip', reason: 'not-injected', warnings: [] };
  const reading = readInjectionStatus(String(raw));
  if (!reading.ok) {
    return { action: 'refuse', message: `annotation ${ANNOTATIONS.status} cannot be read (${reading.reason}); remove the shutdown-manager by hand` };
  }
  const { status } = reading;
  const restored = restore(pod, status);
  return { action: 'uninject', pod: restored.pod, status, warnings: restored.warnings };
}

/** The pod's /shutdown token as injection wrote it (the sidecar's environment, else Envoy's hook), if any. */
export function injectedToken(pod: V1Pod, status: InjectionStatus): string | undefined {
  const spec = pod.spec;
  const sidecar = [...(spec?.containers ?? []), ...(spec?.initContainers ?? [])].find((c) => c.name === status.sidecar);
  const fromEnv = sidecar?.env?.find((variable) => variable.name === SHUTDOWN_TOKEN_ENV)?.value;
  if (fromEnv !== undefined && fromEnv !== '') return fromEnv;
  const envoy = spec?.containers.find((c) => c.name === status.envoyContainer);
  const header = envoy?.lifecycle?.preStop?.httpGet?.httpHeaders?.find((h) => h.name === 'Authorization')?.value;
  return header?.startsWith('Bearer ') ? header.slice('Bearer '.length) : undefined;
}

interface Restored {
  readonly pod: V1Pod;
  readonly warnings: readonly string[];
}

function restore(pod: V1Pod, status: InjectionStatus): Restored {
  const { replaced } = status;
  const spec = pod.spec ?? { containers: [] };
  const waiting = new Set(status.waitContainers ?? []);
  const containers = spec.containers
    .filter((container) => container.name !== status.sidecar)
    .map((container) => {
      if (container.name === status.envoyContainer) return restoreEnvoy(container, replaced);
      if (waiting.has(container.name)) return withPreStop(container, originalWaitHook(container, replaced));
      return container;
    });
  let restoredSpec: V1PodSpec = { ...spec, containers };
  restoredSpec = withoutEmpty(restoredSpec, 'initContainers', spec.initContainers?.filter((c) => c.name !== status.sidecar));
  restoredSpec = withoutEmpty(restoredSpec, 'volumes', spec.volumes?.filter((volume) => volume.name !== STATE_VOLUME_NAME));
  if (replaced !== undefined) restoredSpec = withOptional(restoredSpec, 'terminationGracePeriodSeconds', replaced.terminationGracePeriodSeconds);
  const { [ANNOTATIONS.status]: _status, ...annotations } = pod.metadata?.annotations ?? {};
  const { annotations: _all, ...metadata } = pod.metadata ?? {};
  const restoredPod: V1Pod = {
    ...pod,
    metadata: Object.keys(annotations).length > 0 ? { ...metadata, annotations } : metadata,
    spec: restoredSpec,
  };
  return { pod: restoredPod, warnings: replaced === undefined ? [unrecordedWarning(status, spec)] : [] };
}

function restoreEnvoy(envoy: V1Container, replaced: ReplacedFields | undefined): V1Container {
  if (replaced === undefined) return withPreStop(envoy, isOurHook(envoy.lifecycle?.preStop) ? null : (envoy.lifecycle?.preStop ?? null));
  const hooked = withPreStop(envoy, replaced.envoyPreStop);
  return replaced.envoyArgs === undefined ? hooked : withOptional(hooked, 'args', replaced.envoyArgs === null ? null : [...replaced.envoyArgs]);
}

/** A wait container's own hook: the recorded one, or none; without a record, ours removed and nothing put back. */
function originalWaitHook(container: V1Container, replaced: ReplacedFields | undefined): V1LifecycleHandler | null {
  if (replaced !== undefined) return replaced.waitPreStops?.[container.name] ?? null;
  const hook = container.lifecycle?.preStop;
  return isOurHook(hook) ? null : (hook ?? null);
}

function isOurHook(hook: V1LifecycleHandler | undefined): boolean {
  const path = hook?.httpGet?.path;
  return path === SIDECAR_PATHS.shutdown || path === SIDECAR_PATHS.wait;
}

/** The container with this preStop hook, or none (and no `lifecycle` left empty). */
function withPreStop(container: V1Container, hook: V1LifecycleHandler | null): V1Container {
  const { preStop: _ours, ...rest } = container.lifecycle ?? {};
  const lifecycle = hook === null ? rest : { ...rest, preStop: hook };
  const { lifecycle: _old, ...others } = container;
  return Object.keys(lifecycle).length > 0 ? { ...others, lifecycle } : others;
}

/** `object` with `key` set to `value`, or without `key` when `value` is null. */
function withOptional<T extends object, K extends keyof T>(object: T, key: K, value: T[K] | null): T {
  const { [key]: _old, ...rest } = object;
  return (value === null ? rest : { ...rest, [key]: value }) as T;
}

/** `spec` with `key` set to `list`, or without `key` when removing made the list empty (injection created it). */
function withoutEmpty<K extends 'initContainers' | 'volumes'>(spec: V1PodSpec, key: K, list: V1PodSpec[K]): V1PodSpec {
  if (list === undefined || list.length === spec[key]?.length) return spec;
  return withOptional(spec, key, list.length === 0 ? null : list);
}

/** For a status written before it recorded what injection replaced: what could not be put back. */
function unrecordedWarning(status: InjectionStatus, spec: V1PodSpec): string {
  const envoy = spec.containers.find((container) => container.name === status.envoyContainer);
  const lost = [
    `"${status.envoyContainer}" preStop hook`,
    ...(envoy?.args === undefined ? [] : [`"${status.envoyContainer}" args (any drain flags stay)`]),
    `terminationGracePeriodSeconds (stays ${String(spec.terminationGracePeriodSeconds ?? 'unset')})`,
    ...(status.waitContainers ?? []).map((name) => `"${name}" preStop hook`),
  ];
  return `status of version ${status.version} does not record the originals; not restored: ${lost.join(', ')}`;
}
