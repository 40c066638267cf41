/**
 * What every part of the emulator shares: the resolved options and release, the server's health-check
 * state (InstanceImpl::failHealthcheck, source/server/server.cc; Utility::serverState, source/server/utils.cc),
 * its open data connections and timers (all cut at exit, as InstanceImpl::shutdown and terminate() cut
 * them), the HTTP connection managers' connections (ConnectionManagerImpl per connection,
 * source/common/http/conn_manager_impl.cc), the drain manager, and the socket helpers that bind as Envoy
 * binds (source/common/network/socket_impl.cc) and stop as ListenerManagerImpl::stopListeners stops.
 */
import { chmod, unlink } from 'node:fs/promises';
import http from 'node:http';
import net from 'node:net';
import { cryptoRandom, DrainManager, type ConnectionManager, type HcmConnection } from './drain-manager.js';
import type { ListenerStats } from './stats.js';
import type { EnvoyCommandLine, EnvoyEmulatorOptions, RandomSource, ServerState } from './types.js';
import { DEFAULT_VERSION, parseEnvoyVersion, type EnvoyVersion } from './versions.js';

const DEFAULT_DRAIN_TIME_MS = 600_000;
/** Contour's pipe.mode for the admin socket (internal/envoy/v3 unixSocketAddress: 0o644). */
const DEFAULT_ADMIN_SOCKET_MODE = 0o644;
/** Envoy's `--parent-shutdown-time-s` default: 900 s. */
const DEFAULT_PARENT_SHUTDOWN_TIME_MS = 900_000;
/** The bootstrap's `stats_flush_interval` default: 5 s. */
const DEFAULT_STATS_FLUSH_INTERVAL_MS = 5_000;

/** HttpConnectionManager `drain_timeout` default (http_connection_manager.proto: 5 s). */
const DEFAULT_HTTP_DRAIN_TIMEOUT_MS = 5_000;

export type ResolvedOptions = Required<
  Omit<
    EnvoyEmulatorOptions,
    'faultPaths' | 'extraGauges' | 'httpListener' | 'tcpListener' | 'random' | 'clock' | 'startedAt' | 'commandLine' | 'upstreamPort' | 'version' | 'adminSocketPath' | 'readonlyAdminPort' | 'httpDrainTimeoutMs' | 'healthCheckPath'
  >
> & {
  faultPaths: readonly string[];
  extraGauges: Readonly<Record<string, number>>;
  upstreamPort: number | undefined;
  version: string;
  adminSocketPath: string | undefined;
  readonlyAdminPort: number | undefined;
  httpDrainTimeoutMs: number;
  healthCheckPath: string | undefined;
};

/** The release to behave as, once the options that cannot go together or parse are checked; throws naming the option. */
function checkedVersion(options: EnvoyEmulatorOptions): EnvoyVersion {
  if (options.adminSocketPath !== undefined && options.adminPort !== undefined) {
    throw new Error('adminSocketPath and adminPort exclude each other: the admin API listens on one address');
  }
  if (options.healthCheckPath !== undefined && !options.healthCheckPath.startsWith('/')) {
    throw new Error(`healthCheckPath: ${JSON.stringify(options.healthCheckPath)} is not a path starting with "/"`);
  }
  const version = parseEnvoyVersion(options.version ?? DEFAULT_VERSION);
  if (version === undefined) throw new Error(`version: ${JSON.stringify(options.version)} is not X.Y.Z (or X.Y.Z-dev)`);
  return version;
}

/** The options with their defaults. */
function resolveOptions(options: EnvoyEmulatorOptions): ResolvedOptions {
  return {
    host: options.host ?? '127.0.0.1',
    statAddress: options.statAddress ?? '0.0.0.0',
    adminPort: options.adminPort ?? 0,
    httpPort: options.httpPort ?? 0,
    tcpPort: options.tcpPort ?? 0,
    workers: Math.max(1, options.workers ?? 2),
    httpStatPrefix: options.httpStatPrefix ?? 'ingress_http',
    tcpStatPrefix: options.tcpStatPrefix ?? 'ingress_tcp',
    fault: options.fault ?? { kind: 'none' },
    faultPaths: options.faultPaths ?? [],
    drainStrategy: options.drainStrategy ?? 'gradual',
    drainTimeMs: Math.max(0, options.drainTimeMs ?? DEFAULT_DRAIN_TIME_MS),
    mutationOnGetStatus: options.mutationOnGetStatus ?? 400,
    extraGauges: options.extraGauges ?? {},
    upstreamPort: options.upstreamPort,
    version: options.version ?? DEFAULT_VERSION,
    adminSocketPath: options.adminSocketPath,
    adminSocketMode: options.adminSocketMode ?? DEFAULT_ADMIN_SOCKET_MODE,
    readonlyAdminPort: options.readonlyAdminPort,
    httpDrainTimeoutMs: Math.max(0, options.httpDrainTimeoutMs ?? DEFAULT_HTTP_DRAIN_TIMEOUT_MS),
    healthCheckPath: options.healthCheckPath,
    restartEpoch: Math.max(0, options.restartEpoch ?? 0),
    parentShutdownTimeMs: Math.max(0, options.parentShutdownTimeMs ?? DEFAULT_PARENT_SHUTDOWN_TIME_MS),
    statsFlushIntervalMs: Math.max(1, options.statsFlushIntervalMs ?? DEFAULT_STATS_FLUSH_INTERVAL_MS),
    statsExclusion: options.statsExclusion ?? [],
  };
}

