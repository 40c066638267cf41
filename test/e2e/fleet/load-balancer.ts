/**
 * The load balancer in front of the fleet: it hands out new connections, never moves existing ones, and
 * learns late that a pod is leaving. Each model says how late, after the source it follows:
 *
 * - 'kube-proxy' (Kubernetes endpoints as they are; in-cluster clients of a Service). At deletion the
 *   endpoint controller publishes the pod's endpoint as `terminating`, so not `ready` at once
 *   (`ready = serving && !terminating`: kubernetes staging/src/k8s.io/endpointslice/utils.go); `serving`
 *   keeps following the pod's readiness, which the kubelet still probes while the pod terminates (only
 *   liveness and startup probes stop). kube-proxy reprograms the node at its next sync (`syncPeriodMs`: its
 *   min-sync-period, 1 s by default, longer on a loaded node or control plane) and sends new connections to
 *   ready endpoints, or, when none is left, to terminating ones that are still serving (KEP-1669,
 *   ProxyTerminatingEndpoints, pkg/proxy/topology.go).
 * - 'l4' (a cloud L4 load balancer with IP targets: GKE's, AWS NLB's). It health-checks each target every
 *   `intervalMs` (Envoy's HTTP health-check filter on the traffic listener, which answers 503 once
 *   /healthcheck/fail was taken; Envoy's /ready before the emulator had that filter) and stops opening new
 *   connections to it `propagationMs` after the `unhealthyThreshold`-th failed check in a row (its control
 *   plane). GKE: 3 s x 2 (envoyproxy/gateway#9210); AWS NLB with IP targets: new connections reach a
 *   deregistering target for about 2 minutes (kubernetes-sigs/aws-load-balancer-controller#3270, citing the
 *   EKS best-practices guide). Existing connections are left alone (both keep established flows).
 * - 'l7' (ALB, Google's HTTP(S) LB): the same health checks, but the LB is a proxy that pools keep-alive
 *   connections to each target; see l7-load-balancer.ts.
 * - 'cluster' (kept for fleet.test.ts) polls each pod's /ready and endpoint every `pollIntervalMs` and keeps it
 *   `deregistrationLagMs` after it first saw it fail. 'local' is externalTrafficPolicy: Local: nodes as targets,
 *   checked every `pollIntervalMs` through kube-proxy's healthCheckNodePort (a node fails once it has only
 *   terminating endpoints), then kube-proxy's local pick (ready, else terminating ones still serving: KEP-1669).
 *
 * A connection to a pod whose Envoy has exited is refused (the LB still sent it there): the client sees a
 * failure. Ports are never dialled after Envoy's exit, so a port reused by a newer pod cannot mislead.
 */
import net from 'node:net';
import { seededRandom } from '../../../src/emulator/envoy-emulator.js';
import { getStatus, type FleetPod } from './pod.js';
import { pause, type TimeScale } from './time.js';

export type LoadBalancerMode = 'cluster' | 'local';

/** Every model, in cluster time. */
export type LoadBalancerModel =
  | { readonly mode: LoadBalancerMode; readonly deregistrationLagMs: number; readonly pollIntervalMs: number }
  | { readonly mode: 'kube-proxy'; readonly syncPeriodMs: number }
  | { readonly mode: 'l4' | 'l7'; readonly health: HealthCheckPolicy; readonly pool?: L7PoolPolicy };

