/**
 * The emulator's public types: its options, faults and the records it keeps, in Envoy's terms (a listener's
 * `traffic_direction` and `drain_type`, `--drain-strategy`, the command line shown in /server_info). Exported
 * again by envoy-emulator.ts, which other code imports them from.
 */
export type AdminFault =
  | { readonly kind: 'none' }
  /** Every admin answer waits this long first (an overloaded Envoy). */
  | { readonly kind: 'slow'; readonly delayMs: number }
  /** Every admin answer is this status with a short text body (500, 503…). */
  | { readonly kind: 'status'; readonly status: number }
  /** Every admin answer is 200 with an HTML page instead of the endpoint's output. */
  | { readonly kind: 'garbage' }
  /** Every admin answer is 200 with an empty body (a broken proxy, a truncated answer). */
  | { readonly kind: 'empty' }
  /** The admin listener is closed: connections are refused, as when Envoy has exited. */
  | { readonly kind: 'down' };

/** A listener's `traffic_direction`; Contour and Envoy Gateway leave it UNSPECIFIED, Istio sets it. */
export type TrafficDirection = 'inbound' | 'outbound' | 'unspecified';

/** A listener's `drain_type`: MODIFY_ONLY listeners ignore /healthcheck/fail and drain only when a drain covers them. */
export type DrainType = 'default' | 'modify_only';

export interface ListenerSpec {
  readonly direction?: TrafficDirection;
  readonly drainType?: DrainType;
}

/** What `drain_listeners` has started: nothing, a drain of INBOUND listeners, or of every listener. */
export type DrainScope = 'none' | 'inbound-only' | 'all';

/** Envoy's `--drain-strategy` (source/server/options_impl.cc): how drainClose() answers while a drain runs. */
export type DrainStrategy = 'gradual' | 'immediate';

/** Stands in for Envoy's `Random::RandomGenerator::random()`: a non-negative integer (a uint64 in Envoy). */
export type RandomSource = () => number;

/** How the emulator stopped: `POST /quitquitquit`, or `close()` (what Envoy does on SIGTERM). */
export type ExitReason = 'quitquitquit' | 'close';

/**
 * Envoy command-line flags shown in `/server_info` `command_line_options` (the CLI fills these from the
 * container's args); they change nothing else.
 */
export interface EnvoyCommandLine {
  readonly configPath?: string;
  readonly configYaml?: string;
  readonly logLevel?: string;
  readonly componentLogLevel?: string;
  readonly logFormat?: string;
  readonly logPath?: string;
  readonly serviceCluster?: string;
  readonly serviceNode?: string;
  readonly serviceZone?: string;
  readonly baseId?: number;
  readonly useDynamicBaseId?: boolean;
  readonly parentShutdownTimeS?: number;
  readonly mode?: string;
  /** `--disable-hot-restart`: `hot_restart_version` is then "disabled" (HotRestartNopImpl::version). */
  readonly disableHotRestart?: boolean;
}

