/**
 * Pod deletions behind a real HAProxy: each scenario (how HAProxy checks the pods, what the clients are) run under
 * each rule of the sidecar (the fixed rule below and above HAProxy's DOWN time, the observed rule, and no sidecar),
 * and what happened: requests served and failed, when HAProxy marked the deleted pod DOWN (its log), the last
 * request it sent that pod (its log), the lag the sidecar reported, and when /shutdown let the pod go.
 *
 * Every run starts its own pods, HAProxy and clients, deletes pod 0 (srv0) once, and closes everything. Real
 * durations are short: HAProxy checks every 300 ms and needs 3 failures (DOWN 0.6-0.9 s after the failure, or
 * after Envoy's exit when nothing else fails the checks); the sidecar's timers are the proof's (test/e2e/fleet/
 * proof-tables.ts) at its scale of 20: check-interval 100 ms (2 s), the observed rule's check-delay 250 ms (5 s) and
 * quiet period 500 ms (10 s), a drain deadline of 3 s (60 s).
 */
import os from 'node:os';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { pause } from '../fleet/time.js';
import { busyHttpClients, kubeletProbe, sparseHttpClients, tcpEchoClients, Tally, type ClientRun } from './clients.js';
import { Haproxy, type HaproxyConfig } from './haproxy.js';
import { loadGeneratorUnavailable, startLoadGenerator, type LoadGeneratorName, type LoadGeneratorRun } from './load-generators.js';
import { EnvoyPod, HEALTH_CHECK_PATH, type Deletion } from './pod.js';

/** HAProxy's checks: every 300 ms, DOWN after 3 failures in a row, UP after 2 passes. */
export const CHECK_INTER_MS = 300;
export const FALL = 3;
export const RISE = 2;
/** The sidecar's poll. */
export const CHECK_INTERVAL_MS = 100;
/** The drain's deadline (--drain-timeout). */
export const DRAIN_TIMEOUT_MS = 3_000;
/** The fixed rule's check-delays: below HAProxy's earliest DOWN ((FALL - 1) x inter), and above its latest (FALL x inter) with a margin. */
export const FIXED_BELOW_MS = 200;
export const FIXED_ABOVE_MS = 1_500;
/** The observed rule: a small check-delay, and the quiet period (the sidecar's defaults, 5 s and 10 s, at the proof's scale of 20). */
export const OBSERVED_CHECK_DELAY_MS = 250;
export const QUIET_PERIOD_MS = 500;
/** Pods behind HAProxy; pod 0 (srv0) is deleted. */
export const PODS = 3;
const VICTIM = 'srv0';
/** Busy clients before the deletion, so that HAProxy has sent every pod traffic. */
const WARM_UP_MS = 1_000;
/** After Envoy's exit: up to this long for HAProxy to mark the pod DOWN, then TAIL_MS more of traffic. */
const DOWN_WAIT_MS = 3_000;
const TAIL_MS = 500;
/**
 * Scenario (b): the kubelet's readiness probe of Envoy's traffic port, an HTTP GET of a routed path (answered 200 by
 * Envoy's route, a request like a client's) every second, the shortest period Kubernetes allows and --probe-ports
 * takes; the sidecar is told of it as the injector writes it, PORT/PERIOD.
 */
const PROBE_PERIOD_MS = 1_000;
const PROBE_PATH = '/';

export type RuleName = 'fixed-below' | 'fixed-above' | 'observed' | 'control';
export const RULE_NAMES: readonly RuleName[] = ['fixed-below', 'fixed-above', 'observed', 'control'];

const ms = (value: number): string => `${value}ms`;

/** The sidecar's flags for a rule (undefined: no sidecar). */
export function ruleFlags(rule: RuleName): string[] | undefined {
  const common = [`--check-interval=${ms(CHECK_INTERVAL_MS)}`, `--drain-timeout=${ms(DRAIN_TIMEOUT_MS)}`, '--admin-timeout=1s'];
  switch (rule) {
    case 'fixed-below':
      return [...common, `--check-delay=${ms(FIXED_BELOW_MS)}`, '--quiet-period=0s'];
    case 'fixed-above':
      return [...common, `--check-delay=${ms(FIXED_ABOVE_MS)}`, '--quiet-period=0s'];
    case 'observed':
      return [...common, `--check-delay=${ms(OBSERVED_CHECK_DELAY_MS)}`, `--quiet-period=${ms(QUIET_PERIOD_MS)}`];
    case 'control':
      return undefined;
  }
}

