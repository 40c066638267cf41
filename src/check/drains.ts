/**
 * The drains of each workload, beside the load balancer's lag its pods' drains observed (the sidecar's
 * shutdown_manager_load_balancer_lag_seconds, the largest over a window, read from Prometheus by read.ts). Pure:
 * the pods, their workloads and the samples in; one row per workload and the findings out.
 *
 * Its findings are warnings (the pods are protected; their drains are at risk): drains.lag-near-deadline,
 * drains.lag-beyond-check-delay, drains.unobserved and drains.held-by-traffic, each with its cause and fix in
 * docs/operations/check.md; the words in docs/glossary.md#lag and docs/glossary.md#poller.
 */
import { drainTimeoutMs as derivedDrainTimeoutMs, POD_DRAIN_SETTINGS } from '../config/drain.js';
import { formatDuration } from '../config/duration.js';
import { envName } from '../config/settings.js';
import * as kinds from '../config/values.js';
import type { NamespacePods, ReplicaSetOwners, V1Container, V1Pod } from './cluster.js';
import type { Expectations } from './expectations.js';
import { DEFAULT_GRACE_SECONDS, judgePod, sidecarOf } from './pod-state.js';
import { workloadOf, type Workload } from './pods.js';
import type { VectorSample } from './prometheus.js';
import type { Finding } from './finding.js';
import { LAG_BUCKETS_SECONDS } from '../sidecar/lag-buckets.js';

export const LAG_METRIC = 'shutdown_manager_load_balancer_lag_seconds';
/** The labels the sidecars' PodMonitor (manifests/monitoring/podmonitors.yaml) gives each series: the pod's controller. */
export const CONTROLLER_KIND_LABEL = 'controller_kind';
export const CONTROLLER_NAME_LABEL = 'controller_name';
/** The largest lag taken for a measurement; a sample above it (or a negative, NaN or infinite one) is left out. */
export const MAX_LAG_SECONDS = 86_400;
/** A last arrival past this share of the drain's deadline is too close to it. */
export const NEAR_DEADLINE_SHARE = 0.8;

/** The one query check sends: the largest lag seen per namespace and controller over the window. */
export function lagQuery(window: string): string {
  return `max by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}) (max_over_time(${LAG_METRIC}[${window}]))`;
}

/** The sidecars' report of the stats the drain needs that Envoy lacks (1 per missing stat, 0 when present). */
export const STATS_MISSING_METRIC = 'shutdown_manager_envoy_stats_missing';

/** The second query: per workload, the stats the drain needs that some pod's Envoy lacked over the window. */
export function statsMissingQuery(window: string): string {
  return `max by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}, stat) (max_over_time(${STATS_MISSING_METRIC}[${window}])) == 1`;
}

export const UNOBSERVED_METRIC = 'shutdown_manager_load_balancer_unobserved_listeners';

/** Per workload and reason, the most listeners a drain could not see clients arrive on over the window. */
export function unobservedQuery(window: string): string {
  return `max by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}, reason) (max_over_time(${UNOBSERVED_METRIC}[${window}])) > 0`;
}

export const HELD_BY_TRAFFIC_METRIC = 'shutdown_manager_drain_held_by_traffic';

/** The workloads a drain of which ended at its deadline held only by traffic that never stopped, over the window. */
export function heldByTrafficQuery(window: string): string {
  return `max by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}) (max_over_time(${HELD_BY_TRAFFIC_METRIC}[${window}])) == 1`;
}

/** One observation per drain whose lag settled (src/sidecar/metrics.ts), with these bucket bounds. */
export const LAG_HISTOGRAM = 'shutdown_manager_drain_load_balancer_lag_seconds';
/** The share of drains the recommended check-delay covers. */
export const LAG_QUANTILE = 0.99;

/** Per workload, the 99th percentile of its drains' settled lags over the window (NaN, dropped, where none settled). */
export function lagQuantileQuery(window: string): string {
  return `histogram_quantile(${LAG_QUANTILE}, sum by (namespace, ${CONTROLLER_KIND_LABEL}, ${CONTROLLER_NAME_LABEL}, le) (increase(${LAG_HISTOGRAM}_bucket[${window}]))) >= 0`;
}

/** The queries sent beside the lag's, each for one finding: null when it failed (the lag is still worth showing). */
export interface SideReadings {
  readonly missingStats?: readonly VectorSample[] | null;
  readonly unobserved?: readonly VectorSample[] | null;
  readonly heldByTraffic?: readonly VectorSample[] | null;
  readonly lagQuantile?: readonly VectorSample[] | null;
}

