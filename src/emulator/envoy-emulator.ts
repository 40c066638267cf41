/**
 * An Envoy stand-in for tests: real sockets, real counters, Envoy's admin API shapes. `EnvoyEmulator.start(options)`
 * assembles the parts of this folder (each in its own file, naming the Envoy source it follows) into one Envoy: an
 * HTTP listener (HTTP/1.1, h2c, WebSocket), a TCP proxy, the admin API on a port or a Unix socket, Contour's read-only
 * admin listener, hot restart. Its promise: what the sidecar can observe of it is what it would observe of Envoy.
 *
 * For the tests, the demo, the proof and the benches; the product never imports it (src/emulator/README.md). What it
 * models, release by release, and where it differs on purpose: docs/emulator.md. As a process: cli.ts.
 */
import { AdminApi } from './admin.js';
import { ReadonlyAdminListener } from './contour-admin-listener.js';
import { EmulatorCore, socketAddress, stopAccepting } from './core.js';
import type net from 'node:net';
import { hotRestart, ParentStatsMerger, type HotRestartedChild } from './hot-restart.js';
import type { ListenerConfig } from './drain-manager.js';
import { HttpListener } from './http-listener.js';
import { counter, gauge, type StatValue } from './stats.js';
import { TcpProxyListener } from './tcp-proxy.js';
import type { AdminFault, AdminRequestRecord, DrainScope, DrainStrategy, EnvoyEmulatorOptions, ExitReason, HttpConnectionCounts, ServerState } from './types.js';

export { parseFault } from './admin.js';
export type { HotRestartedChild } from './hot-restart.js';
export { CONNECTION_EVENT_DRAIN_SINCE, gradualDrainClose, seededRandom } from './drain-manager.js';
export { HEALTH_CHECK_FILTER_STATS_SINCE } from './health-check-filter.js';
export { listenerStatName } from './stats.js';
export type {
  AdminFault,
  AdminRequestRecord,
  DrainScope,
  DrainStrategy,
  DrainType,
  EnvoyCommandLine,
  EnvoyEmulatorOptions,
  ExitReason,
  HttpConnectionCounts,
  ListenerSpec,
  RandomSource,
  ServerState,
  TrafficDirection,
} from './types.js';
export { ENVOY_MAIN_VERSION, parseEnvoyVersion, type EnvoyVersion } from './versions.js';

/** A hot restart child's attempts at binding the admin address its parent is closing (20 ms apart). */
const ADMIN_BIND_ATTEMPTS = 50;

export class EnvoyEmulator {
  readonly adminRequests: AdminRequestRecord[] = [];
  /** Settles once the emulator has stopped (every listener and connection closed), with why. */
  readonly exited: Promise<ExitReason>;
  private readonly core: EmulatorCore;
  private readonly http: HttpListener;
  private readonly tcp: TcpProxyListener;
  /** Contour's `envoy-admin` listener, when `readonlyAdminPort` asks for it. */
  private readonly readonly: ReadonlyAdminListener | undefined;
  private readonly admin: AdminApi;
  private readonly stopped = { http: false, tcp: false, readonly: false };
  private listenersStopped = 0;
  private exitReason: ExitReason | undefined;
  private resolveExited: (reason: ExitReason) => void = () => undefined;
  /** In a hot restart child: its parent's stats, merged at each flush (hot-restart.ts). */
  private parentStats: ParentStatsMerger | undefined;

  /** In a hot restart child: whether it has terminated its parent (see ParentStatsMerger). */
  get terminatedParent(): boolean {
    return this.parentStats?.terminatedParent ?? false;
  }

  private constructor(
    private readonly options: EnvoyEmulatorOptions,
    private readonly inherited?: { readonly http: net.Server; readonly tcp: net.Server },
  ) {
    this.core = new EmulatorCore(options);
    this.exited = new Promise((resolve) => (this.resolveExited = resolve));
    this.http = new HttpListener(this.core, options.httpListener);
    this.tcp = new TcpProxyListener(this.core, options.tcpListener);
    this.admin = new AdminApi(
      this.core,
      {
        statValues: () => this.statValues(),
        histogramNames: () => this.histogramNames(),
        stopListeners: (scope) => this.stopListeners(scope),
        shutdown: (reason) => this.shutdown(reason),
        hotRestart: async () => {
          const child = await this.hotRestart();
          return { pid: child.pid, ports: child.ports };
        },
      },
      this.adminRequests,
    );
    this.readonly = this.core.options.readonlyAdminPort === undefined ? undefined : new ReadonlyAdminListener(this.core, () => this.adminAddress());
  }

