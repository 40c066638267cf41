/**
 * A fleet rolling update behind a load balancer, in-process: `replicas` Envoy pods (emulator + real sidecar
 * objects on loopback), the Deployment controller replacing them, the LB model handing out new connections,
 * and clients of several kinds keeping traffic on them throughout. Every duration is cluster time, run
 * `scale` times faster (see TimeScale); the report converts back.
 */
import { setMaxListeners } from 'node:events';
import { POD_DRAIN_SETTINGS, resolvePodDrain, type PodDrainValues } from '../../../src/config/drain.js';
import { Tally, type ClientKind } from './clients.js';
import { DEFAULT_STRATEGY, rollingUpdate, type RollingUpdateStrategy } from './deployment.js';
import { LoadBalancer, type LoadBalancerMode } from './load-balancer.js';
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
    }
  | 'no-sidecar';

export interface FleetOptions {
  readonly replicas: number;
  readonly strategy?: RollingUpdateStrategy;
  /** Pods per node (for the 'local' LB model): nodes = ceil(replicas / podsPerNode). */
  readonly podsPerNode?: number;
  readonly scale: number;
  readonly loadBalancer: { readonly mode: LoadBalancerMode; readonly deregistrationLagMs: number; readonly pollIntervalMs: number };
  readonly drain: DrainSetting;
  readonly gracePeriodS: number;
  readonly clients: readonly { readonly kind: ClientKind; readonly count: number }[];
  /** Real ms between two requests of a client. */
  readonly thinkMs: number;
  /** Cluster time from a pod's creation until its containers run. */
  readonly startupMs?: number;
  /** Readiness probes' period, cluster time. */
  readonly probePeriodMs?: number;
  /** Hard bound on the whole run, real ms. */
  readonly maxRealMs: number;
  readonly seed?: number;
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
}

export interface FleetReport {
  readonly kinds: readonly KindReport[];
  readonly releases: readonly PodRelease[];
  /** Cluster ms from the first scale-up to the last old pod gone and every new pod ready. */
  readonly rolloutMs: number;
  readonly complete: boolean;
  readonly realMs: number;
}

/** The pod's resolved drain, as the webhook would resolve it (checked by resolvePodDrain). */
function podDrain(setting: DrainSetting, gracePeriodS: number): PodDrainValues | undefined {
  if (setting === 'no-sidecar') return undefined;
  const defaults = Object.fromEntries(Object.entries(POD_DRAIN_SETTINGS).map(([name, spec]) => [name, spec.default])) as PodDrainValues;
  return resolvePodDrain(
    {
      ...defaults,
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
  const scale = new TimeScale(options.scale);
  const drain = podDrain(options.drain, options.gracePeriodS);
  const pods: FleetPod[] = [];
  const nodeCount = Math.ceil(options.replicas / (options.podsPerNode ?? 2));
  const nodes = new Nodes(Array.from({ length: nodeCount }, (_, i) => `node-${i}`));
  let serial = 0;
  const createPod = (generation: string): FleetPod => {
    const pod = new FleetPod({
      name: `envoy-${generation}-${serial++}`,
      node: nodes.pick(pods),
      drain,
      gracePeriodMs: options.gracePeriodS * 1000,
      startupMs: options.startupMs ?? 3_000,
      probePeriodMs: options.probePeriodMs ?? 2_000,
      scale,
    });
    pods.push(pod);
    pod.boot(deadline);
    return pod;
  };
  const lb = new LoadBalancer({ ...options.loadBalancer, scale, ...(options.seed === undefined ? {} : { seed: options.seed }) }, () => pods);
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
    clients = options.clients.flatMap(({ kind, count }, index) =>
      Array.from({ length: count }, () =>
        kind.run({ dial: (listener) => lb.dial(listener), tally: tallies[index] ?? new Tally(), signal: stopClients.signal, thinkMs: options.thinkMs }),
      ),
    );
    // Warm-up: every client connected and the LB polled at least twice.
    await pause(scale.real(2 * options.loadBalancer.pollIntervalMs) + 200);
    const rolloutStart = performance.now();
    const rollout = await rollingUpdate(oldPods, options.replicas, options.strategy ?? DEFAULT_STRATEGY, {
      createNewPod: () => createPod('new'),
      syncMs: 10,
      deadline,
      signal: stopClients.signal,
    });
    const rolloutMs = scale.cluster(performance.now() - rolloutStart);
    // The LB may still send new connections to gone pods for its lag: those failures belong to the rollout.
    const tailMs = scale.real(options.loadBalancer.deregistrationLagMs + 2 * options.loadBalancer.pollIntervalMs) + 200;
    await pause(Math.min(tailMs, Math.max(0, deadline - performance.now())));
    stopClients.abort();
    await Promise.all(clients);
    return {
      kinds: options.clients.map(({ kind }, index) => kindReport(kind, tallies[index] ?? new Tally())),
      releases: rollout.terminations.map((record) => ({
        pod: record.pod,
        shutdownToReleaseMs: scale.cluster(record.releasedAt - record.shutdownAt),
        killed: record.killed,
        hookStatus: record.hookStatus,
      })),
      rolloutMs,
      complete: rollout.complete,
      realMs: performance.now() - startedAt,
    };
  } finally {
    stopClients.abort();
    await Promise.all(clients);
    await lb.stop();
    await Promise.all(pods.map((pod) => pod.kill()));
  }
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