export const SIDE_QUERIES: Readonly<Record<keyof SideReadings, (window: string) => string>> = {
  missingStats: statsMissingQuery,
  unobserved: unobservedQuery,
  heldByTraffic: heldByTrafficQuery,
  lagQuantile: lagQuantileQuery,
};

/** What is known of the lag: nothing asked, a failed read, or the samples of the query, with the side readings. */
export type LagReading =
  | { readonly status: 'unknown' }
  | { readonly status: 'failed'; readonly source: string; readonly window: string; readonly query: string; readonly message: string }
  | ({
      readonly status: 'read';
      readonly source: string;
      readonly window: string;
      readonly query: string;
      readonly samples: readonly VectorSample[];
    } & SideReadings);

/** One workload's drain settings (the most demanding of its pods', when they differ) and its lag. */
export interface WorkloadDrain {
  readonly kind: string;
  readonly namespace: string;
  readonly name: string;
  /** Its injected, running pods. */
  readonly pods: number;
  /** terminationGracePeriodSeconds: the shortest of its pods'. */
  readonly gracePeriodSeconds: number;
  /** The sidecar's --check-delay: the shortest. */
  readonly checkDelaySeconds: number;
  /** The drain's deadline from its start: the shortest (the near-deadline finding, docs/operations/check.md). */
  readonly deadlineSeconds: number;
  /** The sidecar's --drain-delay (counts against the deadline): the longest. */
  readonly drainDelaySeconds: number;
  /** The sidecar's --check-interval: the longest. */
  readonly checkIntervalSeconds: number;
  /** False when a pod's sidecar runs with --quiet-period=0s (or off). */
  readonly quietPeriod: boolean;
  /** The quiet period its sidecars run with: the longest (0 when off). */
  readonly quietPeriodSeconds: number;
  /** The largest lag its pods' drains observed over the window; null when unknown or no drain was seen. */
  readonly loadBalancerLagSeconds: number | null;
}

/** What the report says about drains: how the lag was read, and a row per workload. */
export interface DrainsReport {
  readonly lag: {
    readonly status: LagReading['status'];
    /** Where it was read from (the Prometheus URL, or the Service through the API server). */
    readonly source?: string;
    readonly window?: string;
    readonly query?: string;
  };
  readonly workloads: readonly WorkloadDrain[];
}

export interface DrainsInput {
  readonly namespaces: readonly NamespacePods[];
  readonly replicaSetOwners: ReplicaSetOwners;
  readonly expected: Expectations;
  readonly lag: LagReading;
}

interface PodTiming {
  readonly graceMs: number;
  readonly checkDelayMs: number;
  readonly deadlineMs: number;
  readonly drainDelayMs: number;
  readonly checkIntervalMs: number;
  readonly quietPeriod: boolean;
  /** The quiet period in force (its default when not set); 0 when off. */
  readonly quietPeriodMs: number;
}

/** A setting of the sidecar as its container sets it: `--name=value`, `--name value`, then a literal env value. */
export function sidecarSetting(sidecar: V1Container, name: string): string | undefined {
  const args = [...(sidecar.command ?? []), ...(sidecar.args ?? [])];
  for (let i = 0; i < args.length; i += 1) {
    const arg = args[i] as string;
    if (arg.startsWith(`--${name}=`)) return arg.slice(name.length + 3);
    if (arg === `--${name}` && args[i + 1] !== undefined && !args[i + 1]?.startsWith('--')) return args[i + 1];
  }
  return sidecar.env?.find((variable) => variable.name === envName(name))?.value || undefined;
}

function durationSetting(sidecar: V1Container, name: 'check-delay' | 'drain-delay' | 'check-interval'): number {
  const raw = sidecarSetting(sidecar, name);
  return (raw === undefined ? undefined : kinds.durationMs.parse(raw)) ?? POD_DRAIN_SETTINGS[name].default;
}

