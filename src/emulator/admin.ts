/**
 * Envoy's admin API (source/server/admin/): the endpoints the shutdown manager and its peers rely on, with the output
 * formats of Envoy's documentation (see test/fixtures/envoy/), and switchable faults; on a TCP port, or only on a
 * Unix socket, as Contour's bootstrap puts it. Mutations are POST only; `/drain_listeners` follows the release
 * (`drainListeners`); the emulator's own control paths `/emulator/*` serve a child process.
 *
 * Each endpoint and the Envoy source it follows: docs/emulator.md#the-admin-api.
 */
import http from 'node:http';
import type net from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { afterResponse, closeServer, listenOn, listenOnPipe, stopAccepting, type EmulatorCore } from './core.js';
import { chargeStats, counter, CounterResets, gauge, ListenerStats, renderJson, renderPrometheus, renderText, ResponseCounters, type StatValue } from './stats.js';
import type { AdminFault, AdminRequestRecord, DrainScope, ExitReason } from './types.js';
import { atLeast } from './versions.js';

const MUTATING_PATHS = new Set(['/healthcheck/fail', '/healthcheck/ok', '/drain_listeners', '/quitquitquit', '/reset_counters']);
const GARBAGE_BODY = '<!DOCTYPE html><html><head><title>502</title></head><body>upstream connect error</body></html>\n';
/**
 * HotRestartImpl::version() (source/server/hot_restart_impl.cc): "<HOT_RESTART_VERSION>.<sizeof(SharedMemory)>",
 * HOT_RESTART_VERSION 11 and 104 bytes on x86-64 glibc (two u64, two 40-byte pthread mutexes, one atomic u64).
 */
const HOT_RESTART_VERSION = '11.104';
/** A stand-in for the 40-hex git revision Envoy's build stamps into its version (source/common/version/version.cc). */
const FAKE_REVISION = 'e1b0a6c5d4f3e2d1c0b9a8f7e6d5c4b3a2f1e0d9';
const DEFAULT_PARENT_SHUTDOWN_TIME_S = 900;
/** What the admin API asks of the rest of the emulator. */
export interface AdminHost {
  /** Every counter and gauge, sorted by name, as /stats lists them. */
  statValues(): StatValue[];
  /** Histograms with no recorded values: present in unfiltered output, never used. */
  histogramNames(): string[];
  /** ListenerManagerImpl::stopListeners for the listeners of `scope`. */
  stopListeners(scope: Exclude<DrainScope, 'none'>): void;
  /** InstanceImpl::shutdown: every listener and connection closed, the process exits. */
  shutdown(reason: ExitReason): Promise<void>;
  /** A hot restart (hot-restart.ts): the child's process id and ports once it serves. */
  hotRestart(): Promise<{ readonly pid: number; readonly ports: Readonly<Record<'admin' | 'http' | 'tcp', number>> }>;
}

export class AdminApi {
  private fault: AdminFault;
  private faultPaths: readonly string[];
  private server: http.Server | undefined;
  private readonly sockets = new Set<net.Socket>();
  /** The admin listener is served by Envoy's main thread: its per-thread copy is `main_thread`. */
  readonly listener = new ListenerStats('admin', 1);
  private requestCount = 0;
  private readonly responses = new ResponseCounters();
  private portNumber = 0;
  /** POST /reset_counters: what /stats takes off each counter (see CounterResets). */
  private readonly counterResets = new CounterResets();

  constructor(
    private readonly core: EmulatorCore,
    private readonly host: AdminHost,
    /** Every admin request received, as the emulator's `adminRequests` shows them. */
    private readonly requests: AdminRequestRecord[],
  ) {
    this.fault = core.options.fault;
    this.faultPaths = core.options.faultPaths;
  }

  /** The TCP port, 0 when the admin API is on a Unix socket. */
  get port(): number {
    return this.portNumber;
  }

  /** Whether the current fault is `down` (the listener closed). */
  get down(): boolean {
    return this.fault.kind === 'down';
  }