export interface EnvoyEmulatorOptions {
  /** Address to bind every listener to; default 127.0.0.1. */
  readonly host?: string;
  /** Address used in listener stat names (`listener.<statAddress>_<port>.…`); default 0.0.0.0. */
  readonly statAddress?: string;
  readonly adminPort?: number;
  readonly httpPort?: number;
  readonly tcpPort?: number;
  /** Envoy's --concurrency: how many `worker_<n>` copies each listener stat has; default 2. */
  readonly workers?: number;
  readonly httpStatPrefix?: string;
  readonly tcpStatPrefix?: string;
  /** The HTTP listener's direction and drain type; default UNSPECIFIED and DEFAULT, as an ingress Envoy's. */
  readonly httpListener?: ListenerSpec;
  /** The TCP proxy listener's; same defaults. */
  readonly tcpListener?: ListenerSpec;
  readonly fault?: AdminFault;
  /** Apply the fault only to admin paths starting with one of these (e.g. ['/stats']); default all. */
  readonly faultPaths?: readonly string[];
  /** Envoy's --drain-strategy; default `gradual`, as Envoy's. */
  readonly drainStrategy?: DrainStrategy;
  /**
   * Envoy's --drain-time-s, in ms; default 600 s. The drain period (listeners stop accepting at its end)
   * lasts exactly this long; the gradual formula uses its whole seconds, as Envoy does.
   */
  readonly drainTimeMs?: number;
  /** Envoy's random generator, for the gradual drain decision; default a cryptographic one. See `seededRandom`. */
  readonly random?: RandomSource;
  /**
   * Milliseconds since the epoch, for drain decisions and uptimes (Envoy uses its monotonic clock for the
   * former, system time for the latter); default Date.now. The drain period's timer runs on real time.
   */
  readonly clock?: () => number;
  /** When this instance "started", for /server_info uptimes (ms since the epoch); default its construction. */
  readonly startedAt?: number;
  /** Flags to show in /server_info `command_line_options`. */
  readonly commandLine?: EnvoyCommandLine;
  /**
   * Status of a GET on a mutating endpoint. Envoy's documentation says 400 (the default here); the
   * source of recent versions answers 405 "Method GET not allowed, POST required.".
   */
  readonly mutationOnGetStatus?: 400 | 405;
  /** More gauges to report as they are (e.g. an internal listener's); counted as used. */
  readonly extraGauges?: Readonly<Record<string, number>>;
  /**
   * Route the HTTP listener's requests to this port on the listener's host (a cluster of one local
   * endpoint, as a sidecar Envoy's inbound route to its application) instead of answering them itself.
   */
  readonly upstreamPort?: number;
  /**
   * The Envoy release to behave as, "X.Y.Z", or "X.Y.Z-dev" for a build of Envoy's main branch (see
   * ENVOY_MAIN_VERSION); default 1.36.2. It shows in /server_info `version` and decides `drain_listeners`
   * (see `drainListeners` in admin.ts), the connection-level drain (drain-manager.ts) and the health-check
   * filter's stats (HEALTH_CHECK_FILTER_STATS_SINCE).
   */
  readonly version?: string;
  /**
   * Serve the admin API on this Unix socket only (no TCP admin port), as Contour's bootstrap does
   * (admin address a `pipe`). An existing file at the path is replaced. Excludes `adminPort`.
   */
  readonly adminSocketPath?: string;
  /** The socket file's mode (Envoy's `pipe.mode`); default 0o644, Contour's. */
  readonly adminSocketMode?: number;
  /**
   * Also open Contour's `envoy-admin` listener on this port (0: a free one): read-only admin routes,
   * GET only, forwarded to the admin API. See contour-admin-listener.ts.
   */
  readonly readonlyAdminPort?: number;
  /**
   * The HTTP connection manager's `drain_timeout` in ms (default 5000, Envoy's): on an HTTP/2 connection,
   * the time from the shutdown-notice GOAWAY to the final GOAWAY (see http2.ts).
   */
  readonly httpDrainTimeoutMs?: number;
  /**
   * Put Envoy's HTTP health-check filter (envoy.filters.http.health_check, pass_through_mode false) on the
   * HTTP listener, answering requests whose `:path` is exactly this (e.g. "/healthz") itself: 200 while
   * live, 503 once health checks are failed. Off by default. See health-check-filter.ts.
   */
  readonly healthCheckPath?: string;
  /** Envoy's `--restart-epoch` (`server.hot_restart_epoch`); default 0. A hot restart child gets its parent's + 1. */
  readonly restartEpoch?: number;
  /** Envoy's `--parent-shutdown-time-s`, in ms: how long after a hot restart the child terminates the parent; default 900 s. */
  readonly parentShutdownTimeMs?: number;
  /** The bootstrap's `stats_flush_interval`, in ms: how often a hot restart child merges its parent's stats; default 5 s. */
  readonly statsFlushIntervalMs?: number;
  /**
   * The bootstrap's `stats_config.stats_matcher.exclusion_list` (regular expressions, matched anywhere in the name
   * as a `safe_regex` would be, anchored as written): a matching stat is never created, so it is absent from every
   * /stats format, not 0. A hot restart child starts with the same bootstrap. Default: none.
   */
  readonly statsExclusion?: readonly string[];
}

/** Open connections of the HTTP listener by codec, as the `http.<prefix>.downstream_cx_*_active` gauges count them. */
export interface HttpConnectionCounts {
  /** Every accepted connection, whether or not its first bytes have chosen a codec yet. */
  readonly active: number;
  readonly http1: number;
  readonly http2: number;
  /** Upgraded (WebSocket) connections; also counted in `http1`. */
  readonly upgrades: number;
}

export interface AdminRequestRecord {
  readonly method: string;
  /** Path without the query string. */
  readonly path: string;
  /** The raw query string, without "?". */
  readonly query: string;
  readonly status: number;
  /** Date.now() when the request arrived. */
  readonly at: number;
}

export type ServerState = 'LIVE' | 'DRAINING';