/** The drain of one injected pod, from its sidecar's flags and its grace period. */
export function podTiming(pod: V1Pod, sidecar: V1Container): PodTiming {
  const graceMs = (pod.spec?.terminationGracePeriodSeconds ?? DEFAULT_GRACE_SECONDS) * 1000;
  const flagged = sidecarSetting(sidecar, 'drain-timeout');
  const drainTimeoutMs = (flagged === undefined ? undefined : kinds.durationMs.parse(flagged)) ?? derivedDrainTimeoutMs(graceMs / 1000);
  const quiet = sidecarSetting(sidecar, 'quiet-period');
  const quietMs = quiet === undefined ? undefined : kinds.optionalDurationMs.parse(quiet);
  return {
    graceMs,
    checkDelayMs: durationSetting(sidecar, 'check-delay'),
    deadlineMs: Math.min(drainTimeoutMs, graceMs),
    drainDelayMs: durationSetting(sidecar, 'drain-delay'),
    checkIntervalMs: durationSetting(sidecar, 'check-interval'),
    // Off only when said so: 0s or off. An unreadable value is the sidecar's to refuse, not ours to guess.
    quietPeriod: !(quietMs === null || quietMs === 0),
    quietPeriodMs: quietMs === null ? 0 : (quietMs ?? POD_DRAIN_SETTINGS['quiet-period'].default),
  };
}

function key({ kind, namespace, name }: Workload): string {
  return `${namespace}\u0000${kind}\u0000${name}`;
}

export function drainFindings(input: DrainsInput): { findings: Finding[]; report: DrainsReport } {
  const rows = workloadRows(input);
  const { lag } = input;
  const lagReport: DrainsReport['lag'] = lag.status === 'unknown' ? { status: 'unknown' } : { status: lag.status, source: lag.source, window: lag.window, query: lag.query };
  if (lag.status !== 'read') {
    const workloads = [...rows.values()].map(({ row }) => ({ ...row, loadBalancerLagSeconds: null }));
    // Nothing injected and nothing asked: nothing to say about drains.
    if (lag.status === 'unknown' && workloads.length === 0) return { findings: [], report: { lag: lagReport, workloads } };
    return { findings: [sourceFinding(lag, workloads.length)], report: { lag: lagReport, workloads } };
  }
  const { lags, unattributed } = attribute(lag.samples, input.replicaSetOwners, rows);
  const workloads = [...rows.entries()].map(([id, { row }]) => ({ ...row, loadBalancerLagSeconds: lags.get(id) ?? null }));
  const seen = workloads.filter((row) => row.loadBalancerLagSeconds !== null).length;
  const findings = [readFinding(lag, workloads.length, seen)];
  if (unattributed.length > 0) findings.push(unattributedFinding(unattributed));
  const held = byWorkload(lag.heldByTraffic ?? [], input.replicaSetOwners, rows);
  for (const row of workloads) findings.push(...lagFindings(row, lag.window, held.has(key(row))));
  findings.push(...missingStatsFindings(lag.missingStats ?? [], input.replicaSetOwners, rows, lag.window));
  findings.push(...unobservedFindings(lag.unobserved ?? [], input.replicaSetOwners, rows, lag.window));
  findings.push(...[...held.values()].map(({ who }) => heldByTrafficFinding(who, lag.window)));
  const quantiles = byWorkload(lag.lagQuantile ?? [], input.replicaSetOwners, rows);
  for (const row of workloads) {
    const quantile = quantiles.get(key(row))?.values.get('');
    if (quantile !== undefined && !held.has(key(row))) findings.push(checkDelayFinding(row, quantile, lag.window));
  }
  return { findings, report: { lag: lagReport, workloads } };
}

/** The injected pods' workloads, in the order their namespaces and pods were listed. */
function workloadRows({ namespaces, replicaSetOwners, expected }: DrainsInput): Map<string, { workload: Workload; row: WorkloadDrain }> {
  const rows = new Map<string, { workload: Workload; row: WorkloadDrain }>();
  for (const scan of namespaces.filter((candidate) => candidate.optedIn)) {
    for (const pod of scan.pods) {
      const sidecar = sidecarOf(pod);
      if (judgePod(pod, expected)?.kind !== 'injected' || sidecar === undefined) continue;
      const workload = workloadOf(pod, replicaSetOwners);
      const timing = podTiming(pod, sidecar);
      const id = key(workload);
      const before = rows.get(id)?.row;
      const seconds = (ms: number): number => ms / 1000;
      rows.set(id, {
        workload,
        row: {
          kind: workload.kind,
          namespace: workload.namespace,
          name: workload.name,
          pods: (before?.pods ?? 0) + 1,
          gracePeriodSeconds: Math.min(before?.gracePeriodSeconds ?? Infinity, seconds(timing.graceMs)),
          checkDelaySeconds: Math.min(before?.checkDelaySeconds ?? Infinity, seconds(timing.checkDelayMs)),
          deadlineSeconds: Math.min(before?.deadlineSeconds ?? Infinity, seconds(timing.deadlineMs)),
          drainDelaySeconds: Math.max(before?.drainDelaySeconds ?? 0, seconds(timing.drainDelayMs)),
          checkIntervalSeconds: Math.max(before?.checkIntervalSeconds ?? 0, seconds(timing.checkIntervalMs)),
          quietPeriod: (before?.quietPeriod ?? true) && timing.quietPeriod,
          quietPeriodSeconds: Math.max(before?.quietPeriodSeconds ?? 0, seconds(timing.quietPeriodMs)),
          loadBalancerLagSeconds: null,
        },
      });
    }
  }
  return rows;
}

