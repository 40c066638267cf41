/**
 * A small client for the few Envoy admin endpoints the drain needs. Every call has a timeout, and every
 * failure is one of the typed errors below, so that the caller can tell "Envoy is gone" (connection
 * refused) from "Envoy is busy or confused" (timeout, 5xx, unreadable answer).
 *
 * Why node:http and not undici: undici compiles its WebAssembly HTTP parser on the first request, which
 * measured +15 to +20 MiB of resident memory in this sidecar (about 70 MiB in all, over the 60 MiB budget),
 * even when importing only its Client; node:http costs about 2 MiB. One request every few seconds on
 * loopback needs nothing more.
 */
import { OwnedTimer, systemClock, type Clock } from '../clock.js';
import { adminSocketPath, type ProbeSchedule } from '../config/values.js';
import { isJsonObject } from '../json.js';
import { drainListenersPath, parseEnvoyVersion, type EnvoyVersion } from './version.js';
import { jsonDepthExceeds } from '../json.js';
import { countDownstreamConnections, CONNECTION_STATS_FILTER, MAX_JSON_DEPTH, parseJsonStats, type ConnectionCount } from './stats.js';
import { holderEpochOf, witnessVouches, type ClosedWitness, type HolderEpoch } from './identity.js';

/**
 * As CommonJS loads it, not by an ESM import: importing a built-in reads every one of its exports, and on
 * Node 24 node:http's WebSocket and EventSource getters then load the bundled undici, with http2, tls and
 * zlib: 12 MiB more in every sidecar, measured (npm run bench).
 */
const http = process.getBuiltinModule('node:http');
const net = process.getBuiltinModule('node:net');
const fs = process.getBuiltinModule('node:fs');

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
 * What kind of failure an admin call met, as the drain reports it: nothing listens (`refused`), something
 * took the call but gave no complete answer in time (`timeout`: it may have acted on it), something answered
 * but not as Envoy does (`invalid-answer`: a status, a body, an upgrade, a size or nesting beyond bounds),
 * or the connection failed otherwise (`transport`: a reset, a name that does not resolve).
 */
export type AdminFailureKind = 'refused' | 'timeout' | 'invalid-answer' | 'transport';

export const ADMIN_FAILURE_KINDS: readonly AdminFailureKind[] = ['refused', 'timeout', 'invalid-answer', 'transport'];

/** The kind of any failure of an admin call: an EnvoyAdminError's own; anything else failed in transport. */
export function failureKindOf(error: unknown): AdminFailureKind {
  return error instanceof EnvoyAdminError ? error.kind : 'transport';
}

/** A count of 0 for each kind of failure, to count failures into. */
export function noFailures(): Record<AdminFailureKind, number> {
  return { refused: 0, timeout: 0, 'invalid-answer': 0, transport: 0 };
}

/** Base of every admin failure; `endpoint` is what was called, e.g. "POST /healthcheck/fail". */
export abstract class EnvoyAdminError extends Error {
  override readonly name: string = 'EnvoyAdminError';
  abstract readonly kind: AdminFailureKind;

  constructor(
    readonly endpoint: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(`Envoy admin ${endpoint}: ${message}`, options);
  }
}

/**
 * What the witness connection (see EnvoyAdminClient) showed when a read was answered or a call failed: the
 * evidence src/envoy/identity.ts and the drain judge processes by, beyond the counter.
 */
export interface WitnessEvidence {
  /**
   * The witness that was open when the call was sent and still open when it ended, and whose address still
   * names the socket it connected to (a Unix socket path not replaced since); for a stats read, only if held by a
   * process of the read's restart epoch (identity.ts witnessVouches); null when none was.
   */
  readonly witness: number | null;
  /** Every witness numbered up to this one has been closed by the other end (0: none has). */
  readonly closedThrough: number;
  /** How many witnesses had been created when the call ended (they are numbered 1, 2…). */
  readonly created: number;
  /** Of a stats read: how many had been created when it was sent (0: witnesses were not kept yet). */
  readonly createdAtSend?: number;
  /** Whether the latest witness that ever connected has been closed by the other end, and none is open now. */
  readonly lastClosed: boolean;
  /**
   * Of a stats read: `server.hot_restart_epoch` in the same answer (null when absent). A higher one than an earlier
   * read's is a hot restart child, which the witness, held by its parent, says nothing of (identity.ts).
   */
  readonly restartEpoch?: number | null;
  /** The latest witnesses closed by the other end (at most CLOSED_WITNESSES_KEPT), with their holders' epochs. */
  readonly closed: readonly ClosedWitness[];
}