/** A cloud LB's health checks of one target, and how long its control plane takes to act on them. */
export interface HealthCheckPolicy {
  readonly intervalMs: number;
  readonly unhealthyThreshold: number;
  /** From the failed check that crosses the threshold to the last new connection (or request) the LB sends. */
  readonly propagationMs: number;
  /**
   * 'http' (default): GET the health-check filter's path, which `/healthcheck/fail` turns to 503. 'tcp': a connect
   * to the traffic port, which passes while Envoy runs, draining or not (an NLB's default check).
   */
  readonly check?: 'http' | 'tcp';
  /**
   * By mechanism, AWS's: the AWS Load Balancer Controller deregisters an IP target when its pod is deleted, whatever
   * its checks say, and the NLB still opens new connections to it for this long (about 2 minutes:
   * aws-load-balancer-controller #2366, #3270). Undefined: only the checks take a target out.
   */
  readonly deregisterAfterDeletionMs?: number;
  /**
   * A new target takes new connections only this long after the controller first sees its pod's containers ready
   * (minutes, for an NLB); its pod readiness gate keeps the pod not Ready until then, so the rollout waits for it
   * (the fleet's pods take `isRegistered` as that gate). Undefined: registered at its first passing check.
   */
  readonly registrationMs?: number;
}

/** What an L7 LB does with its pooled connections (see l7-load-balancer.ts). */
export interface L7PoolPolicy {
  /** An idle pooled connection is closed by the LB after this long unused (ALB's connection idle timeout, 60 s by default). */
  readonly idleTimeoutMs: number;
  /** Connections to a target the LB stopped using are closed this long after it stopped (ALB's deregistration delay, 300 s by default). */
  readonly deregistrationDelayMs: number;
}

/** The range of lags a model gives (cluster ms from the pod's health-check failure to the last new connection it may get). */
export function nominalLagMs(model: LoadBalancerModel): readonly [number, number] {
  switch (model.mode) {
    case 'kube-proxy':
      return [0, model.syncPeriodMs];
    case 'l4':
    case 'l7': {
      const { intervalMs, unhealthyThreshold, propagationMs, deregisterAfterDeletionMs } = model.health;
      if (deregisterAfterDeletionMs !== undefined) return [deregisterAfterDeletionMs, deregisterAfterDeletionMs + intervalMs];
      return [(unhealthyThreshold - 1) * intervalMs + propagationMs, unhealthyThreshold * intervalMs + propagationMs];
    }
    default:
      return [model.deregistrationLagMs, model.deregistrationLagMs + model.pollIntervalMs];
  }
}

/** The model's own period (its polls, checks or syncs), cluster ms. */
export function periodMs(model: LoadBalancerModel): number {
  switch (model.mode) {
    case 'kube-proxy':
      return model.syncPeriodMs;
    case 'l4':
    case 'l7':
      return model.health.intervalMs;
    default:
      return model.pollIntervalMs;
  }
}

export interface LoadBalancerOptions {
  readonly model: LoadBalancerModel;
  readonly scale: TimeScale;
  readonly seed?: number;
}

/** A target as the LB knows it. */
interface Target {
  registered: boolean;
  /** performance.now() from which it gets no new connection; undefined while in rotation. */
  outAt: number | undefined;
  /** Failed health checks in a row ('l4', 'l7'). */
  failures: number;
  /** performance.now() when its registration began (HealthCheckPolicy.registrationMs). */
  registeringSince?: number;
}

export interface Connection {
  readonly socket: net.Socket;
  readonly pod: FleetPod;
}

/** One endpoint of kube-proxy's last sync: the EndpointSlice conditions it programmed. */
interface SyncedEndpoint {
  readonly pod: FleetPod;
  readonly ready: boolean;
  readonly serving: boolean;
  readonly terminating: boolean;
}

export class LoadBalancer {
  private readonly targets = new Map<string, Target>();
  private readonly random: () => number;
  private readonly stopping = new AbortController();
  private polling: Promise<void> = Promise.resolve();
  private synced: readonly SyncedEndpoint[] = [];

  constructor(
    private readonly options: LoadBalancerOptions,
    /** Every pod of the Deployment, old and new, terminating and gone included (the LB's view of the world). */
    private readonly pods: () => readonly FleetPod[],
  ) {
    this.random = seededRandom(options.seed ?? 1);
  }

  get model(): LoadBalancerModel {
    return this.options.model;
  }

  /** Polls targets until `stop()` (bounded by `deadline`, performance.now()). */
  start(deadline: number): void {
    this.started = true;
    this.polling = this.pollLoop(deadline);
  }