/**
 * The lag of each workload: a sample's controller is its workload, a ReplicaSet's owning Deployment taken
 * from `owners` (read.ts reads them), else, for a ReplicaSet already deleted, the Deployment whose name plus a
 * pod-template-hash makes the ReplicaSet's name. Samples without controller labels are set aside.
 */
function attribute(
  samples: readonly VectorSample[],
  owners: ReplicaSetOwners,
  rows: ReadonlyMap<string, { workload: Workload }>,
): { lags: Map<string, number>; unattributed: VectorSample[] } {
  const lags = new Map<string, number>();
  const unattributed: VectorSample[] = [];
  for (const sample of samples) {
    const namespace = sample.labels.namespace ?? '';
    const kind = sample.labels[CONTROLLER_KIND_LABEL] ?? '';
    const name = sample.labels[CONTROLLER_NAME_LABEL] ?? '';
    // Not a lag a drain can measure (none lasts a day: a grace period that long would hold every node drain): nothing to say about it.
    if (!Number.isFinite(sample.value) || sample.value < 0 || sample.value > MAX_LAG_SECONDS) continue;
    if (kind === '' || name === '' || namespace === '') {
      unattributed.push(sample);
      continue;
    }
    const workload = kind === 'ReplicaSet' ? replicaSetWorkload(namespace, name, owners, rows) : { kind, name, namespace };
    const id = key(workload);
    lags.set(id, Math.max(lags.get(id) ?? -Infinity, sample.value));
  }
  return { lags, unattributed };
}

/** The alphabet of a pod-template-hash (Kubernetes' rand.SafeEncodeString). */
const TEMPLATE_HASH = /^[bcdfghjklmnpqrstvwxz2456789]{1,10}$/;

export function replicaSetWorkload(namespace: string, name: string, owners: ReplicaSetOwners, rows: ReadonlyMap<string, { workload: Workload }>): Workload {
  const owner = owners.get(`${namespace}/${name}`);
  if (owner?.kind === 'Deployment') return { kind: 'Deployment', name: owner.name, namespace };
  if (owner === undefined) {
    const deployments = [...rows.values()]
      .map(({ workload }) => workload)
      .filter((workload) => workload.kind === 'Deployment' && workload.namespace === namespace && name.startsWith(`${workload.name}-`))
      .filter((workload) => TEMPLATE_HASH.test(name.slice(workload.name.length + 1)))
      .sort((a, b) => b.name.length - a.name.length);
    if (deployments[0] !== undefined) return deployments[0];
  }
  return { kind: 'ReplicaSet', name, namespace };
}

function finding(check: string, status: Finding['status'], message: string, fix?: string): Finding {
  return { check, section: 'drains', status, message, ...(fix === undefined ? {} : { fix }) };
}

const HOW_TO_READ =
  '--prometheus-url=http://localhost:9090 (with kubectl -n monitoring port-forward svc/prometheus-operated 9090) or --prometheus=monitoring/prometheus-operated:9090 (through the API server); Prometheus must scrape the sidecars with the PodMonitor of manifests/monitoring';

function sourceFinding(lag: Exclude<LagReading, { status: 'read' }>, workloads: number): Finding {
  if (lag.status === 'unknown') {
    return finding(
      'drains.prometheus',
      'info',
      `the load balancer's lag of ${plural(workloads, 'workload')} is unknown: it is read from Prometheus, and no --prometheus-url or --prometheus was given`,
      `pass ${HOW_TO_READ}`,
    );
  }
  return finding(
    'drains.prometheus',
    'warning',
    `cannot read the load balancer's lag from Prometheus: ${lag.message}`,
    `check the address and that Prometheus answers: ${HOW_TO_READ}`,
  );
}