/** Closed witnesses kept for the evidence: one is created at most once per answered read, and older ones decide nothing new. */
const CLOSED_WITNESSES_KEPT = 16;

/** What is at a Unix socket path now (lstat): for messages, and to tell a moved socket from an exited Envoy. */
export type SocketPathState = 'socket' | 'missing' | 'file' | 'directory' | 'other';

/** Nothing listens on the admin port: Envoy has exited (or not started). */
export class AdminRefusedError extends EnvoyAdminError {
  override readonly name = 'AdminRefusedError';
  readonly kind = 'refused';
  /** The witness connection when the call was refused; undefined from a client that keeps none. */
  evidence?: WitnessEvidence;
  /** For a Unix socket: what is at the path now. */
  pathState?: SocketPathState;
}

/**
 * No complete answer within the timeout, headers or not: Envoy is overloaded or stuck, or something holds the
 * connection. Envoy may still have acted on the call (a mutation is done when its handler runs, not when the
 * answer reaches us).
 */
export class AdminTimeoutError extends EnvoyAdminError {
  override readonly name = 'AdminTimeoutError';
  readonly kind = 'timeout';
}

/** Envoy answered with a status other than 200. */
export class AdminStatusError extends EnvoyAdminError {
  override readonly name = 'AdminStatusError';
  readonly kind = 'invalid-answer';

  constructor(
    endpoint: string,
    readonly status: number,
    readonly body: string,
  ) {
    super(endpoint, `answered HTTP ${status}: ${JSON.stringify(body.slice(0, 200))}`);
  }
}

/** Envoy answered 200 with a body that is not what the endpoint returns (for stats, see StatsParseError in cause). */
export class AdminResponseError extends EnvoyAdminError {
  override readonly name = 'AdminResponseError';
  readonly kind = 'invalid-answer';
}

/** Any other transport failure (connection reset, DNS…). */
export class AdminTransportError extends EnvoyAdminError {
  override readonly name = 'AdminTransportError';
  readonly kind = 'transport';
  /** For a Unix socket path that is no socket now (a file, a directory): what is there. */
  pathState?: SocketPathState;
}

/** A connection count, with what the witness connection showed while it was read (see EnvoyAdminClient). */
export type WitnessedCount = ConnectionCount & { readonly evidence: WitnessEvidence };

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

const ANSWER_EXCERPT_LENGTH = 120;
/** An excerpt is made from this much of the body at most: enough for any indentation, never megabytes. */
const EXCERPT_SOURCE_BYTES = 8 * 1024;

