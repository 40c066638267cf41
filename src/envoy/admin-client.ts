/**
 * A small HTTP client for the few Envoy admin endpoints the sidecar needs. Every call has a timeout, and every
 * failure is one of the typed errors of admin-errors.ts, so that the caller can tell "Envoy is gone" (connection
 * refused) from "Envoy is busy or confused" (timeout, 5xx, unreadable answer). Which process answered is not its
 * business: process/witnessed-admin.ts adds that.
 *
 * Why node:http and not undici: undici compiles its WebAssembly HTTP parser on the first request, which
 * measured +15 to +20 MiB of resident memory in this sidecar (about 70 MiB in all, over the 60 MiB budget),
 * even when importing only its Client; node:http costs about 2 MiB. One request every few seconds on
 * loopback needs nothing more.
 */
import { systemClock, type Clock } from '../clock.js';
import type { ProbeSchedule } from '../config/values.js';
import { isJsonObject, jsonDepthExceeds } from '../json.js';
import { adminHostPort, adminTarget, connectTargetOf, type ConnectTarget } from './admin-address.js';
import { AdminCall, answerExcerpt } from './admin-call.js';
import { AdminResponseError, AdminStatusError, AdminTransportError } from './admin-errors.js';
import { drainListenersPath, parseEnvoyVersion, type EnvoyVersion } from './version.js';
import { countDownstreamConnections, CONNECTION_STATS_FILTER, MAX_JSON_DEPTH, parseJsonStats, type ConnectionCount } from './stats.js';

/**
 * As CommonJS loads it, not by an ESM import: importing a built-in reads every one of its exports, and on
 * Node 24 node:http's WebSocket and EventSource getters then load the bundled undici, with http2, tls and
 * zlib: 12 MiB more in every sidecar, measured (npm run bench).
 */
const http = process.getBuiltinModule('node:http');

export interface EnvoyAdminOptions {
  /** A host reached over TCP at `port`, or a Unix socket as `unix:/admin/admin.sock` (see adminAddress in src/config/values.ts). */
  readonly address: string;
  /** Unused when `address` is a Unix socket. */
  readonly port: number;
  /**
   * Upper bound of each call: connecting, the headers and the whole body. A call settles by then whatever the
   * other end does (holds the socket, trickles bytes, upgrades the connection).
   */
  readonly timeoutMs: number;
  /** Count only these listeners; empty counts every listener but admin and internal ones. */
  readonly listeners?: readonly string[];
  /** The kubelet's probes of Envoy: what their listeners' arrivals owe to them (see ConnectionCountOptions). */
  readonly probes?: readonly ProbeSchedule[];
  /** Steady pollers of traffic ports (--pollers): see arrivals.ts. */
  readonly pollers?: readonly ProbeSchedule[];
  /**
   * Add `inboundonly` to `drain_listeners`. Since Envoy 1.34 that drains only listeners configured with
   * `traffic_direction: INBOUND` (before, it only limited which listeners are stopped at the end of the
   * drain period): listeners left UNSPECIFIED, as Contour's and Envoy Gateway's are, are then not drained.
   */
  readonly inboundOnly?: boolean;
  /** For read times and the age of answers; default the system clock. */
  readonly clock?: Clock;
}

/** Envoy's server states, as `/ready` names them. */
export type EnvoyServerState = 'LIVE' | 'DRAINING' | 'PRE_INITIALIZING' | 'INITIALIZING';
const SERVER_STATES: readonly string[] = ['LIVE', 'DRAINING', 'PRE_INITIALIZING', 'INITIALIZING'];

/**
 * What `/server_info` says of the Envoy process: enough to tell one process from the next (a container
 * restart gives a fresh process with a small uptime) and whether it fails its health checks.
 */
export interface EnvoyProcessInfo {
  readonly state: EnvoyServerState;
  /**
   * `uptime_current_epoch`, whole seconds as Envoy reports them. Envoy measures it on its wall clock, so a
   * step of the node's clock moves it, below zero after a step back: an estimate, never an identity proof.
   */
  readonly uptimeSeconds: number;
  /** Envoy's release, from `version`; null when the build string names none. */
  readonly version: EnvoyVersion | null;
  /** `command_line_options.restart_epoch`: raised by each hot restart; null when not reported. */
  readonly restartEpoch: number | null;
  /**
   * When this process started, on the monotonic clock (Clock.now): read time minus uptime. Envoy floors its
   * uptime to the second, so the estimate is up to a second late: compare two estimates with that tolerance.
   */
  readonly startedAtMs: number;
  /** Clock.now() when the answer was read. */
  readonly readAtMs: number;
}