function readFinding(lag: Extract<LagReading, { status: 'read' }>, workloads: number, seen: number): Finding {
  const base = `the load balancer's lag read from ${lag.source} over ${lag.window}`;
  if (lag.samples.length === 0) {
    return finding(
      'drains.prometheus',
      'info',
      `${base}: no drain seen (no ${LAG_METRIC} sample in ${lag.window})`,
      'if pods were deleted in that time: is the PodMonitor of manifests/monitoring installed, and do the sidecars export the metric (a recent enough image)?',
    );
  }
  return finding('drains.prometheus', 'ok', `${base}: drains seen for ${seen} of ${plural(workloads, 'workload')}`);
}

function unattributedFinding(samples: readonly VectorSample[]): Finding {
  const namespaces = [...new Set(samples.map((sample) => sample.labels.namespace || '(none)'))].sort().join(', ');
  return finding(
    'drains.unattributed-lag',
    'info',
    `${plural(samples.length, 'series')} of ${LAG_METRIC} (namespace ${namespaces}) carry no ${CONTROLLER_KIND_LABEL} and ${CONTROLLER_NAME_LABEL} labels: their lag is counted for no workload`,
    'scrape the sidecars with the PodMonitor of manifests/monitoring, whose relabelings add them (kubectl apply -k manifests/monitoring)',
  );
}

const POLLER_FIX =
  "point the load balancer's checks at Envoy's health-check filter's path (failing the health checks cannot take the pod out of a check of a routed path); a poller that is not the load balancer (an uptime monitor, a scrape through Envoy) can be declared instead: annotation shutdown-manager.io/pollers: PORT/PERIOD";

function lagFindings(row: WorkloadDrain, window: string, heldByTraffic: boolean): Finding[] {
  const lag = row.loadBalancerLagSeconds;
  if (lag === null) return [];
  const who = `${row.kind} ${row.namespace}/${row.name}`;
  const findings: Finding[] = [];
  const arrival = row.drainDelaySeconds + lag;
  if (arrival >= NEAR_DEADLINE_SHARE * row.deadlineSeconds) {
    const delay = row.drainDelaySeconds > 0 ? ` (after a drain-delay of ${seconds(row.drainDelaySeconds)})` : '';
    const seen = `${who}: new client traffic still came ${seconds(lag)} after the health checks failed${delay}, past ${NEAR_DEADLINE_SHARE * 100} % of the drain's deadline of ${seconds(row.deadlineSeconds)} (largest over ${window})`;
    findings.push(
      heldByTraffic
        ? finding('drains.lag-near-deadline', 'warning', `${seen}: a poller, which never stops (drains.held-by-traffic); a longer grace period cannot help`, `${POLLER_FIX} on the pod template of ${who}`)
        : finding(
            'drains.lag-near-deadline',
            'warning',
            `${seen}: a slower load balancer makes the drain cut them; or a poller that never stops (a check of a routed path, an uptime monitor, a scrape through Envoy), if its drains end at the deadline with no connection open`,
            `make the load balancer deregister faster (its health check's interval x unhealthy threshold), or give the drain more time: annotation shutdown-manager.io/termination-grace-period: "${graceClearing(arrival)}" (at least) on the pod template of ${who}; for a poller, ${POLLER_FIX}`,
          ),
    );
  }
  const slack = row.checkDelaySeconds + row.checkIntervalSeconds;
  if (!row.quietPeriod && lag > slack) {
    findings.push(
      finding(
        'drains.lag-beyond-check-delay',
        'warning',
        `${who}: the load balancer still sent clients ${seconds(lag)} after the health checks failed (largest over ${window}), well past the check-delay of ${seconds(row.checkDelaySeconds)}, and the sidecar runs with --quiet-period=0s: a drain may end before they stop, and their requests are lost`,
        `turn the quiet-period rule back on (annotation shutdown-manager.io/quiet-period: "10s", or remove the 0s that turned it off: the drain then waits until clients stop arriving), or raise the annotation shutdown-manager.io/check-delay above ${seconds(Math.ceil(lag))} on the pod template of ${who}`,
      ),
    );
  }
  return findings;
}

