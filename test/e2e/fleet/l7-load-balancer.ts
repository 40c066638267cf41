/**
 * An L7 load balancer that pools keep-alive connections to Envoy (AWS ALB, Google's external HTTP(S) LB):
 * clients send it requests, it forwards each over an idle pooled HTTP/1.1 connection to a target it picks
 * (the most recently used first), or opens a new one, and answers the client with Envoy's response. Its
 * targets and health checks are LoadBalancer's 'l7' model (see load-balancer.ts): it stops picking a target
 * `propagationMs` after the target's `unhealthyThreshold`-th failed check.
 *
 * What it does that matters to a drain, with its sources:
 *
 * - A pooled connection is reused until Envoy answers `Connection: close` (Envoy's drain: every response once
 *   its health checks failed), then closed; an **idle** pooled connection gets no such signal (Envoy drains a
 *   connection only when it encodes a response on it, and has no proactive idle drain: envoy #42305), so it
 *   stays open, and counted by the sidecar, until the LB closes it.
 * - The LB closes a pooled connection idle for `idleTimeoutMs` (ALB's "connection idle timeout", 60 s by
 *   default, which applies to its connections to targets as well: the ALB user guide asks for a target
 *   keep-alive timeout above it for that reason), and every connection to a target it stopped using
 *   `deregistrationDelayMs` after it stopped (ALB's "deregistration delay", 300 s by default: "Elastic Load
 *   Balancing stops sending requests to targets that are deregistering", in-flight requests complete).
 * - A request it sends on a connection that Envoy closes or resets before the response (Envoy exiting) is
 *   lost: the client gets a 502 (ALB troubleshooting, "HTTP 502: the target closed the connection with a TCP
 *   RST or a TCP FIN while the load balancer had an outstanding request to the target"); so is a request to a
 *   target whose Envoy refuses the connection. ALB does not retry either; neither does this model.
 *
 * Not modelled: the client's own connection to the LB (the LB terminates it; nothing of the rollout reaches
 * it), HTTP/2 or gRPC to targets (ALB speaks HTTP/1.1 to targets by default), request queuing limits.
 */
import { Http1Connection, type L7Frontend } from './clients.js';
import { dialPod, type L7PoolPolicy, type LoadBalancer } from './load-balancer.js';
import type { FleetPod } from './pod.js';
import { pause, type TimeScale } from './time.js';

interface Pooled {
  readonly pod: FleetPod;
  readonly http: Http1Connection;
  /** performance.now() when its last response ended. */
  lastUsedAt: number;
}

/** How long the LB waits for a target's response: ALB's idle timeout bounds it; a few seconds is plenty here. */
const RESPONSE_TIMEOUT_MS = 5_000;

export class L7LoadBalancer implements L7Frontend {
  /** Idle pooled connections per target, the most recently used last. */
  private readonly idle = new Map<FleetPod, Pooled[]>();
  private readonly open = new Set<Pooled>();
  private readonly stopping = new AbortController();
  private sweeping: Promise<void> = Promise.resolve();
  /** Connections the LB closed because they had been idle too long, or their target was out for the deregistration delay. */
  closedIdle = 0;

  constructor(
    private readonly lb: LoadBalancer,
    private readonly policy: L7PoolPolicy,
    private readonly scale: TimeScale,
  ) {}

  /** Sweeps idle connections every cluster second until `stop()` (bounded by `deadline`, performance.now()). */
  start(deadline: number): void {
    this.sweeping = (async () => {
      while (!this.stopping.signal.aborted && performance.now() < deadline) {
        await pause(this.scale.real(1_000), this.stopping.signal);
        this.sweep();
      }
    })();
  }

  async stop(): Promise<void> {
    this.stopping.abort();
    await this.sweeping;
    for (const pooled of this.open) pooled.http.close();
    this.open.clear();
    this.idle.clear();
  }

  async request(path: string): Promise<{ status: number; reason?: string }> {
    const pod = this.lb.pick();
    if (pod === undefined) return { status: 503, reason: 'no healthy target' };
    let pooled = this.takeIdle(pod);
    if (pooled === undefined) {
      try {
        const connection = await dialPod(pod, 'http');
        pooled = { pod, http: new Http1Connection(connection.socket, path), lastUsedAt: performance.now() };
        this.open.add(pooled);
      } catch (error) {
        return { status: 502, reason: `connect to ${pod.name}: ${message(error)}` };
      }
    }
    try {
      const response = await pooled.http.request(RESPONSE_TIMEOUT_MS);
      if (response.closing || this.stopping.signal.aborted) this.discard(pooled);
      else this.putBack(pooled);
      return { status: response.status };
    } catch (error) {
      this.discard(pooled);
      return { status: 502, reason: `${pod.name}: ${message(error)}` };
    }
  }

  private takeIdle(pod: FleetPod): Pooled | undefined {
    const list = this.idle.get(pod);
    while (list !== undefined && list.length > 0) {
      const pooled = list.pop();
      if (pooled !== undefined && !pooled.http.closed) return pooled;
      if (pooled !== undefined) this.open.delete(pooled);
    }
    return undefined;
  }

  private putBack(pooled: Pooled): void {
    pooled.lastUsedAt = performance.now();
    let list = this.idle.get(pooled.pod);
    if (list === undefined) {
      list = [];
      this.idle.set(pooled.pod, list);
    }
    list.push(pooled);
  }

  private discard(pooled: Pooled): void {
    pooled.http.close();
    this.open.delete(pooled);
  }

  /** Closes idle connections past the idle timeout, and those of targets out for the deregistration delay. */
  private sweep(): void {
    const now = performance.now();
    const idleTimeout = this.scale.real(this.policy.idleTimeoutMs);
    const delay = this.scale.real(this.policy.deregistrationDelayMs);
    for (const [pod, list] of this.idle) {
      const outAt = this.lb.outOfRotationAt(pod);
      const deregistered = outAt !== undefined && now >= outAt + delay;
      const kept = list.filter((pooled) => {
        if (pooled.http.closed) {
          this.open.delete(pooled);
          return false;
        }
        if (deregistered || now - pooled.lastUsedAt >= idleTimeout) {
          this.closedIdle += 1;
          this.discard(pooled);
          return false;
        }
        return true;
      });
      if (kept.length === 0) this.idle.delete(pod);
      else this.idle.set(pod, kept);
    }
  }
}

function message(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}
