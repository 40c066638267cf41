/**
 * A Deployment's rolling update, as the deployment controller runs it (pkg/controller/deployment/rolling.go,
 * reconcileNewReplicaSet and reconcileOldReplicaSets; the rounding is deploymentutil.ResolveFenceposts:
 * maxSurge rounds up, maxUnavailable down, and both zero means maxUnavailable 1). Pods being deleted are not
 * counted in either ReplicaSet (a terminating pod has left its ReplicaSet's replicas), which is why a
 * rollout's terminating pods come on top of maxSurge, as in a cluster.
 */
import type { FleetPod, TerminationRecord } from './pod.js';
import { pause } from './time.js';

/** A count or a percentage of the replicas, as in a Deployment's strategy ("25%" or 5). */
export type IntOrPercent = number | `${number}%`;

export interface RollingUpdateStrategy {
  readonly maxSurge: IntOrPercent;
  readonly maxUnavailable: IntOrPercent;
}

export const DEFAULT_STRATEGY: RollingUpdateStrategy = { maxSurge: '25%', maxUnavailable: '25%' };

/** intstr.GetScaledValueFromIntOrPercent: a percentage of `replicas`, rounded up or down. */
function scaledValue(value: IntOrPercent, replicas: number, roundUp: boolean): number {
  if (typeof value === 'number') return value;
  const exact = (Number.parseFloat(value) * replicas) / 100;
  return roundUp ? Math.ceil(exact) : Math.floor(exact);
}

/** ResolveFenceposts: surge rounded up, unavailable down; both 0 would stall, so unavailable becomes 1. */
export function resolveFenceposts(strategy: RollingUpdateStrategy, replicas: number): { maxSurge: number; maxUnavailable: number } {
  const maxSurge = scaledValue(strategy.maxSurge, replicas, true);
  const maxUnavailable = scaledValue(strategy.maxUnavailable, replicas, false);
  return { maxSurge, maxUnavailable: maxSurge === 0 && maxUnavailable === 0 ? 1 : maxUnavailable };
}

export interface RolloutHooks {
  /** Creates (and boots) a pod of the new ReplicaSet. */
  readonly createNewPod: () => FleetPod;
  /** Real milliseconds between two syncs of the controller (it reacts to pod changes in a cluster). */
  readonly syncMs: number;
  /** performance.now() after which the rollout gives up. */
  readonly deadline: number;
  readonly signal: AbortSignal;
}

export interface RolloutResult {
  readonly terminations: readonly TerminationRecord[];
  /** Whether every old pod is gone and every new pod is ready. */
  readonly complete: boolean;
}

/** Replaces `oldPods` by new ones, `replicas` in all, as the Deployment controller would. */
export async function rollingUpdate(oldPods: readonly FleetPod[], replicas: number, strategy: RollingUpdateStrategy, hooks: RolloutHooks): Promise<RolloutResult> {
  const { maxSurge, maxUnavailable } = resolveFenceposts(strategy, replicas);
  let old = [...oldPods];
  const fresh: FleetPod[] = [];
  const terminations: Promise<TerminationRecord>[] = [];
  const done = (): boolean => old.length === 0 && fresh.length === replicas && fresh.every((pod) => pod.ready);
  while (!done() && !hooks.signal.aborted && performance.now() < hooks.deadline) {
    // reconcileNewReplicaSet: scale up to at most replicas + maxSurge pods in both ReplicaSets.
    const scaleUp = Math.min(replicas + maxSurge - (old.length + fresh.length), replicas - fresh.length);
    for (let i = 0; i < scaleUp; i += 1) fresh.push(hooks.createNewPod());
    // reconcileOldReplicaSets: scale down while at least replicas - maxUnavailable pods stay available.
    const minAvailable = replicas - maxUnavailable;
    const newUnavailable = fresh.filter((pod) => !pod.ready).length;
    const maxScaledDown = old.length + fresh.length - minAvailable - newUnavailable;
    const available = [...old, ...fresh].filter((pod) => pod.ready).length;
    const scaleDown = Math.min(maxScaledDown, available - minAvailable, old.length);
    if (scaleDown > 0) {
      // The ReplicaSet controller deletes not-ready pods first, then the newest; all are alike here.
      const deleted = old.slice(0, scaleDown);
      old = old.slice(scaleDown);
      for (const pod of deleted) terminations.push(pod.terminate());
    }
    await pause(hooks.syncMs, hooks.signal);
  }
  const complete = done();
  return { terminations: await Promise.all(terminations), complete };
}