/** One line, for log lines and messages: whitespace runs (Envoy's JSON is indented) become one space. */
function answerExcerpt(body: string): string {
  const line = body.slice(0, EXCERPT_SOURCE_BYTES).trim().replace(/\s+/g, ' ');
  return line.length > ANSWER_EXCERPT_LENGTH ? `${line.slice(0, ANSWER_EXCERPT_LENGTH)}…` : line;
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

export class EnvoyAdminClient {
  // No keep-alive for the calls: a fresh connection per call makes "refused" mean "Envoy's port is closed right
  // now", and avoids reusing a socket Envoy closed as it exits. One connection every check-interval is nothing.
  // The one connection kept open is the witness below, which carries no request at all.
  private readonly agent = new http.Agent({ keepAlive: false, maxSockets: 4 });

  /**
   * The witness: one connection to the admin address, opened once the address answered as Envoy does (GET /ready,
   * the start-up probe's call, or a second stats read; again after each answered read whenever the last one
   * closed) and kept open, on which no request is ever sent. Only the process that accepted it can hold it, and the kernel closes it when that
   * process exits, so while it stays open that process lives (src/envoy/identity.ts). No request, because Envoy's
   * admin connection manager uses the server's drain manager: once /healthcheck/fail is taken, every admin
   * response carries `connection: close` and ends its connection; a silent one is never answered, so never closed
   * by that (nor by an idle timeout: AdminImpl's connection manager leaves its idle_timeout_ unset, as read in
   * source/server/admin/admin.h; what a close while Envoy lives costs: see identity.ts).
   */
  private witness: Witness | undefined;
  private witnesses = 0;
  /**
   * `server.hot_restart_epoch` of the newest stats read answered (null: the answer lacked it; undefined: none yet): a
   * witness created after it connected to that process or a later one (identity.ts holderEpochOf).
   */
  private latestEpoch: number | null | undefined;
  /** The latest witnesses closed by the other end (see WitnessEvidence.closed). */
  private closedWitnesses: ClosedWitness[] = [];
  /** Every witness numbered up to this has closed (ids only grow, and one is opened only once the last closed). */
  private witnessesClosedThrough = 0;
  /** The number of the latest witness that connected, and whether it has closed since. */
  private lastConnectedWitness: { id: number; closed: boolean } | undefined;
  private closing = false;
  /** Stats reads answered so far: the witness is opened from the second on. */
  private answeredReads = 0;

  /** Whether Envoy's admin API has given a valid answer since this client was made (see `hasAnswered`). */
  private answered = false;

  private latestAnswer: AdminAnswer | undefined;

  /** The release /server_info last named: what drain_listeners is spelled for. */
  private knownVersion: EnvoyVersion | null = null;

  private readonly own = new OwnConnectionLedger();

  /** Calls not yet settled, so that close() ends them at once. */
  private readonly inFlight = new Set<AdminCall>();

  private readonly clock: Clock;

  /** Where each call connects: decided once, from the one address string. */
  private readonly connectTo: ConnectTarget;

  constructor(private readonly options: EnvoyAdminOptions) {
    this.clock = options.clock ?? systemClock;
    const socketPath = adminSocketPath(options.address);
    this.connectTo = socketPath === undefined ? { host: options.address, port: options.port } : { socketPath };
  }

  /** Describes the target, for logs and error messages: `http://host:port` or `unix:/path`. */
  get target(): string {
    return 'socketPath' in this.connectTo ? this.options.address : `http://${this.address}`;
  }

  /** `host:port` of the admin API (IPv6 hosts in brackets), or `unix:/path` for a socket. */
  get address(): string {
    if ('socketPath' in this.connectTo) return this.options.address;
    const host = this.options.address.includes(':') ? `[${this.options.address}]` : this.options.address;
    return `${host}:${this.options.port}`;
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
    // The start-up probe's answer: from now on the admin address is Envoy's, and a witness is kept.
    this.ensureWitness();
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
  async countOpenConnections(signal?: AbortSignal): Promise<WitnessedCount> {
    // Not `usedonly`: that leaves out a listener that never had a connection, which would pass for a typo.
    const path = `/stats?format=json&filter=${encodeURIComponent(CONNECTION_STATS_FILTER)}`;
    // Once witnesses are kept, no read goes out without one connected: a read sent while none is open (the last one's
    // process just exited) is tied to nothing but its counter, and a young successor's counter can pass for its own
    // (FUZZ_SEED=404). One connect to an address that answered a moment ago: a loopback round trip.
    await this.witnessConnected(signal);
    const createdAtSend = this.witnesses;
    const witnessAtSend = this.vouchingWitness();
    const body = await this.call('GET', path, signal, ADMIN_BODY_LIMITS.stats);
    const witnessAtAnswer = this.vouchingWitness();
    let count: ConnectionCount;
    try {
      count = countDownstreamConnections(parseJsonStats(body), { listeners: this.options.listeners ?? [], probes: this.options.probes ?? [], pollers: this.options.pollers ?? [] });
    } catch (error) {
      throw new AdminResponseError(`GET ${path}`, (error as Error).message, { cause: error });
    }
    const restartEpoch = count.hotRestart?.epoch ?? null;
    const held = witnessAtSend !== undefined && witnessAtSend === witnessAtAnswer ? witnessAtSend : undefined;
    const vouches = held !== undefined && witnessVouches(this.settleHolder(held, restartEpoch), restartEpoch);
    const evidence: WitnessEvidence = { ...this.witnessEvidence(), witness: vouches ? held.id : null, restartEpoch, createdAtSend };
    this.latestEpoch = restartEpoch;
    this.answered = true;
    this.answeredReads += 1;
    // A witness held by another process than the one answering (a hot restart's parent, while the child took the
    // address) proves nothing of it: let it go, and hold one that connects to the process answering now.
    if (held !== undefined && !vouches) this.renewWitness();
    // From the second answered read on (so that the start-up probe, one-off calls and a wrong address leave no
    // connection behind): the next read, and every read after, has a witness to be judged by.
    if (this.answeredReads >= 2) this.ensureWitness();
    return { ...count, evidence };
  }

  /** The epoch of the process holding `witness`, settled by the first read sent once it was open (identity.ts holderEpochOf). */
  private settleHolder(witness: Witness, readEpoch: number | null): HolderEpoch {
    witness.holder ??= holderEpochOf(witness.epochBefore, readEpoch);
    return witness.holder;
  }

  /** Fails the calls in flight (AdminTransportError "client closed") and releases their sockets, the witness's too. */
  close(): void {
    this.closing = true;
    for (const call of this.inFlight) call.cancel('the admin client was closed');
    this.agent.destroy();
    this.witness?.socket.destroy();
  }

  /** The witness connection as it is now (see WitnessEvidence); `witness`: the one open now, whatever the address. */
  witnessEvidence(): WitnessEvidence {
    const open = this.witness !== undefined && this.witness.open && !this.witness.closed ? this.witness.id : null;
    return {
      witness: open,
      closedThrough: this.witnessesClosedThrough,
      created: this.witnesses,
      lastClosed: open === null && this.lastConnectedWitness?.closed === true,
      closed: [...this.closedWitnesses],
    };
  }

  /**
   * The open witness, if the admin address still names what it connected to: always over TCP (one process binds
   * a port at a time: Envoy's admin listener sets no SO_REUSEPORT); for a Unix socket, only while the path is the
   * same socket (device and inode) as when the witness connected: a second Envoy that unlinks and rebinds the path
   * answers there while the first still holds the witness.
   */
  private vouchingWitness(): Witness | undefined {
    const witness = this.witness;
    if (witness === undefined || !witness.open || witness.closed) return undefined;
    if (!('socketPath' in this.connectTo)) return witness;
    return witness.inode !== undefined && inodeOf(this.connectTo.socketPath) === witness.inode ? witness : undefined;
  }

  /**
   * Lets go of the witness (its close is ours, not evidence of the other end) and opens another: after a hot
   * restart the old one is held by the parent process, while the child answers.
   */
  private renewWitness(): void {
    const witness = this.witness;
    if (witness !== undefined && !witness.closed) {
      witness.givenUp = true;
      witness.socket.destroy();
    }
    this.witness = undefined;
    this.ensureWitness();
  }

  /**
   * Once witnesses are kept (see `witness`), opens one if none is open and waits until it has connected, failed or
   * been given up at the call timeout, or the caller cancelled. Never throws: a read without a witness is still a read.
   */
  private async witnessConnected(signal: AbortSignal | undefined): Promise<void> {
    if (this.witness === undefined) return;
    this.ensureWitness();
    const connecting = this.witness;
    if (connecting === undefined || connecting.open || connecting.closed || signal?.aborted === true) return;
    await new Promise<void>((resolve) => {
      const done = (): void => {
        signal?.removeEventListener('abort', done);
        connecting.socket.off('connect', done).off('close', done);
        resolve();
      };
      signal?.addEventListener('abort', done, { once: true });
      connecting.socket.once('connect', done).once('close', done);
    });
  }

  /** Opens a witness unless one is open or connecting. Never throws: a witness that cannot connect is just absent. */
  private ensureWitness(): void {
    if (this.closing || (this.witness !== undefined && !this.witness.closed)) return;
    const id = ++this.witnesses;
    const target = this.connectTo;
    const socket = 'socketPath' in target ? net.connect({ path: target.socketPath }) : net.connect({ host: target.host, port: target.port, autoSelectFamily: true });
    const witness: Witness = { id, socket, open: false, closed: false, inode: undefined, givenUp: false, epochBefore: this.latestEpoch, holder: undefined };
    this.witness = witness;
    // A witness never keeps the process alive, and a connect that hangs is given up at the call timeout.
    socket.unref();
    socket.setTimeout(this.options.timeoutMs, () => {
      if (witness.open) return;
      witness.givenUp = true;
      socket.destroy();
    });
    socket.once('connect', () => {
      socket.setTimeout(0);
      witness.open = true;
      if ('socketPath' in target) witness.inode = inodeOf(target.socketPath);
      this.lastConnectedWitness = { id, closed: false };
    });
    socket.on('data', () => undefined); // Envoy sends nothing unasked; anything is dropped
    socket.on('error', () => undefined); // the close that follows says it
    socket.once('close', () => {
      witness.closed = true;
      witness.open = false;
      // Given up by us (a connect that hung) or the client closing: nothing the other end did.
      if (!witness.givenUp && !this.closing) {
        this.witnessesClosedThrough = Math.max(this.witnessesClosedThrough, id);
        this.closedWitnesses = [...this.closedWitnesses, { id, holder: witness.holder }].slice(-CLOSED_WITNESSES_KEPT);
      }
      if (this.lastConnectedWitness?.id === id && !this.closing && !witness.givenUp) this.lastConnectedWitness.closed = true;
    });
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
      onSocket: () => this.own.created(),
    });
    this.inFlight.add(call);
    try {
      const { status, body } = await call.settled;
      if (status !== 200) throw new AdminStatusError(endpoint, status, body);
      return body;
    } catch (error) {
      if (error instanceof AdminRefusedError) error.evidence = this.witnessEvidence();
      throw error;
    } finally {
      this.inFlight.delete(call);
    }
  }

  /** See OwnConnections (src/envoy/identity.ts). */
  connectionMarker(): number {
    return this.own.marker;
  }

  connectedSince(marker: number): number {
    return this.own.connectedSince(marker);
  }

  private noteAnswer(endpoint: string, status: number, body: string): void {
    this.latestAnswer = { endpoint, status, excerpt: answerExcerpt(body), at: this.clock.now() };
  }
}

