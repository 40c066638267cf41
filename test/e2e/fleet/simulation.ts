/**
 * A fleet rolling update behind a load balancer, in-process: `replicas` Envoy pods (emulator + real sidecar
 * objects on loopback), the Deployment controller replacing them, the LB model handing out new connections,
 * and clients of several kinds keeping traffic on them throughout. Every duration is cluster time, run
 * `scale` times faster (see TimeScale); the report converts back.
 */
import { setMaxListeners } from 'node:events';
import { monitorEventLoopDelay } from 'node:perf_hooks';
import { POD_DRAIN_SETTINGS, resolvePodDrain, type PodDrainValues } from '../../../src/config/drain.js';
import { Tally, type ClientKind } from './clients.js';
import { DEFAULT_STRATEGY, rollingUpdate, type RollingUpdateStrategy } from './deployment.js';
import { L7LoadBalancer } from './l7-load-balancer.js';
import { LoadBalancer, nominalLagMs, periodMs, type L7PoolPolicy, type LoadBalancerModel } from './load-balancer.js';
import { seededRandom } from '../../../src/emulator/envoy-emulator.js';
import { FleetPod } from './pod.js';
import { pause, TimeScale } from './time.js';

/** The drain the injector gives each pod (cluster time); 'no-sidecar' is the negative control. */
export type DrainSetting =
  | {
      readonly checkDelayMs: number;
      readonly checkIntervalMs: number;
      readonly drainDelayMs?: number;
      readonly minOpenConnections?: number;
      /** The pod's long-lived-grace (null or absent: off, the default). */
      readonly longLivedGraceMs?: number | null;
      /** The observed rule's quiet period (absent: the sidecar's default; 0: off, the fixed rule alone). */
      readonly quietPeriodMs?: number;
    }
  | 'no-sidecar';

export interface FleetOptions {
  readonly replicas: number;
  readonly strategy?: RollingUpdateStrategy;
  /** Pods per node (for the 'local' LB model): nodes = ceil(replicas / podsPerNode). */
  readonly podsPerNode?: number;
  readonly scale: number;
  readonly loadBalancer: LoadBalancerModel;
  readonly drain: DrainSetting;
  readonly gracePeriodS: number;
  readonly clients: readonly ClientGroup[];
  /** Real ms between two requests of a client. */
  readonly thinkMs: number;
  /** Cluster time from a pod's creation until its containers run. */
  readonly startupMs?: number;
  /** Readiness probes' period, cluster time. */
  readonly probePeriodMs?: number;
  /** Hard bound on the whole run, real ms. */
  readonly maxRealMs: number;
  readonly seed?: number;
  /**
   * The path of Envoy's HTTP health-check filter on the traffic listener, which the 'l4' and 'l7' models
   * check (undefined: they check Envoy's /ready, as before the emulator had that filter).
   */
  readonly healthCheckPath?: string;
}

/** `count` clients of one kind; `thinkClusterMs`: each waits a random time in this range (cluster ms) between requests, instead of `thinkMs`. */
export interface ClientGroup {
  readonly kind: ClientKind;
  readonly count: number;
  readonly thinkClusterMs?: readonly [number, number];
}

export interface KindReport {
  readonly name: string;
  readonly failureUnit: string;
  readonly ok: number;
  readonly failed: number;
  readonly cut: number;
  readonly samples: readonly string[];
}

export interface PodRelease {
  readonly pod: string;
  /** Cluster ms from the preStop GET /shutdown to the hook's return (when Envoy got SIGTERM). */
  readonly shutdownToReleaseMs: number;
  readonly killed: boolean;
  readonly hookStatus: number | 'none' | 'failed';
  /**
   * Cluster ms from the deletion to the last new connection (or L7 request) the LB sent the pod: the lag as
   * the LB had it (negative: none after the deletion).
   */
  readonly lbLagMs: number | undefined;
  /** The sidecar's /drain answer once the hook returned (its times are the fleet's real ms, as the sidecar ran). */
  readonly drain: unknown;
  /** The lag the sidecar observed (its /drain `loadBalancer.lagMs`), in cluster ms; undefined without one. */
  readonly sidecarLagMs: number | undefined;
  /** The silence the sidecar's observed rule waited for (its /drain `loadBalancer.neededQuietMs`), cluster ms. */
  readonly sidecarNeededQuietMs: number | undefined;
  /**
   * The longest time, cluster ms, between two new connections (or L7 requests) the LB sent the pod after its
   * deletion, the deletion counting as the first: the quiet a quiet period must outlast not to be fooled.
   */
  readonly longestGapMs: number | undefined;
  /** New connections (or L7 requests) the LB sent the pod after Envoy's exit: each one failed. */
  readonly sentAfterExit: number;
}