  /** The admin listener's and its connection manager's stats (`listener.admin.*`, `http.admin.*`). */
  statValues(): StatValue[] {
    const admin = this.listener;
    return [
      gauge('http.admin.downstream_cx_active', admin.active, admin.total > 0),
      counter('http.admin.downstream_cx_total', admin.total),
      counter('http.admin.downstream_rq_total', this.requestCount),
      ...this.responses.stats('http.admin'),
      gauge('listener.admin.downstream_cx_active', admin.active, admin.total > 0),
      // Envoy's listener stats (docs/root/configuration/listeners/stats.rst: downstream_cx_total, Counter,
      // "Total connections"), in the admin listener's scope `listener.admin.` (source/server/admin/admin.cc,
      // AdminImpl::startHttpListener): +1 per accepted admin connection, from 0 in each process, never reset
      // by a fault here (a `down` fault is the admin port closing, not a new process).
      counter('listener.admin.downstream_cx_total', admin.total),
      gauge('listener.admin.main_thread.downstream_cx_active', admin.active, admin.total > 0),
      counter('listener.admin.main_thread.downstream_cx_total', admin.total),
      // AdminImpl's listener has the per-listener HTTP stats too: AdminListener's ConnectionManagerListenerStats
      // are generated with prefix "http.admin." in the `listener.admin.` scope (source/server/admin/admin.h).
      ...this.responses.stats('listener.admin.http.admin'),
    ];
  }

  /** Changes the admin fault; `down` closes the admin listener, leaving `down` reopens it on the same port. */
  async setFault(fault: AdminFault, paths: readonly string[] = []): Promise<void> {
    if (this.core.closed) return;
    const wasDown = this.fault.kind === 'down';
    this.fault = fault;
    this.faultPaths = paths;
    if (fault.kind === 'down' && !wasDown) await this.close();
    if (fault.kind !== 'down' && wasDown) await this.listen();
  }

  /** Opens the admin listener: on the Unix socket if there is one, else on the TCP port (the same one again after a `down` fault). */
  async listen(): Promise<void> {
    const server = this.createServer();
    const { adminSocketPath: socketPath, adminSocketMode, adminPort, host } = this.core.options;
    if (socketPath !== undefined) {
      await listenOnPipe(server, socketPath, adminSocketMode);
    } else {
      await listenOn(server, this.portNumber === 0 ? adminPort : this.portNumber, host);
      this.portNumber = (server.address() as AddressInfo).port;
    }
    this.server = server;
  }

  /**
   * The admin listener's HTTP server. Its stats are `listener.admin.*` and `http.admin.*` whatever its
   * address, a Unix socket included: AdminImpl names its listener's scope "listener.admin." and its
   * connection manager's "http.admin." (source/server/admin/admin.cc).
   */
  private createServer(): http.Server {
    const server = http.createServer((request, response) => {
      request.resume();
      request.on('end', () => void this.handle(request, response));
    });
    server.on('connection', (socket: net.Socket) => {
      const release = this.listener.accept();
      this.sockets.add(socket);
      socket.once('close', () => {
        release();
        this.sockets.delete(socket);
      });
    });
    return server;
  }

  /**
   * InstanceImpl::shutdownAdmin in a hot restart parent: the admin listen socket closed, nothing else; the
   * connections it accepted stay open (and answered) until the process exits.
   */
  async stopAccepting(): Promise<void> {
    const server = this.server;
    if (server === undefined || !server.listening) return;
    stopAccepting(server);
    // The listen socket's descriptor is closed by the event loop's next close phase: after that the address is free.
    await sleep(10);
  }

  async close(): Promise<void> {
    const server = this.server;
    if (server === undefined) return;
    this.server = undefined;
    for (const socket of this.sockets) socket.destroy();
    server.closeAllConnections();
    await closeServer(server);
  }

