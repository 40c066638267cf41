/**
 * The load balancer in front of the fleet: it hands out new connections, never moves existing ones, and
 * learns late that a pod is leaving. Two models:
 *
 * - 'cluster': an LB whose targets are the pods (a cloud NLB/ALB with IP targets, or kube-proxy with
 *   externalTrafficPolicy: Cluster as seen from the LB). It polls each target's health (Envoy's admin
 *   /ready, 503 once /healthcheck/fail) every `pollIntervalMs`, and also notices a pod leaving the
 *   EndpointSlice (deletion makes it not ready, as the endpoint controller publishes). From the poll that
 *   sees either, it keeps sending new connections to the pod for `deregistrationLagMs` more: the cloud
 *   controller's deregistration and the LB's own propagation (AWS's deregistration delay, GCP's
 *   health-check thresholds), which is what check-delay must outlast.
 * - 'local': externalTrafficPolicy: Local. The LB's targets are nodes, checked on kube-proxy's
 *   healthCheckNodePort; here a node fails its check only once its last pod is gone (Envoy exited), then the
 *   LB keeps it `deregistrationLagMs` more. On the node, kube-proxy sends a connection to a ready local pod,
 *   else to a terminating one still running (KEP-1669, ProxyTerminatingEndpoints), else nowhere (a reset).
 *
 * A connection to a pod whose Envoy has exited is refused (the LB still sent it there): the client sees a
 * failure. Ports are never dialled after Envoy's exit, so a port reused by a newer pod cannot mislead.
 */
import net from 'node:net';
import { seededRandom } from '../../../src/emulator/envoy-emulator.js';
import { getStatus, type FleetPod } from './pod.js';
import { pause, type TimeScale } from './time.js';

export type LoadBalancerMode = 'cluster' | 'local';

export interface LoadBalancerOptions {
  readonly mode: LoadBalancerMode;
  /** Cluster time the LB keeps sending new connections to a target after it saw it fail. */
  readonly deregistrationLagMs: number;
  /** Cluster time between two health checks of every target. */
  readonly pollIntervalMs: number;
  readonly scale: TimeScale;
  readonly seed?: number;
}

/** A target as the LB knows it: when it was registered and when the LB first saw it failing. */
interface Target {
  registered: boolean;
  /** performance.now() of the poll that saw it fail; undefined while healthy. */
  failureSeenAt: number | undefined;
}

export interface Connection {
  readonly socket: net.Socket;
  readonly pod: FleetPod;
}

export class LoadBalancer {
  private readonly targets = new Map<string, Target>();
  private readonly random: () => number;
  private readonly stopping = new AbortController();
  private polling: Promise<void> = Promise.resolve();

  constructor(
    private readonly options: LoadBalancerOptions,
    /** Every pod of the Deployment, old and new, terminating and gone included (the LB's view of the world). */
    private readonly pods: () => readonly FleetPod[],
  ) {
    this.random = seededRandom(options.seed ?? 1);
  }

  /** Polls targets until `stop()` (bounded by `deadline`, performance.now()). */
  start(deadline: number): void {
    this.polling = this.pollLoop(deadline);
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.polling;
  }

  /** Runs one health-check round now (the simulation starts with the LB in sync). */
  async pollOnce(): Promise<void> {
    const now = performance.now();
    if (this.options.mode === 'cluster') await Promise.all(this.pods().map((pod) => this.checkPod(pod, now)));
    else for (const node of this.nodes()) this.checkNode(node, now);
  }

  /** A new connection to `listener` of a pod the LB picks; rejects as a client would see it fail. */
  dial(listener: string): Promise<Connection> {
    const pod = this.pick();
    if (pod === undefined) return Promise.reject(new Error('no target: the load balancer has no healthy backend'));
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

  /** The pod a new connection goes to, per the mode; undefined when the LB has no target at all. */
  pick(): FleetPod | undefined {
    if (this.options.mode === 'cluster') return this.choose(this.pods().filter((pod) => this.inRotation(pod.name)));
    const node = this.choose(this.nodes().filter((name) => this.inRotation(`node/${name}`)));
    return node === undefined ? undefined : this.kubeProxyLocalPick(node);
  }

  private async pollLoop(deadline: number): Promise<void> {
    while (!this.stopping.signal.aborted && performance.now() < deadline) {
      await pause(this.options.scale.real(this.options.pollIntervalMs), this.stopping.signal);
      if (!this.stopping.signal.aborted) await this.pollOnce();
    }
  }

  /** A target takes new connections once registered, until the lag after its failure was seen has passed. */
  private inRotation(key: string): boolean {
    const target = this.targets.get(key);
    if (target === undefined || !target.registered) return false;
    if (target.failureSeenAt === undefined) return true;
    return performance.now() < target.failureSeenAt + this.options.scale.real(this.options.deregistrationLagMs);
  }

  /** 'cluster': registered when in endpoints and /ready answers 200; failing from the first poll that sees either change. */
  private async checkPod(pod: FleetPod, now: number): Promise<void> {
    const target = this.targetOf(pod.name);
    if (target.failureSeenAt !== undefined) return;
    const inEndpoints = pod.ready && !pod.terminating;
    const healthy = inEndpoints && (await envoyReady(pod));
    if (healthy) target.registered = true;
    else if (target.registered) target.failureSeenAt = now;
  }

  /** 'local': a node is healthy while one of its pods is ready; it fails once none of its pods runs. */
  private checkNode(node: string, now: number): void {
    const target = this.targetOf(`node/${node}`);
    const pods = this.pods().filter((pod) => pod.spec.node === node);
    if (pods.some((pod) => pod.ready && !pod.terminating)) {
      target.registered = true;
      target.failureSeenAt = undefined;
    } else if (target.registered && target.failureSeenAt === undefined && !pods.some((pod) => pod.envoyRunning)) {
      target.failureSeenAt = now;
    }
  }

  /** kube-proxy on the node, Local policy: ready local endpoints, else terminating ones still serving, else none. */
  private kubeProxyLocalPick(node: string): FleetPod | undefined {
    const local = this.pods().filter((pod) => pod.spec.node === node);
    const ready = local.filter((pod) => pod.ready && !pod.terminating);
    if (ready.length > 0) return this.choose(ready);
    // A pod whose Envoy exited is still picked if nothing else is left: the node then resets the connection.
    return this.choose(local.filter((pod) => pod.terminating && pod.envoyRunning)) ?? this.choose(local.filter((pod) => pod.terminating));
  }

  private nodes(): string[] {
    return [...new Set(this.pods().map((pod) => pod.spec.node))];
  }

  private targetOf(key: string): Target {
    let target = this.targets.get(key);
    if (target === undefined) {
      target = { registered: false, failureSeenAt: undefined };
      this.targets.set(key, target);
    }
    return target;
  }

  private choose<T>(items: readonly T[]): T | undefined {
    return items.length === 0 ? undefined : items[this.random() % items.length];
  }
}

async function envoyReady(pod: FleetPod): Promise<boolean> {
  const port = pod.envoy?.ports.admin;
  if (port === undefined || !pod.envoyRunning) return false;
  return (await getStatus(port, '/ready', 1_000)) === 200;
}