export interface FleetReport {
  readonly kinds: readonly KindReport[];
  readonly releases: readonly PodRelease[];
  /** Cluster ms from the first scale-up to the last old pod gone and every new pod ready. */
  readonly rolloutMs: number;
  readonly complete: boolean;
  readonly realMs: number;
  /**
   * The event loop's delay during the run, real ms (p99 and max): every pod, client and LB shares one thread,
   * so this is how late any timer of the model may fire. Times `scale` it is cluster time.
   */
  readonly loopDelayMs: { readonly p99: number; readonly max: number };
}

/** The pod's resolved drain, as the webhook would resolve it (checked by resolvePodDrain). */
function podDrain(setting: DrainSetting, gracePeriodS: number): PodDrainValues | undefined {
  if (setting === 'no-sidecar') return undefined;
  const defaults = Object.fromEntries(Object.entries(POD_DRAIN_SETTINGS).map(([name, spec]) => [name, spec.default])) as PodDrainValues;
  // 0 (the fixed rule alone) is what a sidecar without the observed rule does anyway.
  if (setting.quietPeriodMs !== undefined && setting.quietPeriodMs > 0 && !('quiet-period' in POD_DRAIN_SETTINGS)) {
    throw new Error('fleet option quiet-period: this sidecar has no observed rule (no quiet-period setting)');
  }
  const quiet = setting.quietPeriodMs === undefined || !('quiet-period' in POD_DRAIN_SETTINGS) ? {} : { 'quiet-period': setting.quietPeriodMs };
  return resolvePodDrain(
    {
      ...defaults,
      ...quiet,
      'check-delay': setting.checkDelayMs,
      'check-interval': setting.checkIntervalMs,
      'drain-delay': setting.drainDelayMs ?? 0,
      'min-open-connections': setting.minOpenConnections ?? 0,
      'long-lived-grace': setting.longLivedGraceMs ?? null,
      'termination-grace-period': gracePeriodS,
    },
    (name) => `fleet option ${name}`,
  );
}

/** Places pods as the scheduler's spreading would: on the node with the fewest pods still there. */
class Nodes {
  constructor(private readonly names: readonly string[]) {}

  pick(pods: readonly FleetPod[]): string {
    const load = (node: string): number => pods.filter((pod) => !pod.gone && pod.spec.node === node).length;
    return [...this.names].sort((a, b) => load(a) - load(b))[0] ?? 'node-0';
  }
}