  private async handle(request: http.IncomingMessage, response: http.ServerResponse): Promise<void> {
    this.requestCount += 1;
    const url = new URL(request.url ?? '/', 'http://admin');
    const method = request.method ?? 'GET';
    const record = (status: number): void => {
      this.requests.push({ method, path: url.pathname, query: url.search.slice(1), status, at: Date.now() });
    };
    const send = (status: number, contentType: string, body: string): void => {
      record(status);
      if (response.destroyed) return;
      chargeStats(this.responses, status, false);
      response.writeHead(status, { 'content-type': contentType, server: 'envoy', 'cache-control': 'no-cache, max-age=0' });
      response.end(body);
    };

    if (url.pathname.startsWith('/emulator/')) {
      this.handleEmulatorControl(method, url, send);
      return;
    }
    const fault = this.faultFor(url.pathname);
    if (fault.kind === 'slow') {
      // Cut short by close(), so that a closed emulator holds no timer.
      await sleep(fault.delayMs, undefined, { signal: this.core.closing.signal }).catch(() => undefined);
      if (this.core.closed) return;
    }
    if (fault.kind === 'status') return send(fault.status, 'text/plain', `emulated admin failure (HTTP ${fault.status})\n`);
    if (fault.kind === 'garbage') return send(200, 'text/html', GARBAGE_BODY);
    if (fault.kind === 'empty') return send(200, 'application/json', '');

    if (MUTATING_PATHS.has(url.pathname) && method !== 'POST') {
      return send(this.core.options.mutationOnGetStatus, 'text/plain', `Method ${method} not allowed, POST required.`);
    }
    const params = url.searchParams;
    switch (url.pathname) {
      case '/ready':
        return send(this.core.state === 'LIVE' ? 200 : 503, 'text/plain', `${this.core.state}\n`);
      case '/server_info':
        return send(200, 'application/json', this.renderServerInfo());
      case '/healthcheck/fail':
        this.core.healthCheckFailed = true;
        return send(200, 'text/plain', 'OK\n');
      case '/healthcheck/ok':
        this.core.healthCheckFailed = false;
        return send(200, 'text/plain', 'OK\n');
      case '/drain_listeners':
        return this.drainListeners(params, send);
      case '/reset_counters':
        // StatsHandler::handlerResetCounters: every counter to 0 (listener.admin.downstream_cx_total included), gauges untouched.
        this.counterResets.reset(this.host.statValues());
        return send(200, 'text/plain', 'OK\n');
      case '/stats':
        return this.serveStats(params, send);
      case '/stats/prometheus':
        return this.serveStats(new URLSearchParams([...params, ['format', 'prometheus']]), send);
      case '/quitquitquit':
        // ServerCmdHandler::handlerQuitQuitQuit: InstanceImpl::shutdown() then "OK\n"; the answer goes out
        // before the dispatcher exits and terminate() cuts the connections. No drain.
        send(200, 'text/plain', 'OK\n');
        afterResponse(response, () => void this.host.shutdown('quitquitquit'));
        return;
      default:
        return send(404, 'text/plain', `invalid path. admin commands are:\n  /ready\n  /server_info\n  /stats\n  /stats/prometheus\n  /healthcheck/fail\n  /healthcheck/ok\n  /drain_listeners\n`);
    }
  }

  private faultFor(path: string): AdminFault {
    if (this.faultPaths.length === 0 || this.faultPaths.some((prefix) => path.startsWith(prefix))) return this.fault;
    return { kind: 'none' };
  }