/**
 * An HTTP answer from the admin address, of any status and content: proof that something answers there,
 * even when it is not a valid Envoy answer (`hasAnswered`). Lets a message tell "refused" or "silent"
 * from "answered 500".
 */
export interface AdminAnswer {
  /** The call answered, e.g. "GET /ready". */
  readonly endpoint: string;
  readonly status: number;
  /** The body's beginning on one line (whitespace collapsed): at most 120 characters, then an ellipsis. */
  readonly excerpt: string;
  /**
   * Clock.now() (options.clock, monotonic) when the call ended: its answer read, or the call failed after the
   * status line (a body over the limit, a reset, a timeout, an upgrade).
   */
  readonly at: number;
}

/**
 * Largest body read per call; past it the call is an AdminResponseError (the socket is destroyed at once).
 * - `stats`: the filtered answer has one entry of about 100 bytes per `downstream_cx_active` gauge, the
 *   per-worker copies included: about 1 KiB per listener on 8 workers, 1.7 KiB on 16. 8 MiB holds some
 *   5,000 to 8,000 listeners: above the thousands a large ingress Envoy has, far below a memory problem.
 * - `serverInfo`: command-line options (an inline --config-yaml included) and the node's metadata: tens of
 *   KiB for Istio's, so 1 MiB.
 * - `small`: /ready and the mutations answer a word ("LIVE", "OK"); 64 KiB still holds an error page.
 */
export const ADMIN_BODY_LIMITS = { stats: 8 * 1024 * 1024, serverInfo: 1024 * 1024, small: 64 * 1024 } as const;

/** What the client tells of its sockets (process/witnessed-admin.ts keeps the ledger of them). */
export interface AdminClientHooks {
  /**
   * Called as each call's socket is created; the function it returns is called once the admin port has answered on
   * that socket (a status line).
   */
  readonly socketCreated?: () => () => void;
}

export class EnvoyAdminClient {
  // No keep-alive for the calls: a fresh connection per call makes "refused" mean "Envoy's port is closed right
  // now", and avoids reusing a socket Envoy closed as it exits. One connection every check-interval is nothing.
  private readonly agent = new http.Agent({ keepAlive: false, maxSockets: 4 });

  /** Whether Envoy's admin API has given a valid answer since this client was made (see `hasAnswered`). */
  private answered = false;

  private latestAnswer: AdminAnswer | undefined;

  /** The release /server_info last named: what drain_listeners is spelled for. */
  private knownVersion: EnvoyVersion | null = null;

  /** Calls not yet settled, so that close() ends them at once. */
  private readonly inFlight = new Set<AdminCall>();

  private readonly clock: Clock;

  /** Where each call connects: decided once, from the one address string. */
  private readonly connectTo: ConnectTarget;

  constructor(
    private readonly options: EnvoyAdminOptions,
    private readonly hooks: AdminClientHooks = {},
  ) {
    this.clock = options.clock ?? systemClock;
    this.connectTo = connectTargetOf(options.address, options.port);
  }

  /** Where each call connects (the witness connects there too). */
  get connectTarget(): ConnectTarget {
    return this.connectTo;
  }

  /** Describes the target, for logs and error messages: `http://host:port` or `unix:/path`. */
  get target(): string {
    return adminTarget(this.options.address, this.options.port);
  }

  /** `host:port` of the admin API (IPv6 hosts in brackets), or `unix:/path` for a socket. */
  get address(): string {
    return adminHostPort(this.options.address, this.options.port);
  }

  /**
   * True once any call got a valid answer from Envoy's admin API. Until then a refused connection proves
   * nothing about Envoy (a wrong admin port refuses too), so it must not be read as "Envoy has exited".
   */
  get hasAnswered(): boolean {
    return this.answered;
  }