/** What each missing stat costs a drain (the sidecar's own words: src/sidecar/needed-stats.ts checkNeededStats). */
const MISSING_STAT_COST: Readonly<Record<string, string>> = {
  'listener.<listener>.downstream_cx_active': 'no connection can be counted, so a drain ends only at its deadline or when Envoy exits',
  'listener.admin.downstream_cx_total': 'a drain cannot tell the drained process from a replacement but by the connection it holds open',
  'listener.<listener>.downstream_cx_total': 'the load balancer letting go cannot be observed: the quiet period holds nothing',
};

/**
 * The samples of a side query by workload (a ReplicaSet's taken to its Deployment, as the lag's), each with the values
 * of `label` seen; samples without the controller labels, or without `label` when one is asked for, are left out.
 */
function byWorkload(
  samples: readonly VectorSample[],
  owners: ReplicaSetOwners,
  rows: ReadonlyMap<string, { workload: Workload }>,
  label?: string,
): Map<string, { who: string; values: Map<string, number> }> {
  const found = new Map<string, { who: string; values: Map<string, number> }>();
  for (const sample of samples) {
    const namespace = sample.labels.namespace ?? '';
    const kind = sample.labels[CONTROLLER_KIND_LABEL] ?? '';
    const name = sample.labels[CONTROLLER_NAME_LABEL] ?? '';
    const value = label === undefined ? '' : (sample.labels[label] ?? '');
    if (namespace === '' || kind === '' || name === '' || (label !== undefined && value === '')) continue;
    const workload = kind === 'ReplicaSet' ? replicaSetWorkload(namespace, name, owners, rows) : { kind, name, namespace };
    const id = key(workload);
    const entry = found.get(id) ?? { who: `${workload.kind} ${workload.namespace}/${workload.name}`, values: new Map<string, number>() };
    entry.values.set(value, Math.max(entry.values.get(value) ?? 0, Number.isFinite(sample.value) ? sample.value : 0));
    found.set(id, entry);
  }
  return found;
}

/** Why a drain could not see clients arrive on a listener, and what to keep (the sidecar's reasons: src/envoy/arrivals.ts). */
const UNOBSERVED_REASON: Readonly<Record<string, string>> = {
  'arrival-counters-missing': 'neither listener.<listener>.downstream_cx_total nor its downstream_rq_completed: nothing arriving is seen',
  'new-connections-missing': 'no listener.<listener>.downstream_cx_total: requests are seen, new clients and the gaps between them are not',
};

/** `drains.unobserved`: workloads whose drains could not see the load balancer letting go on some listeners. */
function unobservedFindings(samples: readonly VectorSample[], owners: ReplicaSetOwners, rows: ReadonlyMap<string, { workload: Workload }>, window: string): Finding[] {
  return [...byWorkload(samples, owners, rows, 'reason').values()].map(({ who, values }) => {
    const reasons = [...values].sort(([a], [b]) => (a < b ? -1 : 1)).map(([reason, count]) => `${plural(count, 'listener')}, ${UNOBSERVED_REASON[reason] ?? reason}`);
    return finding(
      'drains.unobserved',
      'warning',
      `${who}: its drains could not see the load balancer letting go (seen by its sidecars over ${window}): ${reasons.join('; ')}. Their lag is not reported, and check-delay (or the quiet period, on what was seen) is what protected them`,
      "keep listener.*.downstream_cx_total and listener.*.http.*.downstream_rq_completed in the Envoy bootstrap's stats_config.stats_matcher; until then, give check-delay the load balancer's whole deregistration time",
    );
  });
}

/**
 * `drains.check-delay`: the check-delay that covers LAG_QUANTILE of a workload's drains, from the histogram of their
 * settled lags: the upper bound of the bucket the quantile falls in (histogram_quantile interpolates within it, which
 * can only understate), plus one check-interval. What it saves: with the observed rule off, or where the drain cannot
 * see (drains.unobserved), check-delay is the protection; with it on, a drain still waits at least check-delay, so a
 * check-delay above the lag costs every drain the difference.
 */