  /**
   * ListenersHandler::handlerDrainListeners (source/server/admin/listeners_handler.cc), by release:
   *
   * - `graceful` starts DrainManagerImpl::startDrainSequence unless a drain covering this direction runs
   *   (startDrainSequence itself only queues the completion callback then, so a repeat changes nothing);
   *   at its end the listeners stop unless `skip_exit`. Unchanged in every release modelled.
   * - Before 1.29, `skip_exit` did not exist (PR #30003 added it): it is ignored, so `graceful&skip_exit`
   *   stops the listeners at the end of the drain time.
   * - Before 1.34 the drain manager had no direction (PR #37873): `draining()` and one drain for every
   *   listener; `inboundonly` then only chooses which listeners stopListeners stops.
   * - 1.29 to 1.39: without `graceful`, the listeners stop at once and nothing drains; `skip_exit` without
   *   `graceful` is 400 "skip_exit requires graceful".
   * - 1.40 and later (PR #47042, runtime guard envoy.reloadable_features.non_graceful_drain_notifies_connections,
   *   on by default): without `graceful`, onServerDrainStart and startDrainSequence first (the connections
   *   drain-close as in a graceful drain), then stopListeners unless `skip_exit`; `skip_exit` alone is
   *   accepted (drain, keep accepting). The push notification onServerDrainStart is not modelled apart:
   *   the HTTP connection manager drain-closes on its next response either way (see envoy-emulator.ts).
   */
  private drainListeners(params: URLSearchParams, send: (status: number, type: string, body: string) => void): void {
    const drain = this.core.drain;
    const graceful = params.has('graceful');
    const skipExit = atLeast(this.core.version, 1, 29) && params.has('skip_exit');
    const nonGracefulDrains = atLeast(this.core.version, 1, 40);
    if (skipExit && !graceful && !nonGracefulDrains) return send(400, 'text/plain', 'skip_exit requires graceful\n');
    const stopScope = params.has('inboundonly') ? 'inbound-only' : 'all';
    const drainScope = atLeast(this.core.version, 1, 34) ? stopScope : 'all';
    if (graceful) {
      if (!drain.covers(drainScope)) drain.startDrainSequence(drainScope, skipExit ? undefined : () => this.host.stopListeners(stopScope));
    } else {
      if (nonGracefulDrains && !drain.covers(drainScope)) drain.startDrainSequence(drainScope, undefined);
      if (!skipExit) this.host.stopListeners(stopScope);
    }
    send(200, 'text/plain', 'OK\n');
  }

  private serveStats(params: URLSearchParams, send: (status: number, type: string, body: string) => void): void {
    let filter: RegExp | undefined;
    const pattern = params.get('filter');
    if (pattern !== null && pattern !== '') {
      try {
        filter = new RegExp(pattern);
      } catch {
        return send(400, 'text/plain', `Invalid re2 regex\n`);
      }
    }
    const usedOnly = params.has('usedonly');
    const stats = this.counterResets.apply(this.host.statValues()).filter((stat) => (!usedOnly || stat.used) && (filter === undefined || filter.test(stat.name)));
    const histograms = this.host.histogramNames().filter((name) => !usedOnly && (filter === undefined || filter.test(name)));
    const textReadouts = usedOnly || (filter !== undefined && !filter.test('control_plane.identifier')) ? [] : [['control_plane.identifier', '']];
    switch (params.get('format')) {
      case 'json':
        return send(200, 'application/json', renderJson(textReadouts, stats, histograms));
      case 'prometheus':
        return send(200, 'text/plain; charset=UTF-8', renderPrometheus(stats, histograms));
      case null:
      case 'text':
        return send(200, 'text/plain; charset=UTF-8', renderText(textReadouts, stats, histograms));
      default:
        return send(400, 'text/plain', `usage: /stats?format=(html|active-html|json|prometheus|text)\n`);
    }
  }

  /**
   * ServerInfoHandler::handlerServerInfo: an envoy.admin.v3.ServerInfo as protobuf JSON (durations as "<n>s",
   * enums by name, uint64 as strings), its fields in proto order.
   */
  private renderServerInfo(): string {
    const uptime = `${this.core.uptimeSeconds()}s`;
    const info = {
      // VersionInfo::version() (source/common/version/version.cc): revision/version/status/build type/TLS library.
      version: `${FAKE_REVISION}/${this.core.options.version}/Clean/RELEASE/BoringSSL`,
      state: this.core.state,
      uptime_current_epoch: uptime,
      uptime_all_epochs: uptime,
      hot_restart_version: this.core.commandLine.disableHotRestart === true ? 'disabled' : HOT_RESTART_VERSION,
      command_line_options: this.commandLineOptions(),
      node: { id: this.core.commandLine.serviceNode ?? '', cluster: this.core.commandLine.serviceCluster ?? '', user_agent_name: 'envoy' },
    };
    return `${JSON.stringify(info, null, 2)}\n`;
  }