/** What the HTTP listener's codecs need from its connection manager. */
export interface CodecHost extends ConnectionManager {
  /** The filters' encodeHeaders and chargeStats, before the codec's own drain signal. */
  encodeResponseHeaders(healthCheck: boolean, status: number, headers: Record<string, string>): void;
  /** The filter chain and routes, for a request of either codec. */
  serveData(exchange: DataExchange): Promise<void>;
}

/**
 * One request on the HTTP listener, whichever codec carries it: what the routes need. `head` is where
 * ConnectionManagerImpl::ActiveStream::encodeHeaders asks for the drain decision, so each codec adds its
 * own drain signal there.
 */
export interface DataExchange {
  /** The request's path and query. */
  readonly url: string;
  /** StreamInfo::healthCheck(): set by the health-check filter on a request it answers itself. */
  healthCheck: boolean;
  /** Whether the stream can no longer be answered (reset, closed, or the emulator exited). */
  gone(): boolean;
  head(status: number, headers: Record<string, string>): void;
  write(text: string): void;
  end(text?: string): void;
  /** Runs `action` once the response is over, finished or reset. */
  onClose(action: () => void): void;
}

/** The state every part of the emulator shares (see the file comment). */
export class EmulatorCore {
  readonly options: ResolvedOptions;
  readonly version: EnvoyVersion;
  readonly random: RandomSource;
  readonly clock: () => number;
  readonly commandLine: EnvoyCommandLine;
  readonly startedAtMs: number;
  /** `/healthcheck/fail` taken and not undone by `/healthcheck/ok`. */
  healthCheckFailed = false;
  /** The emulator has exited or is exiting. */
  closed = false;
  /** Aborted at exit: cuts the waits of slow routes and upstream requests. */
  readonly closing = new AbortController();
  /** Every open data connection (HTTP, TCP proxy, `envoy-admin`), cut at exit. */
  readonly sockets = new Set<net.Socket>();
  /** The HTTP connection managers' open connections, by socket. */
  readonly hcmConnections = new Map<net.Socket, HcmConnection>();
  readonly drain: DrainManager;
  /** The `/stream` responses' and the HTTP drain timers, stopped at exit. */
  private readonly dataTimers = new Set<NodeJS.Timeout>();

  /** The stats_matcher's exclusion list, compiled once. */
  readonly statsExcluded: readonly RegExp[];

  constructor(options: EnvoyEmulatorOptions) {
    this.options = resolveOptions(options);
    this.version = checkedVersion(options);
    this.statsExcluded = this.options.statsExclusion.map((pattern, index) => {
      try {
        return new RegExp(pattern);
      } catch (error) {
        throw new Error(`statsExclusion[${index}]: ${JSON.stringify(pattern)} is not a regular expression (${(error as Error).message})`, { cause: error });
      }
    });
    this.random = options.random ?? cryptoRandom;
    this.clock = options.clock ?? Date.now;
    this.commandLine = options.commandLine ?? {};
    this.startedAtMs = options.startedAt ?? this.clock();
    this.drain = new DrainManager(this);
  }

  /**
   * Utility::serverState once initialized (source/server/utils.cc): DRAINING if and only if health checks
   * are failed. `drain_listeners` alone leaves the server LIVE.
   */
  get state(): ServerState {
    return this.healthCheckFailed ? 'DRAINING' : 'LIVE';
  }

  /** ServerInfoHandler::handlerServerInfo: to_time_t(now) - start time, both whole seconds of system time. */
  uptimeSeconds(): number {
    return Math.max(0, Math.floor(this.clock() / 1000) - Math.floor(this.startedAtMs / 1000));
  }