  /** Starts the three listeners; ports default to free ones (see `ports`). */
  static async start(options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
    const emulator = new EnvoyEmulator(options);
    await emulator.listen();
    return emulator;
  }

  /**
   * A hot restart child (hot-restart.ts): the parent's listen sockets taken over, its admin address bound once
   * the parent's `shutdownParentAdmin` closed it, and its stats merged over `channel` (the fork's IPC channel).
   */
  static async startHotRestartChild(
    options: EnvoyEmulatorOptions,
    inherited: { readonly http: net.Server; readonly tcp: net.Server },
    channel: NodeJS.Process,
    parentAdminClosed: () => Promise<void>,
  ): Promise<EnvoyEmulator> {
    const emulator = new EnvoyEmulator(options, inherited);
    await emulator.http.listen(inherited.http);
    await emulator.tcp.listen(inherited.tcp);
    await parentAdminClosed();
    // The parent's listen socket is closed by its event loop's next turn: the bind may come first, so it is retried.
    for (let attempt = 1; ; attempt += 1) {
      try {
        await emulator.admin.listen();
        break;
      } catch (error) {
        if ((error as NodeJS.ErrnoException).code !== 'EADDRINUSE' || attempt >= ADMIN_BIND_ATTEMPTS) throw error;
        await new Promise((resolve) => setTimeout(resolve, 20));
      }
    }
    const { statsFlushIntervalMs, parentShutdownTimeMs } = emulator.core.options;
    emulator.parentStats = new ParentStatsMerger(channel, statsFlushIntervalMs, parentShutdownTimeMs);
    return emulator;
  }

  /**
   * Hot-restarts this Envoy (hot-restart.ts): forks a child with the next restart epoch, which takes the listen
   * sockets and the admin address; this one drains its connections and exits when the child terminates it.
   */
  hotRestart(): Promise<HotRestartedChild> {
    const { random: _random, clock: _clock, ...plain } = this.options;
    // The child's uptime counts from this process's original start (shutdownParentAdmin hands it over).
    const childOptions = {
      ...plain,
      restartEpoch: this.core.options.restartEpoch + 1,
      startedAt: this.core.startedAtMs,
      ...(this.adminSocket === undefined ? { adminPort: this.ports.admin } : {}),
    };
    return hotRestart({
      listenSockets: { http: this.http.socket, tcp: this.tcp.socket },
      childOptions: () => childOptions,
      closeAdminListenSocket: () => this.admin.stopAccepting(),
      drainListeners: () => {
        // InstanceImpl::drainListeners: every listener stopped, then the drain sequence.
        this.stopListeners('all');
        if (!this.core.drain.covers('all')) this.core.drain.startDrainSequence('all', undefined);
      },
      statValues: () => this.statValues(),
      // InstanceImpl::numConnections is the listener manager's: the admin listener's connections are not in it.
      openConnections: () => this.totalOpenConnections() - this.admin.listener.active,
      terminate: () => this.shutdown('close'),
    });
  }

  get ports(): { readonly admin: number; readonly http: number; readonly tcp: number } {
    return {
      admin: this.admin.port,
      http: this.http.port ?? this.core.options.httpPort,
      tcp: this.tcp.port ?? this.core.options.tcpPort,
    };
  }

  get host(): string {
    return this.core.options.host;
  }

  /** The Unix socket the admin API is served on, if any (then `ports.admin` is 0: no TCP admin port). */
  get adminSocket(): string | undefined {
    return this.core.options.adminSocketPath;
  }

  /** The port of Contour's `envoy-admin` listener, if there is one. */
  get readonlyAdminPort(): number | undefined {
    return this.readonly?.port ?? this.core.options.readonlyAdminPort;
  }

  /** The Envoy release this emulator behaves as, "X.Y.Z". */
  get envoyVersion(): string {
    return this.core.options.version;
  }

