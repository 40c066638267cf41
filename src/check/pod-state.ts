/**
 * One Envoy pod, judged: opted out, carrying its own shutdown-manager, without the sidecar, or injected
 * (with what is wrong with its injection, if anything). Pure: the pod and the expectations in, a verdict out.
 */
import { ANNOTATIONS } from '../config/annotation-names.js';
import { SIDECAR_CONTAINER_NAME } from '../config/endpoints.js';
import { drainTimeoutMs } from '../config/drain.js';
import { sameImage } from '../config/image-reference.js';
import * as kinds from '../config/values.js';
import type { V1Container, V1Pod } from './cluster.js';
import type { Expectations } from './expectations.js';

/** Kubernetes' default terminationGracePeriodSeconds. */
export const DEFAULT_GRACE_SECONDS = 30;

export type ProblemCheck = 'pods.version-skew' | 'pods.grace-period' | 'pods.sidecar-health';

export interface PodProblem {
  readonly check: ProblemCheck;
  /** What is wrong, without the pod's name: pods with the same detail are reported together. */
  readonly detail: string;
  /** For pods.grace-period: the grace period, in seconds, that covers the drain. */
  readonly neededGraceSeconds?: number;
}

export type PodState =
  | { readonly kind: 'opted-out' }
  | { readonly kind: 'own-shutdown-manager' }
  | { readonly kind: 'missing' }
  | { readonly kind: 'injected'; readonly problems: readonly PodProblem[] };

/** A pod that has run to its end drains nothing; undefined means "not worth a verdict". */
export function judgePod(pod: V1Pod, expected: Expectations): PodState | undefined {
  const phase = pod.status?.phase;
  if (phase === 'Succeeded' || phase === 'Failed') return undefined;
  const annotations = pod.metadata?.annotations ?? {};
  const sidecar = sidecarOf(pod);
  if (kinds.boolean.parse(annotations[ANNOTATIONS.inject] ?? '') === false && sidecar === undefined) return { kind: 'opted-out' };
  if (sidecar === undefined) return { kind: 'missing' };
  const status = annotations[ANNOTATIONS.status];
  if (status === undefined) return { kind: 'own-shutdown-manager' };
  const problems = [skew(status, sidecar, expected), gracePeriod(pod, sidecar), health(pod)].filter((problem) => problem !== undefined);
  return { kind: 'injected', problems };
}

export function sidecarOf(pod: V1Pod): V1Container | undefined {
  const all = [...(pod.spec?.containers ?? []), ...(pod.spec?.initContainers ?? [])];
  return all.find((container) => container.name === SIDECAR_CONTAINER_NAME);
}

function injectorVersion(status: string): string | undefined {
  try {
    const parsed: unknown = JSON.parse(status);
    const version = typeof parsed === 'object' && parsed !== null ? (parsed as { version?: unknown }).version : undefined;
    return typeof version === 'string' ? version : undefined;
  } catch {
    return undefined;
  }
}

function skew(status: string, sidecar: V1Container, expected: Expectations): PodProblem | undefined {
  const version = injectorVersion(status) ?? 'unknown';
  const differences = [
    ...(version !== expected.injectorVersion ? [`injector version ${version} (the webhook is ${expected.injectorVersion})`] : []),
    // Compared as references, not strings: `repo:0.1.0@sha256:X` and `repo@sha256:X` are the same image.
    ...(sidecar.image === undefined || !sameImage(sidecar.image, expected.sidecarImage) ? [`image ${sidecar.image ?? '(none)'} (the webhook injects ${expected.sidecarImage})`] : []),
  ];
  if (differences.length === 0) return undefined;
  return { check: 'pods.version-skew', detail: `with a sidecar of ${differences.join(' and ')}` };
}

/** The sidecar's own deadline, from its flag; undefined when it has none (it then uses its default). */
export function drainTimeoutMsOf(sidecar: V1Container): number | undefined {
  const flag = (sidecar.args ?? []).find((arg) => arg.startsWith('--drain-timeout='));
  return flag === undefined ? undefined : kinds.durationMs.parse(flag.slice('--drain-timeout='.length));
}

function gracePeriod(pod: V1Pod, sidecar: V1Container): PodProblem | undefined {
  const drainMs = drainTimeoutMsOf(sidecar);
  const graceSeconds = pod.spec?.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS;
  if (drainMs === undefined || graceSeconds * 1000 >= drainMs) return undefined;
  return {
    check: 'pods.grace-period',
    detail: `with terminationGracePeriodSeconds ${graceSeconds}, shorter than the sidecar's --drain-timeout ${kinds.durationMs.format(drainMs)}: the kubelet kills Envoy mid-drain`,
    neededGraceSeconds: graceCovering(drainMs),
  };
}

/** The shortest grace period the injector would give this drain deadline (the deadline plus its safety margin). */
function graceCovering(drainMs: number): number {
  let seconds = Math.ceil(drainMs / 1000);
  while (drainTimeoutMs(seconds) < drainMs) seconds += 1;
  return seconds;
}

function health(pod: V1Pod): PodProblem | undefined {
  if (pod.status?.phase !== 'Running' || pod.metadata?.deletionTimestamp !== undefined) return undefined;
  const statuses = [...(pod.status.containerStatuses ?? []), ...(pod.status.initContainerStatuses ?? [])];
  const status = statuses.find((candidate) => candidate.name === SIDECAR_CONTAINER_NAME);
  if (status === undefined) return undefined;
  const restarts = status.restartCount;
  if (status.ready && restarts === 0) return undefined;
  const terminated = status.lastState?.terminated;
  const last = terminated === undefined ? '' : `, last ended ${terminated.reason ?? 'without a reason'} (exit code ${terminated.exitCode})`;
  const what = [...(status.ready ? [] : ['not Ready']), ...(restarts > 0 ? [`restarted ${restarts} time${restarts === 1 ? '' : 's'}`] : [])];
  return { check: 'pods.sidecar-health', detail: `with the sidecar ${what.join(' and ')}${last}` };
}
