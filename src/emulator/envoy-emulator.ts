/**
 * An Envoy stand-in for tests: real sockets, real counters, Envoy's admin API shapes.
 *
 * - an HTTP listener (stat prefix `ingress_http`, codec_type AUTO) speaking HTTP/1.1 (keep-alive) and h2c
 *   (HTTP/2 with prior knowledge) on one port, and accepting WebSocket upgrades (echoed). Routes, the same
 *   on both codecs: anything answers a tiny fixed response, like a `direct_response` route; `/delay/<ms>`
 *   answers that much later (a slow upstream); `/stream?interval_ms=N&count=M` is a long server stream (a
 *   gRPC server-streaming call: a chunk every N ms, M times or until cut). Or, with `upstreamPort`, every
 *   request is routed to an upstream on loopback (a sidecar Envoy in front of its application), answering
 *   503 when the upstream refuses or drops it, as Envoy's router does;
 * - a TCP proxy listener (stat prefix `ingress_tcp`) that holds raw connections and echoes their bytes,
 *   counted in `listener.*` stats only, as Envoy's tcp_proxy has no `downstream_cx_active`;
 * - an admin listener implementing the endpoints the shutdown manager relies on, with the output
 *   formats of Envoy's documentation (see test/fixtures/envoy/), and switchable faults; on a TCP port, or
 *   (`adminSocketPath`) only on a Unix socket, as Contour's bootstrap puts it;
 * - optionally (`readonlyAdminPort`) Contour's `envoy-admin` listener: read-only admin routes, GET only,
 *   forwarded to the admin API (projectcontour/contour internal/envoy/v3/stats.go AdminListener).
 *
 * What it models, and the Envoy source it follows (Envoy 1.34 to 1.40 by default; `version` picks the
 * release for what changed, see `drainListeners` in admin.ts; other version notes inline). Each part lives in
 * its own file, which names the Envoy source it follows in more detail:
 *
 * | file | models |
 * | --- | --- |
 * | `types.ts` | the options and public types |
 * | `core.ts` | shared state: server health-check state, open connections, timers, socket binding |
 * | `versions.ts` | releases: `version`, `1.41.0-dev` for main |
 * | `drain-manager.ts` | DrainManagerImpl: the drain-close decision, drain sequences, main's proactive drain |
 * | `stats.ts` | listener and connection manager stats, chargeStats, /stats formats, Prometheus tags |
 * | `http-listener.ts` | the HTTP listener: codec choice, routes, its connection manager's counters |
 * | `http1.ts` | the HTTP/1.1 codec and its response drain (`Connection: close`) |
 * | `http2.ts` | the h2c codec and the HTTP/2 drain sequence (GOAWAYs, drain_timeout) |
 * | `upgrades.ts` | WebSocket upgrades (no drain signal) |
 * | `health-check-filter.ts` | envoy.filters.http.health_check |
 * | `router.ts` | the router's upstream requests and its 503 local reply |
 * | `tcp-proxy.ts` | the TCP proxy listener |
 * | `contour-admin-listener.ts` | Contour's read-only `envoy-admin` listener |
 * | `admin.ts` | the admin API, its endpoints, formats and faults |
 *
 * In short:
 *
 * - Server state (source/server/utils.cc Utility::serverState, used by ServerInfoHandler::handlerReady and
 *   handlerServerInfo): once initialized, DRAINING if and only if health checks are failed, else LIVE.
 *   `drain_listeners` never changes it; `POST /healthcheck/ok` undoes `/healthcheck/fail`. `server.live` is
 *   `!healthCheckFailed` (server.cc InstanceImpl::failHealthcheck).
 * - Drain close, decided per HTTP response (source/common/http/conn_manager_impl.cc: when encoding response
 *   headers, `drain_state_ == NotDraining && drain_close_.drainClose(scope)` starts the connection's drain
 *   sequence; for HTTP/1.1 that is `Connection: close` and a close after the response, counted in
 *   `http.<prefix>.downstream_cx_drain_close`). The decision is source/server/drain_manager_impl.cc
 *   DrainManagerImpl::drainClose: health checks failed and listener drain_type DEFAULT, always; otherwise
 *   only while a drain covers the listener's direction, then always with `--drain-strategy immediate`, and
 *   with `gradual` (the default) by Envoy's formula in whole seconds (see `gradualDrainClose`).
 * - `drain_listeners` (source/server/admin/listeners_handler.cc ListenersHandler::handlerDrainListeners):
 *   `graceful` starts DrainManagerImpl::startDrainSequence for All or, with `inboundonly` (Envoy 1.34+,
 *   PR #37873), InboundOnly; a repeated drain the running one covers is a no-op; at the end of the drain
 *   time the covered listeners stop accepting unless `skip_exit` (ListenerManagerImpl::stopListeners: the
 *   listeners stay counted in `total_listeners_active`, `listener_stopped` counts them, open connections
 *   stay). Up to 1.39, without `graceful` the listeners stop at once and no drain starts; `skip_exit`
 *   without `graceful` is 400; before 1.29 `skip_exit` does not exist and is ignored (PR #30003); before
 *   1.34 the drain has no direction. From 1.40 (PR #47042, merged 2026-08-27, runtime guard
 *   `envoy.reloadable_features.non_graceful_drain_notifies_connections` taken as on), a call without
 *   `graceful` also starts the drain, then stops the listeners at once unless `skip_exit`, which it accepts.
 *   The emulator follows `version` (default 1.36.2); see `drainListeners` (admin.ts).
 * - Codec choice (ConnectionManagerUtility::determineNextProtocol, conn_manager_utility.cc): a connection whose
 *   data starts with Http2::CLIENT_MAGIC_PREFIX "PRI * HTTP/2" is HTTP/2, any other HTTP/1.1. createCodec
 *   counts it in `http.<prefix>.downstream_cx_http2_total`/`_active` or `…_http1_…`; a connection that has
 *   sent nothing is only in `downstream_cx_active` and the listener stats (stats.rst of the HCM).
 * - HTTP/2 drain (conn_manager_impl.cc startDrainSequence, onDrainTimeout, checkForDeferredClose;
 *   http2/codec_impl.cc shutdownNotice, goAway): the same per-response decision as HTTP/1.1; a yes, on a
 *   connection not draining yet, counts `downstream_cx_drain_close` once for the connection, sends a GOAWAY
 *   with last-stream-id 2^31-1 before the response's headers, and arms the HCM `drain_timeout`
 *   (`httpDrainTimeoutMs`, default 5 s). At its end, a GOAWAY naming the last stream processed; the
 *   connection closes once its streams end. Streams go on throughout; the client's GOAWAY changes nothing
 *   (onGoAway is empty). An HTTP/2 connection with no response encoded since the drain began gets nothing
 *   until Envoy exits; neither does one whose only stream is a long one whose headers went out before
 *   (envoyproxy/envoy#14350, #42305).
 * - WebSocket upgrades (HCM `upgrade_configs` websocket; other upgrade types 403): the 101 is a response
 *   like any, so a yes from the decision starts the drain sequence and counts `downstream_cx_drain_close`,
 *   but encodeHeaders sends no `Connection: close` on an upgrade and the deferred close waits for the
 *   upgraded stream: no drain signal, no close frame (envoyproxy/envoy#45250); the socket is cut at exit.
 *   Counted in `downstream_cx_upgrades_total`/`_active`, and in the HTTP/1.1 gauges too.
 * - No proactive drain of idle connections in a release (up to 1.40): DrainManagerImpl runs drain-close callbacks at drain start
 *   (addOnDrainCloseCb, PR #17026, Envoy 1.19+, spread over the first quarter of the remaining drain time for
 *   `gradual`, at once for `immediate`), but the HTTP connection manager of a released Envoy registers none
 *   (its filter-chain drain decision, PerFilterChainFactoryContextImpl::addOnDrainCloseCb, is an
 *   ENVOY_BUG; the proactive HTTP/2 GOAWAY PR #16201 was closed unmerged; envoyproxy/envoy#42305 "allow
 *   close downstream idle connection while draining" is open). An idle HTTP/1.1 keep-alive connection is
 *   therefore left alone until it sends a request, its idle_timeout (1 h by default) or Envoy's exit.
 * - Envoy main's proactive connection drain, only for `version` CONNECTION_EVENT_DRAIN_SINCE (1.41) and
 *   later, i.e. ENVOY_MAIN_VERSION "1.41.0-dev" (main's VERSION.txt not read: the release after 1.40 with
 *   main's suffix), with the runtime guard `envoy.reloadable_features.use_connection_event_drain` taken as on.
 *   Source: Envoy's changelog on main, NOT its code (main's drain_manager_impl.cc and conn_manager_impl.cc
 *   were not read). changelogs/current.yaml, latest wording: "The HTTP connection manager now proactively
 *   drains connections with active streams in the last third of the listener drain time, rather than only
 *   checking the drain state when a response is sent. This spreads the closure of upgraded (e.g. WebSocket)
 *   and CONNECT streams across the drain window. Idle connections begin draining immediately. Proactive
 *   draining is skipped when --drain-time-s is too short to leave room for the connection manager's drain
 *   timeout. The proactive behavior can be temporarily reverted by setting the runtime guard
 *   envoy.reloadable_features.use_connection_event_drain to false." An earlier entry: the drain event "is
 *   pushed to each connection when the drain sequence starts on the main thread, rather than from polling
 *   the listener's DrainDecision on every response", and is "only delivered to the listeners covered by the
 *   drain". The emulator reads them so: when a drain sequence starts (`drain_listeners`, graceful or, from
 *   1.40, not), each open connection of the HTTP connection managers it covers (an inbound-only drain: only
 *   INBOUND listeners) is drained at once if idle (HTTP/1.1 with no request in flight or nothing received:
 *   closed; HTTP/2 with no stream: the shutdown-notice GOAWAY, then closed at the drain timeout or once the
 *   client is done), and otherwise at a random point of the last third of `--drain-time-s` (an upgraded
 *   WebSocket: closed, no close frame; HTTP/2 with streams: GOAWAY, the drain timeout's final GOAWAY, closed
 *   once its streams end; HTTP/1.1 busy: `Connection: close` on its response if not yet sent, else closed
 *   once idle after `drain_timeout`); each counted once in `downstream_cx_drain_close`. Nothing proactive
 *   when the drain time is not longer than the HCM `drain_timeout` (`httpDrainTimeoutMs`, the emulator's
 *   reading of "too short to leave room"). TCP proxy connections get nothing (no connection manager;
 *   tcp_proxy's own opt-in drain check is not modelled), nor does anything without a drain sequence
 *   (`/healthcheck/fail` alone). The emulator's choices where the wording says nothing: `--drain-strategy`
 *   does not change the timing; the per-response decision is kept as in the releases; connections accepted
 *   after the drain starts get only that; the uniform draw in the last third. See drain-manager.ts.
 * - `/quitquitquit` and SIGTERM (source/server/admin/server_cmd_handler.cc handlerQuitQuitQuit,
 *   source/server/server.cc InstanceImpl::shutdown): no drain; the admin answer `OK\n` goes out, the
 *   dispatcher exits and terminate() stops the workers, cutting every connection; the process exits 0.
 * - Admin on a Unix socket (an Envoy `pipe` address): SocketImpl::bind (source/common/network/socket_impl.cc)
 *   unlinks a file already at the path, binds, then chmods to `pipe.mode` (Contour: 0644); "@name" is an
 *   abstract socket. Its stats keep the `listener.admin.` / `http.admin.` names (admin.cc).
 * - Listener stat names (`listenerStatName`): `listener.<address:port>` with ':' turned into '_'
 *   (ListenerImpl scope + Stats::Utility::sanitizeStatsName), so IPv6 "[::1]:10000" is `[__1]_10000`.
 * - Arrival counters. Every accepted connection counts in `listener.<L>.downstream_cx_total` (and, on an HTTP
 *   listener, the manager's `http.<prefix>.downstream_cx_total`: the manager is a network filter created at
 *   accept), bytes or not, so a load balancer's TCP health check (connect, close) moves only those. Every
 *   request counts in `http.<prefix>.downstream_rq_total` when its stream starts. Every response is charged
 *   when its headers are encoded (ConnectionManagerImpl::ActiveStream::chargeStats, conn_manager_impl.cc) in
 *   `downstream_rq_completed` and `downstream_rq_<1-5>xx`, both `http.<prefix>.` and per listener
 *   `listener.<L>.http.<prefix>.` (http_conn_man/stats.rst "Per listener statistics"), local replies
 *   included (a 403 upgrade refusal, the router's 503, the `envoy-admin` listener's 404; a WebSocket's 101 is
 *   a 1xx), for the HTTP listener, the `envoy-admin` listener and the admin listener (`listener.admin.http.
 *   admin.`, admin.h AdminListener). A request answered by the health-check filter is NOT charged:
 *   chargeStats returns early when StreamInfo::healthCheck() is set (from the author's memory of the source,
 *   not checked against a copy here; see `chargeStats` in stats.ts).
 * - Envoy's HTTP health-check filter (`healthCheckPath`, non pass-through; health_check_filter.rst,
 *   source/extensions/filters/http/health_check/health_check.cc): that exact `:path` answered by the filter,
 *   200 live, 503 once health checks are failed, never routed; `x-envoy-immediate-health-check-fail: true` on
 *   every response of the listener while failed; `http.<prefix>.health_check.{request_total,ok,failed}` from
 *   HEALTH_CHECK_FILTER_STATS_SINCE (1.33, whose docs list them; see there). See health-check-filter.ts.
 * - Prometheus names (`/stats/prometheus`): Envoy's default tag extractors for the stats here (well_known_names.cc:
 *   prefixes, listener address, worker id, response code class); see `prometheusSeries` in stats.ts.
 * - Contour's `envoy-admin` listener (`readonlyAdminPort`): an HTTP connection manager (stat prefix
 *   `envoy-admin`) bound to 127.0.0.1 (`host` here), named `listener.127.0.0.1_<port>` after its real
 *   address; exact-path GET routes to the admin API, 404 with no body otherwise, so no mutation passes it.
 *   It drain-closes (drain_type DEFAULT) and stopListeners stops it, like any listener.
 * - `/server_info` (ServerInfoHandler::handlerServerInfo): `version` is VersionInfo::version()
 *   (source/common/version/version.cc) "<revision>/<X.Y.Z>/Clean/RELEASE/BoringSSL" with a fixed fake
 *   revision; uptimes are whole seconds of system time since
 *   this instance started, `hot_restart_version` is HotRestartImpl::version() ("11.104" on x86-64 Linux)
 *   or "disabled", and `command_line_options` reflects the options (`--drain-strategy`, `--drain-time-s`…).
 *
 * Differences from Envoy, on purpose: the listeners bind `host` (loopback in tests) but are named with
 * `statAddress` (0.0.0.0 by default, as in a pod); `drainTimeMs` may be below a second (Envoy's is whole
 * seconds; the gradual formula uses its whole seconds, the drain period its exact length); `filter` is a
 * JavaScript regex, not RE2; the server is initialized from the start (no PRE_INITIALIZING/INITIALIZING).
 * The codec sniffing waits while the bytes so far are a prefix of the HTTP/2 magic (Envoy decides on its
 * first read). Node's HTTP/2 session may repeat the final GOAWAY (same last-stream-id) when the connection
 * closes. An HTTP/2 client that has sent GOAWAY and has no stream left is closed by the emulator (Go and gRPC
 * clients close such a connection themselves; Node's waits for the server). `drain_timeout` is modelled for
 * HTTP/2 (and for main's proactive drain of a busy HTTP/1.1 connection) only: on HTTP/1.1 the
 * `Connection: close` response closes the connection itself.
 *
 * Start it in-process with `EnvoyEmulator.start(options)`, or as a child process with
 * `node --import tsx src/emulator/cli.ts` (see that file).
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