  /** envoy.admin.v3.CommandLineOptions (OptionsImpl::toCommandLineOptions) for the flags modelled here. */
  private commandLineOptions(): Record<string, unknown> {
    const line = this.core.commandLine;
    return {
      base_id: String(line.baseId ?? 0),
      use_dynamic_base_id: line.useDynamicBaseId ?? false,
      concurrency: this.core.options.workers,
      config_path: line.configPath ?? '',
      config_yaml: line.configYaml ?? '',
      log_level: line.logLevel ?? 'info',
      component_log_level: line.componentLogLevel ?? '',
      log_format: line.logFormat ?? '[%Y-%m-%d %T.%e][%t][%l][%n] [%g:%#] %v',
      log_path: line.logPath ?? '',
      service_cluster: line.serviceCluster ?? '',
      service_node: line.serviceNode ?? '',
      service_zone: line.serviceZone ?? '',
      drain_time: `${Math.floor(this.core.options.drainTimeMs / 1000)}s`,
      drain_strategy: this.core.options.drainStrategy === 'immediate' ? 'Immediate' : 'Gradual',
      parent_shutdown_time: `${line.parentShutdownTimeS ?? DEFAULT_PARENT_SHUTDOWN_TIME_S}s`,
      mode: line.mode ?? 'Serve',
      disable_hot_restart: line.disableHotRestart ?? false,
      restart_epoch: 0,
    };
  }

  /** Test control over HTTP, for an emulator running as a child process. */
  private handleEmulatorControl(method: string, url: URL, send: (status: number, type: string, body: string) => void): void {
    if (url.pathname === '/emulator/requests' && method === 'GET') {
      return send(200, 'application/json', JSON.stringify(this.requests));
    }
    if (url.pathname === '/emulator/fault' && method === 'POST') {
      const fault = parseFault(url.searchParams.get('fault') ?? 'none');
      if (fault === undefined) return send(400, 'text/plain', 'fault must be none, slow:<ms>, status:<code>, garbage, empty or down\n');
      if (this.core.closed) return send(503, 'text/plain', 'closed\n');
      const paths = (url.searchParams.get('paths') ?? '').split(',').filter((path) => path !== '');
      // `for_ms` lifts the fault after a while: the only way back from `down` for a child process.
      const forMs = Number(url.searchParams.get('for_ms') ?? NaN);
      if (Number.isInteger(forMs) && forMs > 0) {
        setTimeout(() => void this.setFault({ kind: 'none' }), forMs).unref();
      }
      if (fault.kind === 'down') {
        // Answer before closing the listener this very request came in on.
        send(200, 'text/plain', 'OK\n');
        setImmediate(() => void this.setFault(fault, paths));
      } else {
        void this.setFault(fault, paths).then(() => send(200, 'text/plain', 'OK\n'));
      }
      return;
    }
    if (url.pathname === '/emulator/hot-restart' && method === 'POST') {
      // Answered on this connection, which the parent keeps after its admin listen socket closed.
      this.host.hotRestart().then(
        (child) => send(200, 'application/json', JSON.stringify(child)),
        (error: unknown) => send(500, 'text/plain', `${error instanceof Error ? error.message : String(error)}\n`),
      );
      return;
    }
    send(404, 'text/plain', 'emulator control: GET /emulator/requests, POST /emulator/fault?fault=…&paths=…&for_ms=…, POST /emulator/hot-restart\n');
  }
}

/** Reads `none`, `slow:<ms>`, `status:<code>`, `garbage`, `empty`, `down`. */
export function parseFault(text: string): AdminFault | undefined {
  const [kind, argument] = text.split(':', 2);
  const number = Number(argument);
  switch (kind) {
    case 'none':
    case 'garbage':
    case 'empty':
    case 'down':
      return argument === undefined ? { kind } : undefined;
    case 'slow':
      return Number.isInteger(number) && number >= 0 ? { kind, delayMs: number } : undefined;
    case 'status':
      return Number.isInteger(number) && number >= 100 && number <= 599 ? { kind, status: number } : undefined;
    default:
      return undefined;
  }
}