  /**
   * The last HTTP answer of any status, valid or not; undefined while no call has had one (refused,
   * timed out, reset). Refusals and timeouts after an answer leave it as it was: see `at` for its age.
   */
  get lastAnswer(): AdminAnswer | undefined {
    return this.latestAnswer;
  }

  /**
   * `GET /ready`: Envoy's server state. 200 means LIVE; 503 with a state name is Envoy answering while it
   * starts or drains, which still proves that this is its admin port.
   */
  async serverState(signal?: AbortSignal): Promise<EnvoyServerState> {
    const endpoint = 'GET /ready';
    let body: string;
    try {
      body = await this.call('GET', '/ready', signal, ADMIN_BODY_LIMITS.small);
    } catch (error) {
      if (!(error instanceof AdminStatusError && error.status === 503 && SERVER_STATES.includes(error.body.trim()))) throw error;
      body = error.body;
    }
    const state = body.trim();
    if (!SERVER_STATES.includes(state)) {
      throw new AdminResponseError(endpoint, `answered ${JSON.stringify(body.slice(0, 120))}, not one of Envoy's server states`);
    }
    this.answered = true;
    return state as EnvoyServerState;
  }

  /**
   * `GET /server_info`: the process's state and uptime. Uptimes are protobuf JSON durations (`"12s"`,
   * `"0.500s"`); anything else is an AdminResponseError.
   */
  async serverInfo(signal?: AbortSignal): Promise<EnvoyProcessInfo> {
    const endpoint = 'GET /server_info';
    const body = await this.call('GET', '/server_info', signal, ADMIN_BODY_LIMITS.serverInfo);
    const readAtMs = this.clock.now();
    if (jsonDepthExceeds(body, MAX_JSON_DEPTH)) {
      throw new AdminResponseError(endpoint, `answered JSON nested deeper than ${MAX_JSON_DEPTH} levels, which Envoy's /server_info never is`);
    }
    let document: unknown;
    try {
      document = JSON.parse(body);
    } catch {
      throw new AdminResponseError(endpoint, `answered ${JSON.stringify(body.slice(0, 120))}, not JSON`);
    }
    const state = isJsonObject(document) ? document['state'] : undefined;
    const uptime = isJsonObject(document) ? document['uptime_current_epoch'] : undefined;
    const seconds = typeof uptime === 'string' ? parseProtobufSeconds(uptime) : undefined;
    if (typeof state !== 'string' || !SERVER_STATES.includes(state) || seconds === undefined) {
      throw new AdminResponseError(endpoint, `answered without a known "state" and an "uptime_current_epoch": ${JSON.stringify(body.slice(0, 120))}`);
    }
    this.answered = true;
    const options = isJsonObject(document) ? document['command_line_options'] : undefined;
    const epoch = isJsonObject(options) ? options['restart_epoch'] : undefined;
    const restartEpoch = typeof epoch === 'number' && Number.isSafeInteger(epoch) && epoch >= 0 ? epoch : null;
    const version = parseEnvoyVersion(isJsonObject(document) ? document['version'] : undefined);
    if (version !== null) this.knownVersion = version;
    return { state: state as EnvoyServerState, uptimeSeconds: seconds, version, restartEpoch, startedAtMs: readAtMs - seconds * 1000, readAtMs };
  }

  /** `POST /healthcheck/ok`: undoes /healthcheck/fail (the only part of a drain that can be undone). */
  async passHealthChecks(signal?: AbortSignal): Promise<void> {
    await this.mutate('/healthcheck/ok', signal);
  }

  /** `POST /quitquitquit`: Envoy exits; in a pod, the kubelet then starts a fresh Envoy container. */
  async quit(signal?: AbortSignal): Promise<void> {
    await this.mutate('/quitquitquit', signal);
  }

  /** `POST /healthcheck/fail`: Envoy fails health checks and closes HTTP/1.1 connections after their responses. */
  async failHealthChecks(signal?: AbortSignal): Promise<void> {
    await this.mutate('/healthcheck/fail', signal);
  }