  /** Whether polling began: the targets of the first poll (pollOnce before start) were registered long ago. */
  private started = false;

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.polling;
    await Promise.all(this.checks);
  }

  /** Runs one health-check round (or kube-proxy sync) now (the simulation starts with the LB in sync). */
  async pollOnce(): Promise<void> {
    const now = performance.now();
    const { model } = this.options;
    switch (model.mode) {
      case 'cluster':
        await Promise.all(this.pods().map((pod) => this.checkPod(pod, now)));
        return;
      case 'local':
        for (const node of this.nodes()) this.checkNode(node, now);
        return;
      case 'kube-proxy':
        this.sync();
        return;
      case 'l4':
      case 'l7':
        await Promise.all(this.pods().map((pod) => this.healthCheck(pod, model.health)));
        return;
    }
  }

  /** A new connection to `listener` of a pod the LB picks; rejects as a client would see it fail. */
  dial(listener: string): Promise<Connection> {
    const pod = this.pick();
    if (pod === undefined) return Promise.reject(new Error('no target: the load balancer has no healthy backend'));
    return dialPod(pod, listener);
  }

  /** The pod a new connection (or an L7 request) goes to, per the model; undefined when the LB has no target at all. */
  pick(): FleetPod | undefined {
    const pod = this.choosePod();
    if (pod !== undefined) {
      pod.lastSentAt = performance.now();
      if (pod.deletedAt !== undefined) pod.sentAfterDeletion.push(pod.lastSentAt);
    }
    return pod;
  }

  /** Whether the LB still sends `pod` new connections (for the L7 pool: are its idle connections still in use). */
  inRotation(pod: FleetPod): boolean {
    if (this.options.model.mode === 'kube-proxy') return this.synced.some((endpoint) => endpoint.pod === pod && endpoint.ready);
    return this.targetInRotation(pod.name);
  }

  /** Whether the LB has registered `pod` as a target: the pod readiness gate of HealthCheckPolicy.registrationMs. */
  isRegistered(pod: FleetPod): boolean {
    return this.targets.get(pod.name)?.registered === true;
  }

  /** performance.now() from which `pod` gets no new connection, once known. */
  outOfRotationAt(pod: FleetPod): number | undefined {
    return this.targets.get(pod.name)?.outAt;
  }

  private choosePod(): FleetPod | undefined {
    switch (this.options.model.mode) {
      case 'cluster':
      case 'l4':
      case 'l7':
        return this.choose(this.pods().filter((pod) => this.targetInRotation(pod.name)));
      case 'kube-proxy':
        return this.kubeProxyPick();
      case 'local': {
        const node = this.choose(this.nodes().filter((name) => this.targetInRotation(`node/${name}`)));
        return node === undefined ? undefined : this.kubeProxyLocalPick(node);
      }
    }
  }

  private async pollLoop(deadline: number): Promise<void> {
    while (!this.stopping.signal.aborted && performance.now() < deadline) {
      await pause(this.options.scale.real(periodMs(this.options.model)), this.stopping.signal);
      if (this.stopping.signal.aborted) break;
      const { model } = this.options;
      // A cloud LB checks each target on its own schedule: a slow answer of one never delays the others'.
      if (model.mode === 'l4' || model.mode === 'l7') this.checkEach(model.health);
      else await this.pollOnce();
    }
  }

  private readonly checking = new Set<string>();
  private readonly checks = new Set<Promise<void>>();

  /** One check of every target whose last check has been answered. */
  private checkEach(policy: HealthCheckPolicy): void {
    for (const pod of this.pods()) {
      if (this.checking.has(pod.name)) continue;
      this.checking.add(pod.name);
      const check = this.healthCheck(pod, policy).finally(() => {
        this.checking.delete(pod.name);
        this.checks.delete(check);
      });
      this.checks.add(check);
    }
  }

  /** A target takes new connections once registered, until it is out. */
  private targetInRotation(key: string): boolean {
    const target = this.targets.get(key);
    if (target === undefined || !target.registered) return false;
    return target.outAt === undefined || performance.now() < target.outAt;
  }

  private lagRealMs(): number {
    const { model } = this.options;
    return 'deregistrationLagMs' in model ? this.options.scale.real(model.deregistrationLagMs) : 0;
  }

  /** 'cluster': registered when in endpoints and /ready answers 200; failing from the first poll that sees either change. */
  private async checkPod(pod: FleetPod, now: number): Promise<void> {
    const target = this.targetOf(pod.name);
    if (target.outAt !== undefined) return;
    const inEndpoints = pod.ready && !pod.terminating;
    const healthy = inEndpoints && (await envoyReady(pod));
    if (healthy) target.registered = true;
    else if (target.registered) target.outAt = now + this.lagRealMs();
  }

  /**
   * 'l4', 'l7': one health check of a target. A new pod is registered once it is in the Service's endpoints
   * (the cloud controller registers endpoints: AWS LB controller, GKE NEGs) and passes a check. A registered
   * one goes out of rotation `propagationMs` after its `unhealthyThreshold`-th failed check in a row, and comes
   * back at its next passing check (a pod being deleted never passes again: Envoy answers 503, then nothing).
   */
  private async healthCheck(pod: FleetPod, policy: HealthCheckPolicy): Promise<void> {
    if (pod.gone && !this.targets.has(pod.name)) return;
    const target = this.targetOf(pod.name);
    if (!target.registered) {
      await this.register(pod, target, policy);
      return;
    }
    if (await passesHealthCheck(pod, this.checkTimeoutMs(), policy.check)) {
      target.failures = 0;
      target.outAt = undefined;
    } else {
      target.failures += 1;
      if (target.failures === policy.unhealthyThreshold) target.outAt = performance.now() + this.options.scale.real(policy.propagationMs);
    }
    // Deregistered at deletion by its controller, whatever the checks say (a TCP check passes while Envoy drains).
    if (policy.deregisterAfterDeletionMs !== undefined && pod.deletedAt !== undefined) {
      target.outAt = Math.min(target.outAt ?? Infinity, pod.deletedAt + this.options.scale.real(policy.deregisterAfterDeletionMs));
    }
  }

  /**
   * A new target is registered once its pod is in the Service's endpoints (the cloud controller registers endpoints:
   * AWS LB controller, GKE NEGs) and passes a check; with registrationMs, only that long after its containers were
   * first seen ready (its readiness gate holds the pod's Ready condition until then).
   */
  private async register(pod: FleetPod, target: Target, policy: HealthCheckPolicy): Promise<void> {
    const candidate = policy.registrationMs === undefined ? pod.ready : pod.containersReady;
    if (!candidate || pod.terminating) return;
    if (policy.registrationMs !== undefined && this.started) {
      target.registeringSince ??= performance.now();
      if (performance.now() < target.registeringSince + this.options.scale.real(policy.registrationMs)) return;
    }
    if (await passesHealthCheck(pod, this.checkTimeoutMs(), policy.check)) target.registered = true;
  }

  /**
   * 'local': kube-proxy's healthCheckNodePort answers healthy while the node has a ready local endpoint, and fails
   * once it has only terminating ones (pkg/proxy/endpointschangetracker.go); the LB takes the node out
   * `deregistrationLagMs` after the check that first failed (its threshold and propagation).
   */
  private checkNode(node: string, now: number): void {
    const target = this.targetOf(`node/${node}`);
    const pods = this.pods().filter((pod) => pod.spec.node === node);
    if (pods.some((pod) => pod.ready && !pod.terminating)) {
      target.registered = true;
      target.outAt = undefined;
    } else if (target.registered && target.outAt === undefined) {
      target.outAt = now + this.lagRealMs();
    }
  }

  /**
   * 'kube-proxy': one sync, the EndpointSlices as the endpoint controller publishes them: every pod that has
   * become Ready once and whose object still exists (a deleted pod stays, terminating, until its containers
   * have stopped), with ready = serving && !terminating.
   */
  private sync(): void {
    this.synced = this.endpoints();
  }

  /**
   * A cloud LB's check timeout: 5 s (GKE's and AWS's defaults) in the fleet's time, but at least 1 s of real
   * time, so that the event loop's delay (the whole fleet shares one thread) never fails a check of a live
   * Envoy. An unanswered check failed.
   */
  private checkTimeoutMs(): number {
    return Math.max(1_000, this.options.scale.real(5_000));
  }

  private endpoints(): SyncedEndpoint[] {
    return this.pods()
      .filter((pod) => pod.ready && !pod.gone)
      .map((pod) => ({ pod, serving: pod.serving, terminating: pod.terminating, ready: pod.serving && !pod.terminating }));
  }

  /** kube-proxy's pick from its last sync: ready endpoints, else serving terminating ones (KEP-1669), else none. */
  private kubeProxyPick(): FleetPod | undefined {
    const ready = this.synced.filter((endpoint) => endpoint.ready);
    const usable = ready.length > 0 ? ready : this.synced.filter((endpoint) => endpoint.serving && endpoint.terminating);
    return this.choose(usable)?.pod;
  }

  /**
   * kube-proxy on the node, Local policy: ready local endpoints, else terminating ones still serving (KEP-1669: their
   * readiness, which the kubelet keeps probing), else none: a connection the LB still sends the node then fails.
   */
  private kubeProxyLocalPick(node: string): FleetPod | undefined {
    const local = this.pods().filter((pod) => pod.spec.node === node && !pod.gone);
    const ready = local.filter((pod) => pod.ready && !pod.terminating);
    if (ready.length > 0) return this.choose(ready);
    return this.choose(local.filter((pod) => pod.terminating && pod.serving));
  }

  private nodes(): string[] {
    return [...new Set(this.pods().map((pod) => pod.spec.node))];
  }

  private targetOf(key: string): Target {
    let target = this.targets.get(key);
    if (target === undefined) {
      target = { registered: false, outAt: undefined, failures: 0 };
      this.targets.set(key, target);
    }
    return target;
  }

  private choose<T>(items: readonly T[]): T | undefined {
    return items.length === 0 ? undefined : items[this.random() % items.length];
  }
}

