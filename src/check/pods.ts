/**
 * The Envoy pods' checks: every matched pod judged (pod-state.ts), then reported by owning workload, with the
 * command that fixes them all at once.
 */
import { ANNOTATIONS } from '../config/annotation-names.js';
import { formatLabelSelector } from '../config/label-selector.js';
import type { NamespacePods, ReplicaSetOwners, V1Pod } from './cluster.js';
import type { Expectations } from './expectations.js';
import { judgePod, type PodProblem, type PodState } from './pod-state.js';
import type { CheckStatus, Finding } from './finding.js';

export const OPT_IN_LABEL = `${ANNOTATIONS.inject}=enabled`;
const ROLLABLE = new Set(['Deployment', 'DaemonSet', 'StatefulSet']);

/** What a pod's fix acts on: its Deployment/DaemonSet/StatefulSet, else its ReplicaSet or the pod itself. */
export interface Workload {
  readonly kind: string;
  readonly name: string;
  readonly namespace: string;
}

/** "namespace/name" of the ReplicaSet that owns the pod, if one does: read.ts looks up its owner. */
export function replicaSetOf(pod: V1Pod): string | undefined {
  const owner = pod.metadata?.ownerReferences?.find((reference) => reference.controller !== false && reference.kind === 'ReplicaSet');
  return owner === undefined ? undefined : `${pod.metadata?.namespace ?? ''}/${owner.name}`;
}

export function workloadOf(pod: V1Pod, replicaSetOwners: ReplicaSetOwners): Workload {
  const namespace = pod.metadata?.namespace ?? '';
  const owner = pod.metadata?.ownerReferences?.find((reference) => reference.controller !== false);
  if (owner === undefined) return { kind: 'Pod', name: pod.metadata?.name ?? '', namespace };
  const grandparent = owner.kind === 'ReplicaSet' ? replicaSetOwners.get(`${namespace}/${owner.name}`) : undefined;
  return grandparent?.kind === 'Deployment' ? { kind: 'Deployment', name: grandparent.name, namespace } : { kind: owner.kind, name: owner.name, namespace };
}

/** Whether a pod's verdict calls for a fix on its workload (so its ReplicaSet's owner is worth reading). */
export function needsWorkload(state: PodState | undefined): boolean {
  return state?.kind === 'missing' || (state?.kind === 'injected' && state.problems.length > 0);
}

interface Group {
  readonly check: string;
  readonly status: CheckStatus;
  readonly workload: Workload;
  readonly detail: string;
  readonly problem?: PodProblem;
  readonly pods: string[];
}

interface JudgedPod {
  readonly pod: V1Pod;
  readonly state: PodState;
  readonly workload: Workload;
}

export interface PodCheckInput {
  readonly namespaces: readonly NamespacePods[];
  readonly replicaSetOwners: ReplicaSetOwners;
  readonly expected: Expectations;
  /** -n/--namespace: the one namespace scanned. */
  readonly scope?: string;
}

export function podFindings({ namespaces, replicaSetOwners, expected, scope }: PodCheckInput): Finding[] {
  const optedIn = namespaces.filter((scan) => scan.optedIn);
  const selector = formatLabelSelector(expected.podSelector);
  const findings: Finding[] = [];
  if (optedIn.length === 0 && scope !== undefined) {
    findings.push({
      check: 'pods.namespaces',
      section: 'pods',
      status: 'warning',
      message: `namespace ${scope} is not labelled ${OPT_IN_LABEL}: the webhook injects no pod there`,
      fix: `kubectl label namespace ${scope} ${OPT_IN_LABEL}, then restart its Envoy workloads`,
    });
  } else if (optedIn.length === 0) {
    findings.push({
      check: 'pods.namespaces',
      section: 'pods',
      status: 'warning',
      message: `no namespace is labelled ${OPT_IN_LABEL}: the webhook injects no pod`,
      fix: `kubectl label namespace <namespace of your Envoy pods> ${OPT_IN_LABEL}`,
    });
  }
  for (const scan of optedIn) findings.push(...namespaceFindings(scan, replicaSetOwners, expected, selector));
  for (const scan of namespaces.filter((candidate) => !candidate.optedIn && candidate.pods.length > 0)) {
    findings.push({
      check: 'pods.not-opted-in',
      section: 'pods',
      status: 'info',
      message: `namespace ${scan.namespace}: ${plural(scan.pods.length, 'pod')} ${scan.pods.length === 1 ? 'matches' : 'match'} ${selector}, but the namespace did not opt in`,
      fix: `kubectl label namespace ${scan.namespace} ${OPT_IN_LABEL}, then restart its Envoy workloads`,
      pods: scan.pods.map(podName),
    });
  }
  return findings;
}