  /** A timer that `clearTimers` (at exit) clears if it is still pending then. */
  startTimer(action: () => void, delayMs: number): NodeJS.Timeout {
    const timer = setTimeout(() => {
      this.dataTimers.delete(timer);
      action();
    }, delayMs);
    this.dataTimers.add(timer);
    return timer;
  }

  stopTimer(timer: NodeJS.Timeout | undefined): void {
    if (timer === undefined) return;
    clearTimeout(timer);
    this.dataTimers.delete(timer);
  }

  /** Keeps a timer (an interval) for `clearTimers`. */
  keepTimer(timer: NodeJS.Timeout): void {
    this.dataTimers.add(timer);
  }

  /** Clears every timer still pending (at exit). */
  clearTimers(): void {
    for (const timer of this.dataTimers) clearTimeout(timer);
    this.dataTimers.clear();
    this.drain.clearTimers();
  }

  /** Notes a connection of an HTTP connection manager until it closes (see HcmConnection). */
  trackHcm(socket: net.Socket, manager: ConnectionManager, codec: HcmConnection['codec'] = 'none'): void {
    this.hcmConnections.set(socket, { socket, manager, codec, inFlight: 0, closeWhenIdle: false, draining: false });
    socket.once('close', () => this.hcmConnections.delete(socket));
  }

  /** Counts a data connection on its listener until it closes; `close` cuts it at exit. */
  track(socket: net.Socket, listener: ListenerStats): void {
    const release = listener.accept();
    this.sockets.add(socket);
    socket.once('close', () => {
      release();
      this.sockets.delete(socket);
    });
  }
}

/** Runs `action` once `response` has been handed to the OS, or at once if it never will be. */
export function afterResponse(response: http.ServerResponse, action: () => void): void {
  if (response.writableFinished || response.destroyed) return action();
  let done = false;
  const once = (): void => {
    if (done) return;
    done = true;
    action();
  };
  response.once('finish', once);
  response.once('close', once);
}

export function listenOn(server: net.Server, port: number, host: string): Promise<void> {
  return new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
}

/**
 * Binds `server` on `port`, or, in a hot restart child, takes the parent's listen socket instead
 * (HotRestartingChild::duplicateParentListenSocket; see hot-restart.ts): `inherited` then gets `server`'s
 * connection handlers and is the one that listens. Returns the server that listens.
 */
export async function listenOrInherit(server: net.Server, inherited: net.Server | undefined, port: number, host: string): Promise<net.Server> {
  if (inherited === undefined) {
    await listenOn(server, port, host);
    return server;
  }
  for (const handler of server.listeners('connection')) inherited.on('connection', handler as (socket: net.Socket) => void);
  return inherited;
}

/**
 * Binds a Unix socket as Envoy binds a `pipe` address (source/common/network/socket_impl.cc
 * SocketImpl::bind): a filesystem path (not an abstract `@name`) is unlinked first, errors ignored ("it's
 * fine if the path doesn't exist, and if it exists but can't be unlinked then bind() will generate a
 * reasonable errno"), then bound, then chmod-ed to `mode` when it is not 0. libuv would fail with
 * EADDRINUSE on a leftover file instead.
 */
export async function listenOnPipe(server: net.Server, path: string, mode: number): Promise<void> {
  const abstract = path.startsWith('@');
  if (!abstract) await unlink(path).catch(() => undefined);
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(socketAddress(path), () => {
      server.off('error', reject);
      resolve();
    });
  });
  if (mode === 0 || abstract) return;
  await chmod(path, mode).catch(async (error: unknown) => {
    await closeServer(server);
    throw error;
  });
}

/** Envoy's pipe path "@name" is Linux's abstract socket "\0name" (PipeInstance, address_impl.cc); others are files. */
export function socketAddress(path: string): string {
  return path.startsWith('@') ? `\0${path.slice(1)}` : path;
}

/**
 * ListenerManagerImpl::stopListeners closes the listen socket and nothing else. http.Server#close would
 * also close idle keep-alive connections (Node 19+, httpServerPreClose), which Envoy leaves open.
 */
export function stopAccepting(server: net.Server): void {
  net.Server.prototype.close.call(server);
}

export function closeServer(server: net.Server): Promise<void> {
  return new Promise((resolve) => {
    if (!server.listening) {
      // Stopped by stopAccepting: http.Server#close still clears its connection-checking interval.
      if (server instanceof http.Server) server.close(() => undefined);
      return resolve();
    }
    server.close(() => resolve());
  });
}