/** A TCP connection to one of `pod`'s listeners; refused once its Envoy has exited. */
export function dialPod(pod: FleetPod, listener: string): Promise<Connection> {
  const port = pod.portOf(listener);
  if (port === undefined) return Promise.reject(new Error(`connection refused: ${pod.name} has exited`));
  return new Promise((resolve, reject) => {
    const socket = net.connect({ host: '127.0.0.1', port }, () => {
      socket.off('error', reject);
      resolve({ socket, pod });
    });
    socket.once('error', reject);
  });
}

async function envoyReady(pod: FleetPod, timeoutMs = 1_000): Promise<boolean> {
  const port = pod.envoy?.ports.admin;
  if (port === undefined || !pod.envoyRunning) return false;
  return (await getStatus(port, '/ready', timeoutMs)) === 200;
}

/**
 * A cloud LB's HTTP health check of a pod: GET the health-check path on Envoy's traffic listener, answered by
 * its health-check filter (200 while live, 503 once /healthcheck/fail was taken), on a new connection each
 * time; without that filter in the emulator, Envoy's /ready (the same state, on the admin port).
 */
async function passesHealthCheck(pod: FleetPod, timeoutMs: number, check: HealthCheckPolicy['check'] = 'http'): Promise<boolean> {
  if (check === 'tcp') return dialPod(pod, 'http').then(
    ({ socket }) => (socket.destroy(), true),
    () => false,
  );
  const path = pod.spec.healthCheckPath;
  if (path === undefined) return envoyReady(pod, timeoutMs);
  const port = pod.portOf('http');
  if (port === undefined) return false;
  return (await getStatus(port, path, timeoutMs)) === 200;
}