/** The witness connection (see EnvoyAdminClient.witness). */
interface Witness {
  readonly id: number;
  readonly socket: import('node:net').Socket;
  open: boolean;
  closed: boolean;
  /** For a Unix socket: the socket file it connected to (device and inode). */
  inode: string | undefined;
  /** Closed by us (a connect that hung, a witness let go): not evidence of the other end. */
  givenUp: boolean;
  /** The epoch of the newest stats read answered before it was created (undefined: none). */
  readonly epochBefore: number | null | undefined;
  /** The epoch of the process holding it, once a read sent while it was open settled it. */
  holder: HolderEpoch | undefined;
}

/**
 * The client's sockets, numbered as they are created, and which of them the admin port answered on: what a
 * process's admin counter must have grown by between two reads (src/envoy/identity.ts). Only the latest numbers are kept: an
 * older one forgotten makes a count lower, which can only make two reads look more alike, never less.
 */
class OwnConnectionLedger {
  private count = 0;
  private readonly connected: number[] = [];

  get marker(): number {
    return this.count;
  }

  /** A new socket's number, and what to call (once or more) once the admin port has answered on it. */
  created(): () => void {
    const number = ++this.count;
    let counted = false;
    return () => {
      if (counted) return;
      counted = true;
      this.connected.push(number);
      if (this.connected.length > 1_024) this.connected.splice(0, 512);
    };
  }

