/**
 * Clients that each keep one HTTP/1.1 keep-alive connection busy, as traffic through a load balancer would.
 * Existing connections stay where they are (a load balancer does not move them); when a client's
 * connection to the first replica answers `Connection: close` (Envoy draining after /healthcheck/fail), it
 * reconnects to the second replica, as a new connection would be balanced once the first replica's
 * readiness fails. Every request that fails is recorded (the rollout promise is zero), and that client
 * then goes on with the second replica.
 */
import { Agent, request } from 'node:http';
import type { Socket } from 'node:net';

export interface LoadReport {
  readonly requests: number;
  readonly failures: readonly string[];
  readonly byReplica: Readonly<Record<'first' | 'second', number>>;
  /** performance.now() when the last connection to the first replica closed (undefined if one is still open). */
  readonly firstReplicaLastCloseAt: number | undefined;
  /** performance.now() when the first replica first answered Connection: close. */
  readonly firstReplicaDrainSeenAt: number | undefined;
}

export interface LoadOptions {
  /** Path each request asks for; `/delay/<ms>` makes the emulator answer that much later (a slow upstream). */
  readonly path?: string;
  /** Upper bound of the whole load, whatever the test does. */
  readonly maxDurationMs?: number;
}

export class KeepAliveLoad {
  private running = true;
  private requests = 0;
  private readonly failures: string[] = [];
  private readonly byReplica = { first: 0, second: 0 };
  private readonly firstSockets = new Set<Socket>();
  private firstDrainSeenAt: number | undefined;
  private firstLastCloseAt: number | undefined;
  private readonly agents: Agent[] = [];
  private readonly workers: Promise<void>[];
  private stopped: Promise<LoadReport> | undefined;

  private readonly path: string;

  constructor(
    private readonly ports: { readonly first: number; readonly second: number },
    connections: number,
    options: LoadOptions = {},
  ) {
    this.path = options.path ?? '/';
    const stopAt = performance.now() + (options.maxDurationMs ?? 30_000);
    this.workers = Array.from({ length: connections }, () => this.work(stopAt));
  }

  /** Resolves once `count` requests have been answered, so the test knows the load is flowing. */
  async warmedUp(count: number, timeoutMs = 5_000): Promise<void> {
    const deadline = performance.now() + timeoutMs;
    while (this.requests < count) {
      if (performance.now() > deadline) throw new Error(`only ${this.requests} requests in ${timeoutMs} ms`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /** Requests answered so far. */
  get served(): number {
    return this.requests;
  }

  get openFirstReplicaConnections(): number {
    return this.firstSockets.size;
  }

  stop(): Promise<LoadReport> {
    this.stopped ??= this.finish();
    return this.stopped;
  }

  private async finish(): Promise<LoadReport> {
    this.running = false;
    await Promise.all(this.workers);
    for (const agent of this.agents) agent.destroy();
    return {
      requests: this.requests,
      failures: this.failures,
      byReplica: { ...this.byReplica },
      firstReplicaLastCloseAt: this.firstSockets.size === 0 ? this.firstLastCloseAt : undefined,
      firstReplicaDrainSeenAt: this.firstDrainSeenAt,
    };
  }

  private async work(stopAt: number): Promise<void> {
    // One socket per client and replica: keep-alive reuses it until the server says close.
    const agents = { first: new Agent({ keepAlive: true, maxSockets: 1 }), second: new Agent({ keepAlive: true, maxSockets: 1 }) };
    this.agents.push(agents.first, agents.second);
    let replica: 'first' | 'second' = 'first';
    while (this.running && performance.now() < stopAt) {
      const target = replica;
      try {
        const connection = await this.send(agents[target], target);
        this.requests += 1;
        this.byReplica[target] += 1;
        if (target === 'first' && connection === 'closing') replica = 'second';
      } catch (error) {
        this.failures.push(`${target} replica: ${error instanceof Error ? error.message : String(error)}`);
        // The request is lost; the client's next connection goes through the load balancer, which no
        // longer sends it to a pod that cut it (and counting refusals of a gone pod would inflate the loss).
        replica = 'second';
      }
      await new Promise((resolve) => setTimeout(resolve, 2));
    }
  }

  /** One request; 'closing' when the server asked to close the connection after it. */
  private send(agent: Agent, replica: 'first' | 'second'): Promise<'open' | 'closing'> {
    return new Promise((resolve, reject) => {
      const req = request(
        { host: '127.0.0.1', port: this.ports[replica], path: this.path, agent, signal: AbortSignal.timeout(5_000) },
        (res) => {
          const closing = res.headers.connection === 'close';
          if (replica === 'first' && closing) this.firstDrainSeenAt ??= performance.now();
          res.resume();
          res.on('end', () => (res.statusCode === 200 ? resolve(closing ? 'closing' : 'open') : reject(new Error(`HTTP ${res.statusCode}`))));
          res.on('error', reject);
        },
      );
      if (replica === 'first') req.on('socket', (socket) => this.trackFirstReplicaSocket(socket));
      req.on('error', reject);
      req.end();
    });
  }

  private trackFirstReplicaSocket(socket: Socket): void {
    if (this.firstSockets.has(socket)) return;
    this.firstSockets.add(socket);
    socket.once('close', () => {
      this.firstSockets.delete(socket);
      this.firstLastCloseAt = performance.now();
    });
  }
}