export function ruleLabel(rule: RuleName): string {
  switch (rule) {
    case 'fixed-below':
      return `fixed: check-delay ${FIXED_BELOW_MS} ms (below HAProxy's DOWN)`;
    case 'fixed-above':
      return `fixed: check-delay ${FIXED_ABOVE_MS} ms (above HAProxy's DOWN)`;
    case 'observed':
      return `observed: check-delay ${OBSERVED_CHECK_DELAY_MS} ms, quiet-period ${QUIET_PERIOD_MS} ms`;
    case 'control':
      return 'no sidecar (control)';
  }
}

export type ClientsName = 'busy' | 'sparse' | 'tcp' | LoadGeneratorName;

export interface Scenario {
  readonly key: string;
  readonly label: string;
  readonly mode: 'http' | 'tcp';
  /** HAProxy's HTTP check path (http mode). */
  readonly checkPath?: string;
  readonly httpReuse?: HaproxyConfig['httpReuse'];
  readonly clients: ClientsName;
  /** The kubelet probes Envoy's traffic port, and the sidecar is told so (--probe-ports). */
  readonly probeTrafficPort?: boolean;
  /** Independent deletions in the row (each a run of its own): for a scenario whose losses are chance events. */
  readonly runs?: number;
}

/** Busy clients: 8 keep-alive HTTP/1.1 clients, a request every 20 ms each, a new connection every 5 requests. */
const BUSY = { count: 8, thinkMs: 20, requestsPerConnection: 5 };
/** Sparse clients: a new client every 150 ms on average (one request each), so about every 450 ms for each pod. */
const SPARSE_MEAN_GAP_MS = 150;
/** The load generators' pace: 8 connections (h2load: 4 clients) at 50 (100) requests/s each, as the busy clients. */
const TOOL_LOAD: Readonly<Record<LoadGeneratorName, { connections: number; ratePerConnection: number }>> = {
  wrk: { connections: 8, ratePerConnection: 50 },
  hey: { connections: 8, ratePerConnection: 50 },
  h2load: { connections: 4, ratePerConnection: 100 },
};

export const SCENARIOS: readonly Scenario[] = [
  { key: 'a', label: 'a. busy clients, HTTP checks of /healthz', mode: 'http', checkPath: HEALTH_CHECK_PATH, clients: 'busy' },
  { key: 'a-reuse-always', label: 'a. the same, `http-reuse always`', mode: 'http', checkPath: HEALTH_CHECK_PATH, httpReuse: 'always', clients: 'busy' },
  { key: 'a-wrk', label: 'a. the same, wrk (HTTP/1.1)', mode: 'http', checkPath: HEALTH_CHECK_PATH, clients: 'wrk' },
  { key: 'a-hey', label: 'a. the same, hey (HTTP/1.1)', mode: 'http', checkPath: HEALTH_CHECK_PATH, clients: 'hey' },
  { key: 'a-h2load', label: 'a. the same, h2load (HTTP/2 to HAProxy)', mode: 'http', checkPath: HEALTH_CHECK_PATH, clients: 'h2load' },
  {
    key: 'b',
    label: "b. the kubelet's probe (GET / every 1 s) on the traffic port, declared (--probe-ports=PORT/1s)",
    mode: 'http',
    checkPath: HEALTH_CHECK_PATH,
    clients: 'busy',
    probeTrafficPort: true,
  },
  { key: 'c', label: `c. sparse clients (a new one every ${SPARSE_MEAN_GAP_MS} ms on average), 3 deletions`, mode: 'http', checkPath: HEALTH_CHECK_PATH, clients: 'sparse', runs: 3 },
  {
    key: 'c-reuse-never',
    label: 'c. the same with `http-reuse never` (no idle server connection left in a pool), 5 deletions',
    mode: 'http',
    checkPath: HEALTH_CHECK_PATH,
    httpReuse: 'never',
    clients: 'sparse',
    runs: 5,
  },
  { key: 'd', label: 'd. `mode tcp`, TCP checks of the TCP proxy', mode: 'tcp', clients: 'tcp' },
  { key: 'e', label: 'e. HTTP checks of a routed path (GET /)', mode: 'http', checkPath: '/', clients: 'busy' },
];