  connectedSince(marker: number): number {
    let count = 0;
    for (const number of this.connected) if (number > marker) count += 1;
    return count;
  }
}

/**
 * A Unix socket (Contour's admin API), or a host and port over TCP. A host name that resolves to both families
 * (`localhost` to 127.0.0.1 and ::1) is tried on each address in turn (Node's autoSelectFamily, RFC 8305),
 * so the sidecar reaches Envoy on the family it listens on: Envoy Gateway binds ::1 only on IPv6 clusters.
 */
type ConnectTarget = { readonly socketPath: string } | { readonly host: string; readonly port: number };

interface CallSpec {
  readonly connectTo: ConnectTarget;
  readonly method: 'GET' | 'POST';
  readonly path: string;
  readonly agent: import('node:http').Agent;
  /** For messages: `http://host:port` or `unix:/path`. */
  readonly target: string;
  readonly timeoutMs: number;
  readonly maxBodyBytes: number;
  readonly signal: AbortSignal | undefined;
  /** Called once per call that got a status line, with the body or the part of it that arrived. */
  readonly onAnswer: (status: number, body: string) => void;
  /**
   * Numbers the call's socket when it is created; the returned function is called once the admin port has
   * answered on it (a status line), which proves that Envoy accepted it: connected is not enough, since Envoy
   * closes a connection over its global connection limit, or under overload, at accept, without counting it.
   */
  readonly onSocket: () => () => void;
}