function namespaceFindings(scan: NamespacePods, owners: ReplicaSetOwners, expected: Expectations, selector: string): Finding[] {
  const judged: JudgedPod[] = [];
  for (const pod of scan.pods) {
    const state = judgePod(pod, expected);
    if (state !== undefined) judged.push({ pod, state, workload: workloadOf(pod, owners) });
  }
  const protectedPods = judged.filter(({ state }) => state.kind === 'injected' && state.problems.length === 0).length;
  // Opted-out pods and Contour's are not this project's to protect.
  const candidates = judged.filter(({ state }) => state.kind === 'injected' || state.kind === 'missing').length;
  const summary: Finding =
    judged.length === 0
      ? { check: 'pods.protected', section: 'pods', status: 'info', message: `namespace ${scan.namespace} opted in, but no running pod matches ${selector}` }
      : {
          check: 'pods.protected',
          section: 'pods',
          // ok only when every pod the webhook should protect is; otherwise the findings below say why not.
          status: protectedPods === candidates ? 'ok' : 'info',
          message: `namespace ${scan.namespace}: ${protectedPods} of ${plural(judged.length, 'Envoy pod')} protected`,
        };
  return [summary, ...groupsOf(judged).map((group) => groupFinding(group, judged))];
}

function groupsOf(judged: readonly JudgedPod[]): Group[] {
  const groups = new Map<string, Group>();
  const add = (entry: JudgedPod, check: string, status: CheckStatus, detail: string, problem?: PodProblem): void => {
    const key = [check, entry.workload.kind, entry.workload.name, detail].join('\u0000');
    const group = groups.get(key) ?? { check, status, workload: entry.workload, detail, ...(problem === undefined ? {} : { problem }), pods: [] };
    group.pods.push(podName(entry.pod));
    groups.set(key, group);
  };
  for (const entry of judged) {
    const { state } = entry;
    if (state.kind === 'missing') add(entry, 'pods.missing-sidecar', 'failure', 'without the sidecar');
    if (state.kind === 'opted-out') add(entry, 'pods.opted-out', 'info', `opted out with annotation ${ANNOTATIONS.inject}: "false"`);
    if (state.kind === 'own-shutdown-manager') add(entry, 'pods.own-shutdown-manager', 'info', 'carrying their own shutdown-manager container (Contour\'s?), not this one');
    if (state.kind !== 'injected') continue;
    for (const problem of state.problems) {
      add(entry, problem.check, problem.check === 'pods.grace-period' ? 'failure' : 'warning', problem.detail, problem);
    }
  }
  return [...groups.values()];
}

function groupFinding(group: Group, judged: readonly JudgedPod[]): Finding {
  const { workload } = group;
  const total = judged.filter((entry) => sameWorkload(entry.workload, workload)).length;
  // A bare pod is its own workload: "Pod edge/x: without the sidecar".
  const count = workload.kind === 'Pod' ? '' : `${group.pods.length} of ${plural(total, 'pod')} `;
  const fix = fixFor(group);
  return {
    check: group.check,
    section: 'pods',
    status: group.status,
    message: `${workload.kind} ${workload.namespace}/${workload.name}: ${count}${group.detail}`,
    ...(fix === undefined ? {} : { fix }),
    pods: group.pods,
  };
}

function fixFor(group: Group): string | undefined {
  const { workload, pods } = group;
  switch (group.check) {
    case 'pods.missing-sidecar':
    case 'pods.version-skew':
      return restart(workload, pods);
    case 'pods.grace-period':
      return gracePeriodFix(workload, group.problem?.neededGraceSeconds ?? 0);
    case 'pods.sidecar-health':
      return `kubectl -n ${workload.namespace} describe pod ${nameOf(pods[0])}; kubectl -n ${workload.namespace} logs ${nameOf(pods[0])} -c shutdown-manager --previous`;
    case 'pods.own-shutdown-manager':
      return 'to let this project drain them instead, remove that container (see manifests/contour) and restart the workload';
    default:
      return undefined;
  }
}

function restart({ kind, name, namespace }: Workload, pods: readonly string[]): string {
  if (ROLLABLE.has(kind)) return `kubectl -n ${namespace} rollout restart ${kind.toLowerCase()}/${name}`;
  const names = pods.map(nameOf).join(' ');
  return kind === 'Pod'
    ? `re-create it: kubectl -n ${namespace} get pod ${names} -o yaml > pod.yaml && kubectl -n ${namespace} delete pod ${names} && kubectl create -f pod.yaml`
    : `kubectl -n ${namespace} delete pod ${names} (${kind} ${name} re-creates them)`;
}

function gracePeriodFix({ kind, name, namespace }: Workload, seconds: number): string {
  const patch = `'{"spec":{"template":{"spec":{"terminationGracePeriodSeconds":${seconds}}}}}'`;
  if (ROLLABLE.has(kind)) return `kubectl -n ${namespace} patch ${kind.toLowerCase()} ${name} -p ${patch} (or restore it where the template is kept)`;
  return `set terminationGracePeriodSeconds: ${seconds} (at least) in the manifest of ${kind} ${namespace}/${name} and re-create it`;
}

function sameWorkload(a: Workload, b: Workload): boolean {
  return a.kind === b.kind && a.name === b.name && a.namespace === b.namespace;
}

function podName(pod: V1Pod): string {
  return `${pod.metadata?.namespace ?? ''}/${pod.metadata?.name ?? ''}`;
}

function nameOf(qualified: string | undefined): string {
  return (qualified ?? '').split('/')[1] ?? '';
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 ? '' : 's'}`;
}