function checkDelayFinding(row: WorkloadDrain, quantileSeconds: number, window: string): Finding {
  const who = `${row.kind} ${row.namespace}/${row.name}`;
  const bound = LAG_BUCKETS_SECONDS.find((upper) => upper >= quantileSeconds);
  const share = `${LAG_QUANTILE * 100} %`;
  if (bound === undefined) {
    return finding('drains.check-delay', 'info', `${who}: ${share} of its drains saw the load balancer let go only after ${seconds(quantileSeconds)} or more (over ${window}), past the lag histogram's last bucket`);
  }
  const recommended = bound + row.checkIntervalSeconds;
  const facts = `${who}: ${share} of its drains saw the load balancer let go within ${seconds(bound)} of the health-check failure (over ${window}); check-delay is ${seconds(row.checkDelaySeconds)}`;
  const set = `annotation shutdown-manager.io/check-delay: "${seconds(recommended)}" on the pod template of ${who}`;
  // Under the observed rule a drain lasts at least until a quiet period after the last client: its cost over check-delay.
  const ruleHolds = bound + row.quietPeriodSeconds;
  const ruleCost = row.quietPeriod ? `; the observed rule holds a drain until a quiet period after the last client, about ${seconds(ruleHolds)} after the failure for 99 % of them, ${seconds(Math.max(0, ruleHolds - row.checkDelaySeconds))} beyond check-delay` : '';
  if (row.checkDelaySeconds >= recommended) {
    const spare = row.checkDelaySeconds - recommended;
    const cost = row.quietPeriod ? `every drain waits at least check-delay, ${seconds(spare)} longer than it needs` : `${seconds(spare)} of margin beyond it`;
    return finding('drains.check-delay', 'info', `${facts}: ${cost}${ruleCost}`, spare > 0 && row.quietPeriod ? `${set} (the observed rule still waits for the load balancer beyond it)` : undefined);
  }
  const risk = row.quietPeriod ? 'the observed rule waits for the rest where it can see them (drains.unobserved names where it cannot)' : 'with --quiet-period=0s the drains that outlast it lose requests';
  return finding('drains.check-delay', row.quietPeriod ? 'info' : 'warning', `${facts}, below ${seconds(recommended)} (that plus one check-interval): ${risk}${ruleCost}`, set);
}

/** `drains.held-by-traffic`: a workload some drain of which reached its deadline held only by traffic that never stopped. */
function heldByTrafficFinding(who: string, window: string): Finding {
  return finding(
    'drains.held-by-traffic',
    'warning',
    `${who}: a drain reached its deadline with its connections gone, held only by new client traffic that never stopped (seen by its sidecars over ${window}): a poller, not a load balancer's lag; every drain of it takes the whole grace period`,
    `${POLLER_FIX} on the pod template of ${who}`,
  );
}

/**
 * `drains.envoy-stats-missing`: workloads whose Envoy lacked stats the drain needs (a stats_matcher trimming
 * them), as their sidecars reported at start. A warning: the pods are protected, but their drains are blind in part.
 */
function missingStatsFindings(samples: readonly VectorSample[], owners: ReplicaSetOwners, rows: ReadonlyMap<string, { workload: Workload }>, window: string): Finding[] {
  return [...byWorkload(samples, owners, rows, 'stat').values()].map(({ who, values }) => {
    const listed = [...values.keys()].sort();
    const costs = listed.map((stat) => `${stat}: ${MISSING_STAT_COST[stat] ?? 'the drain cannot use it'}`);
    return finding(
      'drains.envoy-stats-missing',
      'warning',
      `${who}: Envoy's stats lack what the drain needs (seen by its sidecars over ${window}): ${costs.join('; ')}`,
      `keep ${listed.join(', ')} in the Envoy bootstrap's stats_config.stats_matcher (an inclusion_list, or an exclusion_list that does not match them)`,
    );
  });
}

/** The shortest grace period (whole seconds) whose deadline puts `arrivalSeconds` below NEAR_DEADLINE_SHARE of it. */
export function graceClearing(arrivalSeconds: number): number {
  let grace = Math.max(1, Math.ceil(arrivalSeconds / NEAR_DEADLINE_SHARE));
  // The drain timeout is the grace period less a margin of seconds: a few steps at most. Bounded all the same.
  for (let step = 0; step < 1_000 && NEAR_DEADLINE_SHARE * Math.min(derivedDrainTimeoutMs(grace), grace * 1000) <= arrivalSeconds * 1000; step += 1) grace += 1;
  return grace;
}

/** A lag or a setting in seconds, as people read it: 4.2s, 45s, 1m30s. */
export function seconds(value: number): string {
  if (value < 60) return `${Number(value.toFixed(1))}s`;
  return formatDuration(Math.round(value) * 1000);
}

function plural(count: number, noun: string): string {
  return `${count} ${noun}${count === 1 || noun.endsWith('s') ? '' : 's'}`;
}