/**
 * One admin call: its request, its own timer and the caller's abort listener, settled exactly once. Every way
 * it can end (answer, timeout, abort, error, a close without a complete answer) goes through `succeed` or
 * `fail`, which clear the timer and remove the listener; `fail` also destroys the socket.
 *
 * Why an owned setTimeout and not AbortSignal.timeout/any: on Node 20 a timeout signal's timer may be
 * collected before it fires when nothing else holds the signal (the call then never settles), and
 * AbortSignal.any([timeout, callerSignal]) keeps ~115 bytes per call on a long-lived caller signal.
 */
class AdminCall {
  readonly settled: Promise<{ readonly status: number; readonly body: string }>;
  private resolve!: (answer: { status: number; body: string }) => void;
  private reject!: (error: EnvoyAdminError) => void;
  private done = false;
  private connected = false;
  private status: number | undefined;
  private readonly chunks: Buffer[] = [];
  private size = 0;
  private readonly timer: OwnedTimer;
  private readonly request: import('node:http').ClientRequest;
  private readonly onAbort = (): void => this.fail(new AdminTransportError(this.endpoint, 'cancelled by the caller'));

  constructor(
    private readonly endpoint: string,
    private readonly spec: CallSpec,
  ) {
    this.settled = new Promise((resolve, reject) => {
      this.resolve = resolve;
      this.reject = reject;
    });
    this.timer = new OwnedTimer(spec.timeoutMs, () => this.fail(this.timeoutError()));
    spec.signal?.addEventListener('abort', this.onAbort, { once: true });
    this.request = http.request({
      ...('socketPath' in spec.connectTo ? { socketPath: spec.connectTo.socketPath } : { ...spec.connectTo, autoSelectFamily: true }),
      method: spec.method,
      path: spec.path,
      agent: spec.agent,
      headers: { accept: 'application/json, text/plain' },
    });
    this.listen();
    this.request.end();
  }

  /** Ends the call at once as a transport failure (the client is closing). */
  cancel(why: string): void {
    this.fail(new AdminTransportError(this.endpoint, why));
  }

  private listen(): void {
    const request = this.request;
    let answered = (): void => undefined;
    request.on('socket', (socket) => {
      answered = this.spec.onSocket();
      socket.once('connect', () => (this.connected = true));
    });
    request.on('response', (response) => {
      answered();
      this.read(response);
    });
    // Node emits 'upgrade' for a 101 and 'information' for other 1xx: Envoy's admin API sends neither.
    request.on('upgrade', (response, socket) => {
      answered();
      socket.destroy();
      this.status = response.statusCode;
      this.fail(new AdminResponseError(this.endpoint, `answered HTTP ${response.statusCode} (a protocol upgrade), which Envoy's admin API never does: is this Envoy's admin port?`));
    });
    request.on('information', ({ statusCode }) => {
      answered();
      if (statusCode === 100) return;
      this.status = statusCode;
      this.fail(new AdminResponseError(this.endpoint, `answered an interim HTTP ${statusCode}, which Envoy's admin API never sends: is this Envoy's admin port?`));
    });
    request.on('error', (error) => this.fail(this.classify(error)));
    // Whatever Node reports or not, a connection that closes before the answer is complete is a failure.
    request.on('close', () => this.fail(this.closedError()));
  }