export function scenarioOf(key: string): Scenario {
  const scenario = SCENARIOS.find((candidate) => candidate.key === key);
  if (scenario === undefined) throw new Error(`no scenario ${key}; there are ${SCENARIOS.map((s) => s.key).join(', ')}`);
  return scenario;
}

/** Why a scenario cannot run here (a load generator missing), or undefined. */
export function scenarioUnavailable(scenario: Scenario): string | undefined {
  const { clients } = scenario;
  return clients === 'wrk' || clients === 'hey' || clients === 'h2load' ? loadGeneratorUnavailable(clients) : undefined;
}

/** One deletion, as observed. Times are ms; "after failure" is after Envoy took /healthcheck/fail (control: after Envoy's exit). */
export interface RunReport {
  readonly served: number;
  readonly failed: number;
  readonly failures: ReadonlyMap<string, number>;
  /** Failures that came before the deletion (none expected: a broken setup). */
  readonly failedBeforeDeletion: number;
  readonly deletion: Deletion;
  /** Date.now() the times below count from: /healthcheck/fail taken, or (control, or never taken) Envoy's exit. */
  readonly reference: number;
  readonly referenceIs: 'health checks failed' | "Envoy's exit";
  /** HAProxy logged the pod DOWN this long after the reference; undefined if not within DOWN_WAIT_MS of the release. */
  readonly downAfterMs: number | undefined;
  /** The last request (connection) HAProxy sent the pod, whatever became of it, after the reference; undefined if none after it. */
  readonly lastSentAfterMs: number | undefined;
  /** Requests HAProxy sent the pod after the reference, and of them those it answered the client with an error. */
  readonly sentAfter: number;
  readonly sentAfterFailed: number;
  /** /shutdown to its answer (and Envoy's SIGTERM); 0 for the control. */
  readonly releaseAfterMs: number;
  /** The lag the sidecar reported in /drain (`loadBalancer.lagMs`) and its lower bound; undefined without a sidecar. */
  readonly lagMs: number | null | undefined;
  readonly lagAtLeastMs: number | null | undefined;
  /** The same lag in the drain_finished log line (`load_balancer_lag_ms`), to check that they agree. */
  readonly loggedLagMs: unknown;
  /** How the drain ended (its reason) and /shutdown's status; undefined for the control. */
  readonly reason: string | undefined;
  readonly shutdownStatus: number | undefined;
  /** The silence the observed rule waited for at the end (`neededQuietMs`), if on. */
  readonly neededQuietMs: number | null | undefined;
  /** The event loop's delay in this process during the run, p99 and max, ms. */
  readonly loopDelayMs: { readonly p99: number; readonly max: number };
  readonly loadAverage: number;
}

export interface RunOptions {
  /** The sidecar's entry point (see PodOptions.sidecarEntry); default the repository's dist/entry.cjs. */
  readonly sidecarEntry?: string;
}