  /**
   * The stat names of the data listeners, e.g. `0.0.0.0_8080` (see `listenerStatName`), and of the
   * `envoy-admin` listener if there is one, e.g. `127.0.0.1_9001`.
   */
  get listenerNames(): { readonly http: string; readonly tcp: string; readonly readonlyAdmin?: string } {
    const names = { http: this.http.stats.statName, tcp: this.tcp.stats.statName };
    const readonly = this.readonly?.stats;
    return readonly === undefined ? names : { ...names, readonlyAdmin: readonly.statName };
  }

  /**
   * Utility::serverState once initialized (source/server/utils.cc): DRAINING if and only if health checks
   * are failed. `drain_listeners` alone leaves the server LIVE.
   */
  get state(): ServerState {
    return this.core.state;
  }

  get isHealthCheckFailed(): boolean {
    return this.core.healthCheckFailed;
  }

  /** Whether a graceful `drain_listeners` has started a drain sequence (it cannot be undone). */
  get isDraining(): boolean {
    return this.drainScope !== 'none';
  }

  /** The listeners `drain_listeners?graceful` asked to drain so far. */
  get drainScope(): DrainScope {
    return this.core.drain.scope;
  }

  get drainStrategy(): DrainStrategy {
    return this.core.options.drainStrategy;
  }

  get drainTimeMs(): number {
    return this.core.options.drainTimeMs;
  }

  /** When this instance started, in ms since the epoch (what /server_info uptimes count from). */
  get startedAt(): number {
    return this.core.startedAtMs;
  }

  /** Why the emulator stopped, once it has (see `exited`). */
  get exitedWith(): ExitReason | undefined {
    return this.exitReason;
  }

  /** Open downstream connections per data listener, and on the admin listener. */
  get openConnections(): { readonly http: number; readonly tcp: number; readonly admin: number; readonly readonlyAdmin: number } {
    return { http: this.http.stats.active, tcp: this.tcp.stats.active, admin: this.admin.listener.active, readonlyAdmin: this.readonly?.stats?.active ?? 0 };
  }

  /** The HTTP listener's open connections by codec (the `http.<prefix>.downstream_cx_*_active` gauges). */
  get httpConnections(): HttpConnectionCounts {
    return this.http.connections;
  }

  /** Changes the admin fault; `down` closes the admin listener, leaving `down` reopens it on the same port. */
  setFault(fault: AdminFault, paths: readonly string[] = []): Promise<void> {
    return this.admin.setFault(fault, paths);
  }