  private read(response: import('node:http').IncomingMessage): void {
    this.status = response.statusCode ?? 0;
    const declared = Number(response.headers['content-length'] ?? NaN);
    if (declared > this.spec.maxBodyBytes) return this.fail(this.tooLargeError(`declares ${declared} bytes, over`));
    response.on('data', (chunk: Buffer) => {
      if (this.done) return;
      this.size += chunk.length;
      if (this.size > this.spec.maxBodyBytes) return this.fail(this.tooLargeError('went past'));
      this.chunks.push(chunk);
    });
    response.on('end', () => this.succeed());
    response.on('error', (error) => this.fail(this.classify(error)));
  }

  private succeed(): void {
    if (this.done) return;
    this.finish();
    const body = Buffer.concat(this.chunks).toString('utf8');
    const status = this.status ?? 0;
    this.spec.onAnswer(status, body);
    this.resolve({ status, body });
  }

  private fail(error: EnvoyAdminError): void {
    if (this.done) return;
    this.finish();
    this.request.destroy();
    if (this.status !== undefined) this.spec.onAnswer(this.status, this.bodySoFar());
    this.reject(error);
  }

  private finish(): void {
    this.done = true;
    this.timer.clear();
    this.spec.signal?.removeEventListener('abort', this.onAbort);
  }

  /** The beginning of what arrived, enough for an excerpt, without joining megabytes. */
  private bodySoFar(): string {
    return Buffer.concat(this.chunks.slice(0, 4)).subarray(0, EXCERPT_SOURCE_BYTES).toString('utf8');
  }

  /** What had arrived when the call ended: tells "never connected" from "answer cut short". */
  private progress(): string {
    if (this.status !== undefined) return `after HTTP ${this.status} and ${this.size} bytes of its body`;
    return this.connected ? 'connected, no answer yet' : 'not connected yet';
  }

  private timeoutError(): AdminTimeoutError {
    return new AdminTimeoutError(
      this.endpoint,
      `no complete answer within ${this.spec.timeoutMs} ms from ${this.spec.target} (${this.progress()}): Envoy may be overloaded; it may have acted on the call`,
    );
  }

  private closedError(): EnvoyAdminError {
    return new AdminTransportError(this.endpoint, `the connection to ${this.spec.target} closed before a complete answer (${this.progress()})`);
  }

  /** `what`: "declares N bytes, over" or "went past". */
  private tooLargeError(what: string): AdminResponseError {
    return new AdminResponseError(this.endpoint, `the answer ${what} the ${this.spec.maxBodyBytes}-byte limit for this call: not an answer Envoy gives`);
  }

  private classify(error: Error): EnvoyAdminError {
    const code = (error as NodeJS.ErrnoException).code;
    // Before ECONNREFUSED: connecting to a path that is a regular file or a directory is refused too (Linux).
    if ('socketPath' in this.spec.connectTo && (code === 'ECONNREFUSED' || code === 'ENOENT' || code === 'ENOTSOCK')) {
      return this.classifySocketPath(code, this.spec.connectTo.socketPath, error);
    }
    if (code === 'ECONNREFUSED') {
      return new AdminRefusedError(this.endpoint, `connection refused at ${this.spec.target} (Envoy not running?)`, { cause: error });
    }
    if (code?.startsWith('HPE_') === true) {
      return new AdminResponseError(this.endpoint, `answered something that is not HTTP/1.1 (${code}: ${error.message}): is this Envoy's admin port?`, { cause: error });
    }
    if ('socketPath' in this.spec.connectTo) {
      const socketError = this.classifySocketError(code, this.spec.connectTo.socketPath, error);
      if (socketError !== undefined) return socketError;
    } else if (code === 'ENOTFOUND' || code === 'EAI_AGAIN') {
      return new AdminTransportError(this.endpoint, `cannot resolve ${JSON.stringify(this.spec.connectTo.host)} (${code}): check --admin-address`, { cause: error });
    }
    if (code === 'ECONNRESET') {
      return new AdminTransportError(this.endpoint, `the connection to ${this.spec.target} was reset (${this.progress()}): Envoy may have exited or restarted`, { cause: error });
    }
    return new AdminTransportError(this.endpoint, `${code ?? error.name}: ${error.message} (${this.progress()})`, { cause: error });
  }