export async function runFleet(options: FleetOptions): Promise<FleetReport> {
  const startedAt = performance.now();
  const deadline = startedAt + options.maxRealMs;
  const loopDelay = monitorEventLoopDelay({ resolution: 10 });
  loopDelay.enable();
  const scale = new TimeScale(options.scale);
  const drain = podDrain(options.drain, options.gracePeriodS);
  const pods: FleetPod[] = [];
  const nodeCount = Math.ceil(options.replicas / (options.podsPerNode ?? 2));
  const nodes = new Nodes(Array.from({ length: nodeCount }, (_, i) => `node-${i}`));
  let serial = 0;
  // The LB's registration as the new pods' readiness gate, where the model has one (the old pods were registered long ago).
  const gated = 'health' in options.loadBalancer && options.loadBalancer.health.registrationMs !== undefined;
  const createPod = (generation: string): FleetPod => {
    const pod = new FleetPod({
      ...(gated && generation === 'new' ? { readinessGate: (candidate: FleetPod) => lb.isRegistered(candidate) } : {}),
      name: `envoy-${generation}-${serial++}`,
      node: nodes.pick(pods),
      drain,
      ...(options.healthCheckPath === undefined ? {} : { healthCheckPath: options.healthCheckPath }),
      gracePeriodMs: options.gracePeriodS * 1000,
      startupMs: options.startupMs ?? 3_000,
      probePeriodMs: options.probePeriodMs ?? 2_000,
      scale,
    });
    pods.push(pod);
    pod.boot(deadline);
    return pod;
  };
  const lb = new LoadBalancer({ model: options.loadBalancer, scale, ...(options.seed === undefined ? {} : { seed: options.seed }) }, () => pods);
  const l7 = options.loadBalancer.mode === 'l7' ? new L7LoadBalancer(lb, l7Pool(options.loadBalancer), scale) : undefined;
  const random = seededRandom((options.seed ?? 1) + 7);
  const stopClients = new AbortController();
  // One signal for every client's pauses: many listeners at once, each removed when its pause ends.
  setMaxListeners(0, stopClients.signal);
  const tallies = options.clients.map(() => new Tally());
  let clients: Promise<void>[] = [];
  try {
    const oldPods = Array.from({ length: options.replicas }, () => createPod('old'));
    await waitFor(() => oldPods.every((pod) => pod.ready), deadline, 'the old pods to become ready');
    await lb.pollOnce();
    lb.start(deadline);
    l7?.start(deadline);
    clients = options.clients.flatMap(({ kind, count, thinkClusterMs }, index) =>
      Array.from({ length: count }, () => {
        const nextThinkMs = thinkClusterMs === undefined ? undefined : () => scale.real(thinkClusterMs[0] + (random() % 1000) * ((thinkClusterMs[1] - thinkClusterMs[0]) / 1000));
        return kind.run({
          dial: (listener) => lb.dial(listener),
          tally: tallies[index] ?? new Tally(),
          signal: stopClients.signal,
          thinkMs: options.thinkMs,
          ...(nextThinkMs === undefined ? {} : { nextThinkMs }),
          ...(l7 === undefined ? {} : { l7 }),
        });
      }),
    );
    // Warm-up: every client connected and the LB polled at least twice.
    await pause(scale.real(2 * periodMs(options.loadBalancer)) + 200);
    const rolloutStart = performance.now();
    const rollout = await rollingUpdate(oldPods, options.replicas, options.strategy ?? DEFAULT_STRATEGY, {
      createNewPod: () => createPod('new'),
      syncMs: 10,
      deadline,
      signal: stopClients.signal,
    });
    const rolloutMs = scale.cluster(performance.now() - rolloutStart);
    // The LB may still send new connections to gone pods for its lag: those failures belong to the rollout.
    const tailMs = scale.real(nominalLagMs(options.loadBalancer)[1] + 2 * periodMs(options.loadBalancer)) + 200;
    await pause(Math.min(tailMs, Math.max(0, deadline - performance.now())));
    stopClients.abort();
    await Promise.all(clients);
    return {
      kinds: options.clients.map(({ kind }, index) => kindReport(kind, tallies[index] ?? new Tally())),
      releases: rollout.terminations.map((record) => {
        const pod = pods.find((candidate) => candidate.name === record.pod);
        const lbLagMs = pod?.deletedAt === undefined || pod.lastSentAt === undefined ? undefined : scale.cluster(pod.lastSentAt - pod.deletedAt);
        return {
          pod: record.pod,
          shutdownToReleaseMs: scale.cluster(record.releasedAt - record.shutdownAt),
          killed: record.killed,
          hookStatus: record.hookStatus,
          lbLagMs,
          drain: record.drain,
          sidecarLagMs: observedLagMs(record.drain, scale),
          sidecarNeededQuietMs: loadBalancerField(record.drain, 'neededQuietMs', scale),
          longestGapMs: pod?.deletedAt === undefined ? undefined : longestGap(pod.deletedAt, pod.sentAfterDeletion, scale),
          sentAfterExit: pod?.sentAfterDeletion.filter((at) => at > record.releasedAt).length ?? 0,
        };
      }),
      rolloutMs,
      complete: rollout.complete,
      realMs: performance.now() - startedAt,
      loopDelayMs: { p99: loopDelay.percentile(99) / 1e6, max: loopDelay.max / 1e6 },
    };
  } finally {
    loopDelay.disable();
    stopClients.abort();
    await Promise.all(clients);
    await l7?.stop();
    await lb.stop();
    await Promise.all(pods.map((pod) => pod.kill()));
  }
}

function longestGap(from: number, times: readonly number[], scale: TimeScale): number | undefined {
  let previous = from;
  let longest = 0;
  for (const at of times) {
    longest = Math.max(longest, at - previous);
    previous = at;
  }
  return times.length === 0 ? undefined : scale.cluster(longest);
}

/** The sidecar's `loadBalancer.lagMs` from its /drain answer (real ms, as the sidecar ran scaled), in cluster ms. */
function observedLagMs(drain: unknown, scale: TimeScale): number | undefined {
  return loadBalancerField(drain, 'lagMs', scale);
}

/** A duration of the /drain answer's `loadBalancer` object (real ms, as the sidecar ran scaled), in cluster ms. */
function loadBalancerField(drain: unknown, name: string, scale: TimeScale): number | undefined {
  if (typeof drain !== 'object' || drain === null) return undefined;
  const lb = (drain as { loadBalancer?: unknown }).loadBalancer;
  if (typeof lb !== 'object' || lb === null) return undefined;
  const value = (lb as Record<string, unknown>)[name];
  return typeof value === 'number' ? scale.cluster(value) : undefined;
}

/** The L7 pool's policy: the model's, or ALB's defaults (idle timeout 60 s, deregistration delay 300 s). */
function l7Pool(model: LoadBalancerModel): L7PoolPolicy {
  return ('pool' in model ? model.pool : undefined) ?? { idleTimeoutMs: 60_000, deregistrationDelayMs: 300_000 };
}

function kindReport(kind: ClientKind, tally: Tally): KindReport {
  return { name: kind.name, failureUnit: kind.failureUnit, ok: tally.ok, failed: tally.failed, cut: tally.cut, samples: [...tally.samples] };
}

async function waitFor(condition: () => boolean, deadline: number, what: string): Promise<void> {
  while (!condition()) {
    if (performance.now() >= deadline) throw new Error(`fleet: timed out waiting for ${what}`);
    await pause(10);
  }
}