  /** Every counter and gauge, sorted by name, as Envoy's /stats lists them. */
  statValues(): StatValue[] {
    const values: StatValue[] = [
      ...this.admin.statValues(),
      ...this.http.statValues(),
      ...this.tcp.statValues(),
      ...(this.readonly?.statValues() ?? []),
      // ListenerManagerImpl::stopListeners stops listeners without removing them: they stay active and
      // `listener_stopped` counts them; `total_listeners_draining` counts only LDS-removed listeners.
      counter('listener_manager.listener_stopped', this.listenersStopped),
      gauge('listener_manager.total_listeners_active', this.readonly === undefined ? 2 : 3, true),
      gauge('listener_manager.total_listeners_draining', 0, true),
      gauge('listener_manager.workers_started', 1, true),
      gauge('server.concurrency', this.core.options.workers, true),
      // InstanceImpl::failHealthcheck sets `live`; `state` is the ServerInfo::State enum (LIVE 0, DRAINING 1).
      gauge('server.live', this.core.healthCheckFailed ? 0 : 1, true),
      gauge('server.state', this.state === 'LIVE' ? 0 : 1, true),
      // updateServerStats (server.cc): both processes' connections, and the parent's alone, during a hot restart.
      gauge('server.total_connections', this.totalOpenConnections() + this.parentConnections, true),
      gauge('server.parent_connections', this.parentConnections, true),
      gauge('server.hot_restart_epoch', this.core.options.restartEpoch, true),
      // A hot restart child's uptime is set by its first merge, and counts from its parent's start (hot-restart.ts).
      gauge('server.uptime', this.parentStats?.mergedOnce === false ? 0 : this.core.uptimeSeconds(), true),
      ...Object.entries(this.core.options.extraGauges).map(([name, value]) => gauge(name, value, true)),
    ];
    const merger = this.parentStats;
    const merged = merger === undefined ? values : values.map((stat) => merger.merged(stat));
    const excluded = this.core.statsExcluded;
    return merged.filter((stat) => !excluded.some((pattern) => pattern.test(stat.name))).sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : 0));
  }

  /** The parent's open connections, as a hot restart child last merged them; 0 otherwise. */
  private get parentConnections(): number {
    return this.parentStats?.parentConnections ?? 0;
  }

  /** InstanceImpl::numConnections: this process's open connections, admin ones included. */
  private totalOpenConnections(): number {
    return this.http.stats.active + this.tcp.stats.active + this.admin.listener.active + (this.readonly?.stats?.active ?? 0);
  }

  /** Waits (bounded) until an admin request matching `predicate` has been received. */
  async waitForAdminRequest(predicate: (request: AdminRequestRecord) => boolean, timeoutMs = 5_000): Promise<AdminRequestRecord> {
    const deadline = Date.now() + timeoutMs;
    for (;;) {
      const found = this.adminRequests.find(predicate);
      if (found !== undefined) return found;
      if (Date.now() >= deadline) throw new Error(`no matching admin request within ${timeoutMs} ms; got ${JSON.stringify(this.adminRequests)}`);
      await new Promise((resolve) => setTimeout(resolve, 10));
    }
  }

  /**
   * Stops like Envoy on SIGTERM (InstanceImpl::shutdown, as for /quitquitquit): no drain, listeners closed,
   * every connection (data and admin) cut at once. Settles `exited` with 'close'.
   */
  close(): Promise<void> {
    return this.shutdown('close');
  }

  private async shutdown(reason: ExitReason): Promise<void> {
    const core = this.core;
    if (core.closed) return;
    core.closed = true;
    core.closing.abort();
    core.clearTimers();
    this.parentStats?.stop();
    // Every data connection is cut, HTTP/2 sessions and WebSockets included: no GOAWAY, no close frame.
    for (const socket of core.sockets) socket.destroy();
    const readonly = this.readonly === undefined ? Promise.resolve() : this.readonly.close();
    await Promise.all([this.http.close(), this.tcp.close(), readonly, this.admin.close()]);
    this.exitReason = reason;
    this.resolveExited(reason);
  }

  private async listen(): Promise<void> {
    await this.http.listen();
    await this.tcp.listen();
    await this.readonly?.listen();
    // With a `down` fault the admin listener binds and closes at once: a port 0 becomes a fixed one, so
    // that the listener comes back on it when the fault is lifted.
    await this.admin.listen();
    if (this.admin.down) await this.admin.close();
  }

  /** Histograms with no recorded values: present in unfiltered output, never used. */
  private histogramNames(): string[] {
    return [`http.${this.core.options.httpStatPrefix}.downstream_cx_length_ms`, `listener.${this.http.stats.statName}.downstream_cx_length_ms`];
  }

  /** Where the admin API listens, as the `envoy-admin` cluster's one endpoint. */
  private adminAddress(): { readonly host: string; readonly port: number } | { readonly socketPath: string } {
    const socketPath = this.core.options.adminSocketPath;
    return socketPath === undefined ? { host: this.core.options.host, port: this.admin.port } : { socketPath: socketAddress(socketPath) };
  }

  /**
   * ListenerManagerImpl::stopListeners: listeners closed, no new connections, existing ones untouched;
   * with inboundonly only INBOUND listeners. Each stopped listener counts once in `listener_stopped`.
   */
  private stopListeners(scope: Exclude<DrainScope, 'none'>): void {
    const covers = (config: ListenerConfig): boolean => scope === 'all' || config.direction === 'inbound';
    if (!this.stopped.http && covers(this.http.config)) {
      this.stopped.http = true;
      this.listenersStopped += 1;
      stopAccepting(this.http.socket);
    }
    if (!this.stopped.tcp && covers(this.tcp.config)) {
      this.stopped.tcp = true;
      this.listenersStopped += 1;
      stopAccepting(this.tcp.socket);
    }
    // Contour's `envoy-admin` listener is an ordinary listener to the listener manager: it stops too.
    if (this.readonly !== undefined && !this.stopped.readonly && covers(this.readonly.config)) {
      this.stopped.readonly = true;
      this.listenersStopped += 1;
      stopAccepting(this.readonly.socket);
    }
  }
}