  /**
   * A missing socket file is "nothing listens there", as a closed port is: Envoy not started yet, or exited.
   * A socket the sidecar may not connect to is no sign of Envoy at all, and the message says what to change:
   * connect(2) needs write permission on the socket file (unix(7)), and Contour creates it with mode 0644.
   */
  /**
   * A Unix socket that cannot be connected to, by what is at the path now: a socket nobody listens on (Envoy
   * exited, or not started) and no file at all are refusals; a regular file or a directory where the socket was
   * is no sign of Envoy either way (something replaced the path), and the message says what is there.
   */
  private classifySocketPath(code: string, path: string, cause: Error): EnvoyAdminError {
    const state = socketPathState(path);
    let error: AdminRefusedError | AdminTransportError;
    switch (state) {
      case 'socket':
        error = new AdminRefusedError(this.endpoint, `connection refused at ${this.spec.target}: nothing listens on the socket ${path} (Envoy not running?)`, { cause });
        break;
      case 'missing':
        error = new AdminRefusedError(this.endpoint, `no socket at ${path} (Envoy not started yet, or the directory is not the volume Envoy's container mounts there; or the socket was removed)`, { cause });
        break;
      case 'file':
        error = new AdminTransportError(this.endpoint, `${path} is now a regular file, not a Unix socket (${code}): something replaced Envoy's admin socket; Envoy may still run behind it`, { cause });
        break;
      case 'directory':
        error = new AdminTransportError(this.endpoint, `${path} is now a directory, not a Unix socket (${code}): something replaced Envoy's admin socket; Envoy may still run behind it`, { cause });
        break;
      case 'other':
        error = new AdminTransportError(this.endpoint, `${path} is not a Unix socket (${code}): check --admin-address`, { cause });
        break;
    }
    error.pathState = state;
    return error;
  }

  private classifySocketError(code: string | undefined, path: string, cause: Error): EnvoyAdminError | undefined {
    if (code === 'ENOENT') {
      return new AdminRefusedError(this.endpoint, `no socket at ${path} (Envoy not started yet, or the directory is not the volume Envoy's container mounts there)`, { cause });
    }
    if (code === 'EACCES' || code === 'EPERM') {
      const uid = process.getuid?.() ?? 'unknown';
      return new AdminTransportError(
        this.endpoint,
        `permission denied connecting to ${path} as uid ${uid}: connecting needs write permission on the socket file; run the sidecar as Envoy's user (runAsUser) or give the socket a mode that lets this user connect (admin.address.pipe.mode)`,
        { cause },
      );
    }
    if (code === 'ENOTDIR' || code === 'ENOTSOCK') {
      return new AdminTransportError(this.endpoint, `${path} is not a Unix socket (${code}): check --admin-address`, { cause });
    }
    return undefined;
  }
}

/** What is at `path` now, without following a symbolic link. */
export function socketPathState(path: string): SocketPathState {
  if (isAbstractSocket(path)) return 'socket';
  try {
    const stat = fs.lstatSync(path);
    if (stat.isSocket()) return 'socket';
    if (stat.isFile()) return 'file';
    if (stat.isDirectory()) return 'directory';
    return 'other';
  } catch (error) {
    return (error as NodeJS.ErrnoException).code === 'ENOENT' || (error as NodeJS.ErrnoException).code === 'ENOTDIR' ? 'missing' : 'other';
  }
}

function isAbstractSocket(path: string): boolean {
  return path.startsWith('\0') || path.startsWith('@');
}

/** `device:inode` of the socket at `path`; undefined when it is none. */
function inodeOf(path: string): string | undefined {
  // An abstract name has no file, and is bound by one socket at a time, as a port is.
  if (isAbstractSocket(path)) return 'abstract';
  try {
    const stat = fs.lstatSync(path);
    return stat.isSocket() ? `${stat.dev}:${stat.ino}` : undefined;
  } catch {
    return undefined;
  }
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