/** Runs one deletion of `scenario` under `rule`. */
export async function runOnce(scenario: Scenario, rule: RuleName, options: RunOptions = {}): Promise<RunReport> {
  const loop = monitorEventLoopDelay({ resolution: 10 });
  loop.enable();
  const pods: EnvoyPod[] = [];
  let haproxy: Haproxy | undefined;
  let clients: ClientRun | undefined;
  let tool: LoadGeneratorRun | undefined;
  let probe: { stop(): Promise<void> } | undefined;
  try {
    const flags = ruleFlags(rule);
    for (let index = 0; index < PODS; index += 1) {
      // Only the deleted pod has a sidecar: the others stay, and theirs would idle. (b): --probe-ports is its traffic port.
      const probePorts = (ports: { readonly http: number }): string[] => (scenario.probeTrafficPort === true ? [`--probe-ports=${ports.http}/${ms(PROBE_PERIOD_MS)}`] : []);
      const sidecarFlags = index === 0 && flags !== undefined ? (ports: { readonly http: number }) => [...flags, ...probePorts(ports)] : undefined;
      pods.push(await EnvoyPod.start({ name: `srv${index}`, sidecarFlags, ...(options.sidecarEntry === undefined ? {} : { sidecarEntry: options.sidecarEntry }) }));
    }
    const victim = pods[0];
    if (victim === undefined) throw new Error('no pods');
    const servers = pods.map((pod, index) => ({ name: `srv${index}`, port: scenario.mode === 'http' ? pod.envoy.ports.http : pod.envoy.ports.tcp }));
    haproxy = await Haproxy.start({
      mode: scenario.mode,
      servers,
      checkInterMs: CHECK_INTER_MS,
      fall: FALL,
      rise: RISE,
      ...(scenario.checkPath === undefined ? {} : { checkPath: scenario.checkPath }),
      ...(scenario.httpReuse === undefined ? {} : { httpReuse: scenario.httpReuse }),
    });
    if (scenario.probeTrafficPort === true) probe = kubeletProbe({ port: victim.envoy.ports.http, path: PROBE_PATH, periodMs: PROBE_PERIOD_MS });
    clients = startClients(scenario, haproxy.port);
    if (clients === undefined) {
      const name = scenario.clients as LoadGeneratorName;
      tool = await startLoadGenerator(name, { port: haproxy.port, durationMs: WARM_UP_MS + DRAIN_TIMEOUT_MS + DOWN_WAIT_MS / 2, ...TOOL_LOAD[name] });
    }
    await pause(WARM_UP_MS);
    const failedBeforeDeletion = clients?.tally.failed ?? 0;
    const deletion = await victim.delete(DRAIN_TIMEOUT_MS + 5_000);
    const reference = deletion.healthChecksFailedAt ?? deletion.releasedAt;
    // HAProxy goes on sending the pod what it sends until it marks it DOWN: wait for that (bounded), then a little more.
    await haproxy.waitForDown(VICTIM, deletion.deletedAt, DOWN_WAIT_MS);
    await pause(TAIL_MS);
    const tally = new Tally();
    if (clients !== undefined) {
      await clients.stop();
      tally.add(clients.tally);
      clients = undefined;
    }
    if (tool !== undefined) {
      tally.add(await tool.result);
      tool = undefined;
    }
    const down = haproxy.downAt(VICTIM, deletion.deletedAt);
    const sent = haproxy.requests.filter((request) => request.server === VICTIM && request.at >= reference);
    const failedStatus = (request: { status: number; termination: string }): boolean => (scenario.mode === 'http' ? request.status !== 200 : request.termination !== '--');
    const lb = deletion.drain?.loadBalancer;
    return {
      served: tally.served,
      failed: tally.failed,
      failures: tally.failures,
      failedBeforeDeletion,
      deletion,
      reference,
      referenceIs: deletion.healthChecksFailedAt === undefined ? "Envoy's exit" : 'health checks failed',
      downAfterMs: down === undefined ? undefined : down - reference,
      lastSentAfterMs: sent.length === 0 ? undefined : Math.max(...sent.map((request) => request.at)) - reference,
      sentAfter: sent.length,
      sentAfterFailed: sent.filter(failedStatus).length,
      releaseAfterMs: deletion.releasedAt - deletion.deletedAt,
      lagMs: victim.sidecar === undefined ? undefined : (lb?.lagMs ?? null),
      lagAtLeastMs: victim.sidecar === undefined ? undefined : (lb?.lagAtLeastMs ?? null),
      loggedLagMs: deletion.finishedLog?.['load_balancer_lag_ms'],
      reason: deletion.outcome?.reason,
      shutdownStatus: deletion.shutdownStatus,
      neededQuietMs: lb?.neededQuietMs,
      loopDelayMs: { p99: loop.percentile(99) / 1e6, max: loop.max / 1e6 },
      loadAverage: os.loadavg()[0] ?? 0,
    };
  } finally {
    loop.disable();
    await probe?.stop();
    await clients?.stop();
    await tool?.kill();
    await haproxy?.stop();
    await Promise.all(pods.map((pod) => pod.stop()));
  }
}

function startClients(scenario: Scenario, port: number): ClientRun | undefined {
  switch (scenario.clients) {
    case 'busy':
      return busyHttpClients({ port, ...BUSY });
    case 'sparse':
      return sparseHttpClients({ port, meanGapMs: SPARSE_MEAN_GAP_MS });
    case 'tcp':
      return tcpEchoClients({ port, count: BUSY.count, thinkMs: BUSY.thinkMs });
    default:
      return undefined;
  }
}