  /**
   * `POST /drain_listeners?graceful&skip_exit`: Envoy drain-closes the connections of every listener
   * (`Connection: close`, GOAWAY) and keeps accepting new ones; before Envoy 1.29, `graceful` alone (see
   * src/envoy/version.ts for what each spelling means in which release). With `inboundOnly`, only listeners
   * with `traffic_direction: INBOUND` (see EnvoyAdminOptions).
   */
  async drainListeners(signal?: AbortSignal): Promise<void> {
    await this.mutate(drainListenersPath(this.knownVersion, this.options.inboundOnly === true), signal);
  }

  /** Envoy's release, as /server_info last named it; null until it has. */
  get version(): EnvoyVersion | null {
    return this.knownVersion;
  }

  /**
   * Reads the listeners' `downstream_cx_active` gauges and counts the open downstream connections. The
   * answer must be the JSON asked for: anything else (an empty body, text, HTML) is an AdminResponseError,
   * never "0 connections".
   */
  async countOpenConnections(signal?: AbortSignal): Promise<ConnectionCount> {
    // Not `usedonly`: that leaves out a listener that never had a connection, which would pass for a typo.
    const path = `/stats?format=json&filter=${encodeURIComponent(CONNECTION_STATS_FILTER)}`;
    const body = await this.call('GET', path, signal, ADMIN_BODY_LIMITS.stats);
    let count: ConnectionCount;
    try {
      count = countDownstreamConnections(parseJsonStats(body), { listeners: this.options.listeners ?? [], probes: this.options.probes ?? [], pollers: this.options.pollers ?? [] });
    } catch (error) {
      throw new AdminResponseError(`GET ${path}`, (error as Error).message, { cause: error });
    }
    this.answered = true;
    return count;
  }

  /** Fails the calls in flight (AdminTransportError "client closed") and releases their sockets. */
  close(): void {
    for (const call of this.inFlight) call.cancel('the admin client was closed');
    this.agent.destroy();
  }

  /**
   * Envoy answers its mutations with "OK". A 200 with another body comes from something else on this port
   * (a data listener's catch-all route when --admin-port is wrong): the step did not happen.
   */
  private async mutate(path: string, signal: AbortSignal | undefined): Promise<void> {
    const body = await this.call('POST', path, signal, ADMIN_BODY_LIMITS.small);
    if (body.trim() !== 'OK') {
      throw new AdminResponseError(`POST ${path}`, `answered 200 with ${JSON.stringify(body.slice(0, 120))}, not Envoy's "OK": is this Envoy's admin port?`);
    }
    this.answered = true;
  }

  /** Resolves with the body of a 200 answer; notes any answer that had a status line (see lastAnswer). */
  private async call(method: 'GET' | 'POST', path: string, signal: AbortSignal | undefined, maxBodyBytes: number): Promise<string> {
    const endpoint = `${method} ${path}`;
    if (signal?.aborted === true) throw new AdminTransportError(endpoint, 'cancelled by the caller before it started');
    const call = new AdminCall(endpoint, {
      connectTo: this.connectTo,
      method,
      path,
      agent: this.agent,
      target: this.target,
      timeoutMs: this.options.timeoutMs,
      maxBodyBytes,
      signal,
      onAnswer: (status, body) => this.noteAnswer(endpoint, status, body),
      onSocket: this.hooks.socketCreated ?? noSocketNote,
    });
    this.inFlight.add(call);
    try {
      const { status, body } = await call.settled;
      if (status !== 200) throw new AdminStatusError(endpoint, status, body);
      return body;
    } finally {
      this.inFlight.delete(call);
    }
  }

  private noteAnswer(endpoint: string, status: number, body: string): void {
    this.latestAnswer = { endpoint, status, excerpt: answerExcerpt(body), at: this.clock.now() };
  }
}


function noSocketNote(): () => void {
  return () => undefined;
}

/**
 * `"12s"`, `"0.500s"`, `"-3580s"` (protobuf JSON Duration) → whole seconds, truncated toward zero; undefined
 * for anything else. Negative: Envoy's wall clock stepped back past its start.
 */
function parseProtobufSeconds(text: string): number | undefined {
  const match = /^(-?)(\d{1,12})(?:\.\d{1,9})?s$/.exec(text);
  if (match === null) return undefined;
  const seconds = Number(match[2]);
  return match[1] === '-' && seconds !== 0 ? -seconds : seconds;
}
