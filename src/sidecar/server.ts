/**
 * The sidecar's HTTP edge (node:http, no framework: this process should stay small). Routes only
 * translate between HTTP and the Drain; every decision lives there. The ConnectionGuard keeps the port
 * answering the kubelet whatever other clients of the port do.
 */
import { readFileSync } from 'node:fs';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { systemClock, type Clock } from '../clock.js';
import { SIDECAR_PATHS } from '../config/endpoints.js';
import { UserFacingError } from '../errors.js';
import { describeOutcome, type DrainOutcome } from './drain.js';
import { LogThrottle } from './log-throttle.js';
import type { SidecarLog } from './log.js';

/** Not imported: an ESM import of node:http costs 12 MiB on Node 24 (see src/envoy/admin-client.ts). */
const http = process.getBuiltinModule('node:http');

/** The server could not listen: says where, and what to check. */
export class ServeError extends UserFacingError {
  override readonly name = 'ServeError';

  constructor(host: string, port: number, cause: NodeJS.ErrnoException) {
    const where = host === '' ? `port ${port} of every interface` : `${host.includes(':') ? `[${host}]` : host}:${port}`;
    const hint =
      cause.code === 'EADDRINUSE'
        ? 'the port is taken (another container of the pod, or Envoy, listens on it): choose another --serve-port'
        : cause.code === 'EADDRNOTAVAIL'
          ? 'no interface has this address: check --serve-address'
          : cause.message;
    super(`cannot serve on ${where}: ${hint}`, { cause });
  }
}

/** What the routes need of the drain: DrainSupervisor implements it. */
export interface DrainEndpoints {
  /** GET /shutdown: start or join the drain. */
  shutdown(): Promise<DrainOutcome>;
  /** GET /wait: join a drain that runs or starts within the window; undefined when none did. */
  wait(windowMs: number): Promise<DrainOutcome | undefined>;
  /** GET /drain. */
  snapshot(): object;
  /** GET /ready: ready once Envoy's admin API has answered (latched); `detail` says what is wrong when not. */
  readiness(): { readonly ready: boolean; readonly detail: string };
}

/** Why the ConnectionGuard closed a connection; each is a bound of ConnectionLimits. */
export type ConnectionCloseReason =
  /** No request in progress, or its answers not read, closed to make room at maxConnections. */
  | 'shed'
  /** No complete request head within requestWithinMs. */
  | 'timedOut'
  /** A new connection closed at maxConnections: every open one had a request awaiting its answer. */
  | 'refused'
  /** More than maxRequestsInFlight requests pipelined. */
  | 'tooManyInFlight'
  /** More than maxUnflushedBytes of answers left unread. */
  | 'slowReader'
  /** An answer not taken within writeWithinMs. */
  | 'writeTimedOut';

const CLOSE_REASONS: readonly ConnectionCloseReason[] = ['shed', 'timedOut', 'refused', 'tooManyInFlight', 'slowReader', 'writeTimedOut'];

/** Cumulative since the server started, never reset: for Prometheus counters. */
export interface DrainServerCounters {
  /** /shutdown and /wait calls refused (401) for want of the right token. */
  readonly unauthorized: number;
  readonly connectionsClosed: Readonly<Record<ConnectionCloseReason, number>>;
}

export interface DrainServer {
  /** The address bound: `::` for every interface of both families, `0.0.0.0` where IPv6 is off. */
  readonly address: string;
  readonly port: number;
  /** Open connections now: `busy` have a request in progress, `waiting` have none (see ConnectionLimits). */
  readonly connections: { readonly waiting: number; readonly busy: number };
  /** A copy of the counts at the time of reading. */
  readonly counters: DrainServerCounters;
  /**
   * Stops listening and resolves once every connection is closed. Held /shutdown requests are answered
   * first (interrupt the drain before, so that they have an answer); stragglers are cut after a second.
   */
  close(): Promise<void>;
}

/**
 * Node's bound on receiving a whole request, body included (ours have none). The request head has a much
 * shorter bound of its own (ConnectionLimits.requestWithinMs); answering /shutdown may take as long as the drain.
 */
const REQUEST_RECEIVE_TIMEOUT_MS = 30_000;
/**
 * What a connection buffers before Node applies backpressure: it stops answering pipelined requests past this
 * many unflushed bytes, and a paused connection reads at most this (and one read) more. Node 20's default, fixed
 * here because Node 22 raised the default to 64 KiB: 512 connections × 64 KiB is 32 MiB.
 */
const SOCKET_BUFFER_BYTES = 16 * 1024;
/** How long close() lets in-flight responses finish before cutting their connections. */
const CLOSE_GRACE_MS = 1_000;

/**
 * How the server keeps its port usable, and its memory bounded, whatever a client does: every file
 * descriptor a stranger holds is one the kubelet's /shutdown and probes may not get (past the process's
 * open-file limit Node resets new connections as it accepts them), and every answer it asks for and does not
 * read is memory in a container limited to 128Mi. The kubelet's own use (a few probes, two preStop hooks
 * held for the length of a drain, a scrape) stays far inside every bound.
 */
export interface ConnectionLimits {
  /**
   * A connection must deliver a complete request head within this long of opening, or of its previous
   * answer (keep-alive); otherwise it is closed. A request being answered (a held /shutdown) is never cut.
   */
  readonly requestWithinMs: number;
  /**
   * Open connections at most. At the limit a new connection still gets served: it closes the connection
   * that has waited longest without a request in progress, or else the one that has left its answers
   * unread longest. Only when every connection has a request awaiting its answer is the new one closed.
   */
  readonly maxConnections: number;
  /**
   * Requests received on one connection and not yet answered in full. Node stops reading a connection whose
   * answers pile up, but only between reads: one 64 KiB read holds some 1,800 pipelined requests, each
   * answered into a queue of its own. A request beyond the bound closes the connection.
   */
  readonly maxRequestsInFlight: number;
  /**
   * Bytes of answers written to one connection and not yet taken by the kernel. A client that reads keeps
   * this near 0; one that does not fills the kernel's socket buffers first, then this. An answer written while
   * more than this of the answers that go out before it are untaken closes the connection; answers queued
   * behind a request still awaiting its answer (a held /shutdown) do not count.
   */
  readonly maxUnflushedBytes: number;
  /**
   * Once every request of a connection is answered, an answer must be taken within this long (of being
   * written, or of the previous one taken); otherwise the connection is closed. Answers queued behind a
   * request still awaiting its answer (a held /shutdown) wait with it: that request is never cut.
   */
  readonly writeWithinMs: number;
}

/** A kubelet, curl or Prometheus sends its request head within milliseconds of connecting; 5 s leaves room for a loaded node. */
const REQUEST_HEAD_TIMEOUT_MS = 5_000;
/** Legitimate clients are a handful (probes, two preStop hooks, a scrape): the limit only bounds descriptors and memory. */
const MAX_CONNECTIONS_CAP = 512;
const MIN_CONNECTIONS = 8;
/** Descriptors left for everything but served connections: stdio, epoll, the admin client's sockets, libuv's own (21 at rest, measured). */
const RESERVED_DESCRIPTORS = 64;
/**
 * The kubelet, curl and Prometheus send one request and read its answer before the next; 4 leaves room for
 * a client that pipelines a little. 512 connections × 4 requests is 2,048 queued answers at most, instead of
 * hundreds of thousands (measured before this bound: 500 connections pipelining GET /drain without reading
 * took the sidecar past 1.9 GiB of resident memory within 10 s).
 */
const MAX_REQUESTS_IN_FLIGHT = 4;
/**
 * Our answers are 0.2 to 2 KiB, /metrics 6 to 15 KiB (its per-listener series are capped: see metrics.ts): 32 KiB
 * is several whole answers, and 512 connections × (32 KiB + one answer) stays under 20 MiB, which, on a sidecar
 * of 45-55 MiB at rest, keeps every client behaviour within a 96 MiB budget under the pod's 128Mi. /drain grows
 * by some 70 bytes per Envoy listener (200 KB with 3,000), but those bytes are one Buffer per poll, shared by
 * every connection it is queued on (JsonParts), not a copy per answer.
 */
const MAX_UNFLUSHED_BYTES = 32 * 1024;
/** A kubelet or Prometheus takes its answer within milliseconds; 5 s leaves room for a loaded node, as for the request head. */
const WRITE_TIMEOUT_MS = 5_000;

/** The limits for this process: at most 512 connections, fewer when the open-file limit is below 576. */
export function defaultConnectionLimits(openFilesLimit: number | undefined = openFilesSoftLimit()): ConnectionLimits {
  const budget = openFilesLimit === undefined ? MAX_CONNECTIONS_CAP : openFilesLimit - RESERVED_DESCRIPTORS;
  return {
    requestWithinMs: REQUEST_HEAD_TIMEOUT_MS,
    maxConnections: Math.max(MIN_CONNECTIONS, Math.min(MAX_CONNECTIONS_CAP, budget)),
    maxRequestsInFlight: MAX_REQUESTS_IN_FLIGHT,
    maxUnflushedBytes: MAX_UNFLUSHED_BYTES,
    writeWithinMs: WRITE_TIMEOUT_MS,
  };
}

/** The soft RLIMIT_NOFILE from /proc (Node has no getrlimit); undefined when unlimited or not on Linux. */
export function openFilesSoftLimit(limitsFile = '/proc/self/limits'): number | undefined {
  let text: string;
  try {
    text = readFileSync(limitsFile, 'utf8');
  } catch {
    return undefined;
  }
  const match = /^Max open files\s+(\d+)\s/m.exec(text);
  return match?.[1] === undefined ? undefined : Number(match[1]);
}

/** How often a burst of events may add a line to the log (see LogThrottle). */
export interface ReportPeriods {
  /** Connections closed by the guard: a flood of them must not flood the log too. */
  readonly connectionsClosedMs: number;
  /** /shutdown and /wait refused for want of the token: 20,000 calls were 20,000 lines. */
  readonly refusalsMs: number;
}

const REPORT_PERIODS: ReportPeriods = { connectionsClosedMs: 10_000, refusalsMs: 60_000 };

export interface DrainServerOptions {
  readonly drain: DrainEndpoints;
  /** How long GET /wait waits for a drain to start. */
  readonly waitWindowMs: number;
  /** Empty: every interface, IPv4 and IPv6 (Node binds `::` accepting v4-mapped, or `0.0.0.0` without IPv6). */
  readonly host: string;
  readonly port: number;
  readonly log: SidecarLog;
  /** When set, /shutdown needs "Authorization: Bearer <token>": nobody else in the cluster may drain Envoy. */
  readonly shutdownToken?: string | undefined;
  /**
   * Prometheus exposition for /metrics. Called at most once a turn of the event loop, its answer shared by every
   * /metrics request answered in that turn (see sharedPerTurn).
   */
  readonly metrics?: () => Promise<{ readonly contentType: string; readonly body: string }>;
  /** Over defaultConnectionLimits(): tests shorten them, or lift one (Infinity) to show what it prevents. */
  readonly connectionLimits?: Partial<ConnectionLimits>;
  /** Over REPORT_PERIODS: tests shorten them. */
  readonly reportPeriods?: Partial<ReportPeriods>;
  /** The sidecar's one clock (monotonic now() for the connections' deadlines); default the system clock. */
  readonly clock?: Pick<Clock, 'now'>;
}

export async function startDrainServer(options: DrainServerOptions): Promise<DrainServer> {
  const { log } = options;
  const limits = { ...defaultConnectionLimits(), ...options.connectionLimits };
  const periods = { ...REPORT_PERIODS, ...options.reportPeriods };
  const guard = new ConnectionGuard(limits, log, periods.connectionsClosedMs, options.clock ?? systemClock);
  const refusals = new RefusalLog(log, periods.refusalsMs);
  const route = router(options, answerer(guard), refusals, (response) => guard.wanted(response));
  const onRequest = (request: IncomingMessage, response: ServerResponse): void => {
    // False for requests parsed after the guard closed their connection (the rest of a pipelined read): nobody to answer.
    if (!guard.requestStarted(request.socket, response)) return;
    // 'close' comes once the answer is written, or when the client gave up: either way nothing is in progress.
    response.once('close', () => guard.requestEnded(request.socket, response));
    route(request, response);
  };
  // Every request goes through the guard: without these, Node answers a request with no Host header (400) and one
  // with an Expect header other than 100-continue (417) itself, never telling the server, and a pipelined flood
  // of such heads went past the bound on requests in flight (one 64 KiB read: 110 to 143 of them parsed).
  const server = http.createServer({ requestTimeout: REQUEST_RECEIVE_TIMEOUT_MS, highWaterMark: SOCKET_BUFFER_BYTES, requireHostHeader: false }, onRequest);
  server.on('checkExpectation', onRequest);
  // Node's default keep-alive of 5 s would hold the process after close(); kubelet probes open a new connection each time anyway.
  server.keepAliveTimeout = 1_000;
  // Registered after http's own listener: the socket already has its parser, and may be closed here.
  server.on('connection', (socket: Socket) => guard.accepted(socket));

  await listen(server, options.host, options.port);
  const { address, port } = server.address() as AddressInfo;
  logLimits(log, limits);

  return {
    address,
    port,
    get connections() {
      return guard.counts;
    },
    get counters() {
      return { unauthorized: refusals.total, connectionsClosed: { ...guard.closed } };
    },
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // A keep-alive socket becomes idle once its response is written: sweep until none is left.
      const sweeper = setInterval(() => server.closeIdleConnections(), 20);
      const cutoff = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
      server.closeIdleConnections();
      // Node counts a connection that never sent anything as active: it would hold close() for the grace.
      guard.closeWaiting();
      try {
        await closed;
      } finally {
        clearInterval(sweeper);
        clearTimeout(cutoff);
        guard.stop();
        refusals.stop();
      }
    },
  };
}

function listen(server: ReturnType<typeof http.createServer>, host: string, port: number): Promise<void> {
  return new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException): void => reject(new ServeError(host, port, error));
    server.once('error', onError);
    const listening = (): void => {
      server.off('error', onError);
      resolve();
    };
    // No host is how Node listens on every interface of both families; '::' would fail where IPv6 is off.
    if (host === '') server.listen(port, listening);
    else server.listen(port, host, listening);
  });
}

function logLimits(log: SidecarLog, limits: ConnectionLimits): void {
  const { maxConnections, requestWithinMs, maxRequestsInFlight, maxUnflushedBytes, writeWithinMs } = limits;
  log.info(
    {
      event: 'connection_limits',
      max_connections: maxConnections,
      request_within_ms: requestWithinMs,
      max_requests_in_flight: maxRequestsInFlight,
      max_unflushed_bytes: maxUnflushedBytes,
      write_within_ms: writeWithinMs,
    },
    `serving at most ${maxConnections} connections; each must send its request within ${requestWithinMs} ms, ` +
      `pipeline at most ${maxRequestsInFlight} requests, and take each answer within ${writeWithinMs} ms, leaving at most ${maxUnflushedBytes} bytes unread`,
  );
}

/**
 * An answer's body: text, bytes, or chunks of both written one after the other. A Buffer is written as it is,
 * not copied: one rendering of a large part can be queued on many connections for the memory of one.
 */
export type Body = string | Buffer | readonly (string | Buffer)[];

/** Writes an answer: status, content type, body, extra headers. */
type Reply = (response: ServerResponse, status: number, contentType: string, body: Body, headers?: Record<string, string>) => void;

/**
 * Every route of the server, answering through `reply`. /drain and /metrics, whose answers grow with Envoy's
 * listeners, are rendered once the requests of the read that brought them are parsed, only for a connection
 * still open and within its bound on unread answers (`wanted`), and at most once a turn of the event loop,
 * shared by every request answered in it (sharedPerTurn); /drain's parts as large as the listeners are rendered
 * once per poll (JsonParts). Measured before (issue 28): 100 connections pipelining /metrics without reading,
 * against an Envoy of 3,000 listeners, had the sidecar render 190 KB (26 ms of CPU) for every request, those of
 * connections already closed included: /healthz timed out and /shutdown answered seconds after its deadline.
 */
function router(
  options: DrainServerOptions,
  reply: Reply,
  refusals: RefusalLog,
  wanted: (response: ServerResponse) => boolean,
): (request: IncomingMessage, response: ServerResponse) => void {
  const { drain, log, waitWindowMs } = options;
  const authorized = bearerCheck(options.shutdownToken);
  const parts = new JsonParts();
  const drainJson = sharedPerTurn((): Body => {
    const chunks = parts.render(drain.snapshot());
    const last = chunks.at(-1);
    if (typeof last === 'string') chunks[chunks.length - 1] = `${last}\n`;
    else chunks.push('\n');
    return chunks;
  });
  const { metrics } = options;
  const exposition =
    metrics === undefined
      ? undefined
      : sharedPerTurn(() => metrics().then(({ contentType, body }) => ({ contentType, body: Buffer.from(body) })));
  /** After the read that brought the request is parsed (a microtask): a pipelined flood closed at its fifth request gets nothing rendered. */
  const whenWanted = (response: ServerResponse, answer: () => void): void => {
    queueMicrotask(() => {
      if (wanted(response)) answer();
    });
  };
  return (request, response) => {
    const path = (request.url ?? '/').split('?', 1)[0];
    // /shutdown drains Envoy: only the GET the kubelet's hooks send may start that, not a HEAD from a
    // link checker or a probe; reads may be HEAD too.
    const allowed = path === SIDECAR_PATHS.shutdown || path === SIDECAR_PATHS.wait ? ['GET'] : ['GET', 'HEAD'];
    if (!allowed.includes(request.method ?? '')) {
      reply(response, 405, 'text/plain', `${request.method ?? ''} not allowed; use GET\n`, { allow: allowed.join(', ') });
      return;
    }
    switch (path) {
      case SIDECAR_PATHS.healthz:
        reply(response, 200, 'text/plain', 'ok\n');
        return;
      case SIDECAR_PATHS.ready: {
        const { ready, detail } = drain.readiness();
        reply(response, ready ? 200 : 503, 'text/plain', ready ? `ready: ${detail}\n` : `${detail}\n`);
        return;
      }
      case SIDECAR_PATHS.drain:
        whenWanted(response, () => reply(response, 200, 'application/json', drainJson()));
        return;
      case SIDECAR_PATHS.metrics:
        if (exposition === undefined) break;
        whenWanted(response, () =>
          exposition().then(
            ({ contentType, body }) => reply(response, 200, contentType, body),
            (error: unknown) => reply(response, 500, 'text/plain', `metrics failed: ${String(error)}\n`),
          ),
        );
        return;
      case SIDECAR_PATHS.shutdown:
      case SIDECAR_PATHS.wait:
        if (!authorized(request.headers.authorization)) {
          refusals.refused(path, request.socket.remoteAddress);
          reply(response, 401, 'text/plain', 'a valid "Authorization: Bearer <token>" header is required\n', {
            'www-authenticate': 'Bearer realm="shutdown-manager"',
          });
          return;
        }
        const asJson = (request.headers.accept ?? '').includes('application/json');
        answerWhenDrained(response, path === SIDECAR_PATHS.shutdown ? drain.shutdown() : drain.wait(waitWindowMs), reply, log, { waitWindowMs, asJson });
        return;
    }
    reply(response, 404, 'text/plain', `no such path; try ${Object.values(SIDECAR_PATHS).join(', ')}\n`);
  };
}

/** What a status line and our headers take, about: counted with each answer's body against maxUnflushedBytes. */
const ANSWER_HEAD_BYTES = 256;

/** Replies through the guard, which may refuse to queue an answer for a client that leaves too much unread. */
function answerer(guard: ConnectionGuard): Reply {
  return (response, status, contentType, body, headers = {}) => {
    // The caller may have given up (a kubelet hook abandoned at the grace period): nothing to answer.
    if (response.destroyed || response.writableEnded) return;
    const chunks = typeof body === 'string' || Buffer.isBuffer(body) ? [body] : body;
    let bodyBytes = 0;
    for (const chunk of chunks) bodyBytes += typeof chunk === 'string' ? Buffer.byteLength(chunk) : chunk.length;
    const head = response.req.method === 'HEAD';
    if (!guard.answering(response, ANSWER_HEAD_BYTES + (head ? 0 : bodyBytes))) return;
    const type = contentType.includes('charset') ? contentType : `${contentType}; charset=utf-8`;
    response.writeHead(status, { 'content-type': type, 'content-length': String(bodyBytes), 'cache-control': 'no-store', ...headers });
    if (head || chunks.length <= 1) {
      response.end(head ? undefined : chunks[0]);
      return;
    }
    // One write of them all (writev): the shared Buffers are not copied into one.
    response.cork();
    for (const chunk of chunks) response.write(chunk);
    response.end();
    response.uncork();
  };
}

/** The state of one open connection, for the guard; a few entries at most (maxRequestsInFlight). */
interface ConnectionState {
  /**
   * Requests received and not yet answered in full, each with its place on the connection: pipelined
   * requests queue, and HTTP/1.1 sends their answers in that order, whatever order they are written in.
   */
  readonly inFlight: Map<ServerResponse, number>;
  /** Of those, the ones whose answer is written but not yet taken by the kernel, with its bytes. */
  readonly unflushed: Map<ServerResponse, number>;
  received: number;
}

/**
 * Enforces ConnectionLimits. A connection is waiting (no request in progress: silent since it opened,
 * sending a head slowly, or idle after an answer), stalled (every request answered, an answer not yet taken)
 * or else awaiting an answer (a held /shutdown, a /metrics being read). Waiting and stalled connections are
 * closed when they take too long, or, oldest first, to make room for a new connection at the limit; one
 * awaiting an answer is closed only when its client breaks a bound itself (pipelining too many, leaving too
 * much unread).
 */
class ConnectionGuard {
  /** Cumulative, never reset. */
  readonly closed: Record<ConnectionCloseReason, number> = zeroCounts();
  private readonly open = new Map<Socket, ConnectionState>();
  private readonly waiting: Deadlines;
  private readonly stalled: Deadlines;
  private readonly report: ClosedConnectionsLog;
  private closing = false;

  constructor(
    private readonly limits: ConnectionLimits,
    log: SidecarLog,
    reportEveryMs: number,
    clock: Pick<Clock, 'now'>,
  ) {
    this.waiting = new Deadlines(limits.requestWithinMs, (socket) => this.close(socket, 'timedOut'), clock);
    this.stalled = new Deadlines(limits.writeWithinMs, (socket) => this.close(socket, 'writeTimedOut'), clock);
    this.report = new ClosedConnectionsLog(log, limits, reportEveryMs, () => this.open.size);
  }

  get counts(): { readonly waiting: number; readonly busy: number } {
    return { waiting: this.waiting.size, busy: this.open.size - this.waiting.size };
  }

  accepted(socket: Socket): void {
    if (this.open.size >= this.limits.maxConnections && !this.makeRoom()) {
      // Every connection has a request awaiting its answer: the new one waits for none of them, and the limit holds.
      this.close(socket, 'refused');
      return;
    }
    this.open.set(socket, { inFlight: new Map(), unflushed: new Map(), received: 0 });
    socket.once('close', () => this.forget(socket));
    // Lifted (tests): Node's own reading, to show what the bound prevents.
    if (Number.isFinite(this.limits.maxRequestsInFlight)) feedParserInSlices(socket, () => this.close(socket, 'tooManyInFlight'));
    this.wait(socket);
  }

  /** False when the request must not be served: its connection is closed (now, for pipelining too many, or before). */
  requestStarted(socket: Socket, response: ServerResponse): boolean {
    const state = this.open.get(socket);
    if (state === undefined || socket.destroyed) return false;
    if (state.inFlight.size >= this.limits.maxRequestsInFlight) {
      this.close(socket, 'tooManyInFlight');
      return false;
    }
    state.inFlight.set(response, state.received++);
    this.waiting.delete(socket);
    this.track(socket, state);
    return true;
  }

  requestEnded(socket: Socket, response: ServerResponse): void {
    const state = this.open.get(socket);
    if (state === undefined) return;
    state.inFlight.delete(response);
    state.unflushed.delete(response);
    if (state.inFlight.size > 0) this.track(socket, state);
    else if (!socket.destroyed) this.wait(socket);
  }

  /**
   * Before an answer is computed: false when nobody will take it, its connection having closed since the request
   * was parsed (the client left, or a later request of the same read broke a bound), or when its connection is
   * closed now, for the reason answering() would close it: what is computed for it would be thrown away.
   */
  wanted(response: ServerResponse): boolean {
    const socket = response.req.socket;
    if (response.destroyed || socket.destroyed) return false;
    const state = this.open.get(socket);
    if (state === undefined) return true;
    if (unflushedAhead(state, response) > this.limits.maxUnflushedBytes) {
      this.close(socket, 'slowReader');
      return false;
    }
    return true;
  }

  /**
   * Before an answer of `bytes` is written: false when its connection is closed instead, its client having left
   * more than maxUnflushedBytes of earlier answers untaken. Only answers that go out before this one count (see
   * unflushedAhead): those written earlier for later requests wait behind it, and are not the client's doing.
   */
  answering(response: ServerResponse, bytes: number): boolean {
    const socket = response.req.socket;
    const state = this.open.get(socket);
    if (state === undefined) return !socket.destroyed;
    if (unflushedAhead(state, response) > this.limits.maxUnflushedBytes) {
      this.close(socket, 'slowReader');
      return false;
    }
    state.unflushed.set(response, bytes);
    // 'finish': the last byte was handed to the kernel (Node's write callback); a client that does not read stops that.
    response.once('finish', () => this.flushed(socket, response));
    this.track(socket, state);
    return true;
  }

  /** For close(): waiting connections have nothing to be answered; later ones are closed as they become waiting. */
  closeWaiting(): void {
    this.closing = true;
    for (const socket of this.waiting.sockets()) this.close(socket);
  }

  stop(): void {
    this.waiting.stop();
    this.stalled.stop();
    this.report.stop();
  }

  private flushed(socket: Socket, response: ServerResponse): void {
    const state = this.open.get(socket);
    if (state === undefined) return;
    state.unflushed.delete(response);
    // The client is reading: the next answer gets a whole writeWithinMs.
    this.stalled.delete(socket);
    this.track(socket, state);
  }

  /** Stalled, and since when, once every request in flight is answered and an answer is still not taken. */
  private track(socket: Socket, state: ConnectionState): void {
    const stalled = state.unflushed.size > 0 && state.unflushed.size === state.inFlight.size;
    if (!stalled) this.stalled.delete(socket);
    else if (!this.stalled.has(socket)) this.stalled.start(socket);
  }

  private wait(socket: Socket): void {
    if (this.closing) {
      this.close(socket);
      return;
    }
    this.stalled.delete(socket);
    this.waiting.start(socket);
  }

  /** Closes the oldest waiting connection, or else the oldest stalled one; false when there is none. */
  private makeRoom(): boolean {
    const victim = this.waiting.oldest() ?? this.stalled.oldest();
    if (victim === undefined) return false;
    this.close(victim, 'shed');
    return true;
  }

  /** Closes at once (destroy: the descriptor is freed now, whatever the client does), counted under `reason` when there is one. */
  private close(socket: Socket, reason?: ConnectionCloseReason): void {
    this.forget(socket);
    socket.destroy();
    if (reason === undefined) return;
    this.closed[reason] += 1;
    this.report.closed(reason);
  }

  private forget(socket: Socket): void {
    this.open.delete(socket);
    this.waiting.delete(socket);
    this.stalled.delete(socket);
  }
}

/** A slice ends after a request head's blank line, or after this many bytes (a head this long comes in several). */
const MAX_PARSE_SLICE_BYTES = 1024;
const END_OF_HEAD = Buffer.from('\r\n\r\n');

/**
 * Node's HTTP parser takes a whole read (up to 64 KiB) at once, and makes a request and a response for every
 * request in it before anything can stop it: some 1,800 for a read of pipelined GETs, measured at 35 ms of CPU
 * and a few MiB of memory each, also after the guard has closed the connection at the fifth; 512 such reads
 * in one turn of the event loop are 18 s during which the kubelet gets no answer. Fed one request head at a
 * time, the parser stops at the request that broke a bound.
 *
 * node:http's connection handling gives the socket one 'data' listener, which feeds its parser: it is taken
 * off and called with slices instead (a TCP stream may be cut anywhere, so the parser sees nothing new). A
 * 'data' listener of our own also switches the socket from the parser reading it natively to JavaScript reads,
 * each a Buffer: nothing to our handful of clients. Any other shape of socket (a Node that does it differently)
 * is left as it is: the bounds then hold the same, at that cost per read.
 *
 * Node pauses a connection whose answers pile up unread (backpressure); if bytes of the read are still
 * unparsed then, the client pipelines more than it reads: `pipelinesUnread` closes it.
 */
function feedParserInSlices(socket: Socket, pipelinesUnread: () => void): void {
  const listeners = socket.listeners('data');
  if (listeners.length !== 1) return;
  const parse = listeners[0] as (chunk: Buffer) => void;
  socket.removeListener('data', parse);
  socket.on('data', (chunk: Buffer) => {
    let offset = 0;
    while (offset < chunk.length && !socket.destroyed) {
      // Node's own backpressure flag for answers not taken (`_paused`, which socketOnData asserts on), not
      // isPaused(): Node also pauses a socket while a request body nobody reads fills its buffer, and resumes it
      // once the answer is written, with no client fault in that.
      if ((socket as Socket & { _paused?: boolean })._paused ?? socket.isPaused()) {
        pipelinesUnread();
        return;
      }
      const headEnd = chunk.indexOf(END_OF_HEAD, offset);
      const end = Math.min(headEnd === -1 ? chunk.length : headEnd + END_OF_HEAD.length, offset + MAX_PARSE_SLICE_BYTES);
      parse(chunk.subarray(offset, end));
      offset = end;
    }
  });
}

/**
 * Bytes of the answers written and not yet taken that go out before `response`'s; 0 while a request ahead of it
 * still awaits its answer (a held /shutdown): nothing behind that can be taken before it, whatever the client does.
 */
function unflushedAhead(state: ConnectionState, response: ServerResponse): number {
  const place = state.inFlight.get(response) ?? Infinity;
  let bytes = 0;
  for (const [earlier, earlierPlace] of state.inFlight) {
    if (earlierPlace >= place) continue;
    const size = state.unflushed.get(earlier);
    if (size === undefined) return 0;
    bytes += size;
  }
  return bytes;
}

/**
 * `render`'s result, shared by every call in the same turn of the event loop: the requests of one read
 * (pipelined), and those of the connections read in the same poll of the loop, get one rendering; a request
 * read in a later turn gets a new one, so that an answer never predates what happened before its request came.
 */
export function sharedPerTurn<T>(render: () => T): () => T {
  let current: { readonly value: T } | undefined;
  return () => {
    if (current === undefined) {
      current = { value: render() };
      // The check phase that follows this turn's poll: unref'd, it holds no close() and no exit.
      setImmediate(() => (current = undefined)).unref();
    }
    return current.value;
  };
}

/** A list with more values than this, none an object (Envoy's listeners by name: thousands in some), is a part rendered once per object. */
const SHARED_PART_MIN_ENTRIES = 32;

/**
 * JSON.stringify(value, null, 2), as chunks: a plain object or array of more than SHARED_PART_MIN_ENTRIES values,
 * none of them an object, is rendered once per object (and depth) and its bytes given to every answer that shows
 * the same object; the rest, a few dozen fields, is rendered for each. The drain's large parts (open connections by
 * listener, the listeners available and watched) are made anew at each poll and never changed after (readonly
 * in DrainSnapshot): each is rendered once per poll, and held only as long as the drain holds its object.
 * Anything but plain objects and arrays (a Date, a class instance) is left to JSON.stringify, whole.
 */
export class JsonParts {
  private readonly parts = new WeakMap<object, Map<string, Buffer>>();

  render(value: unknown): (string | Buffer)[] {
    const chunks: (string | Buffer)[] = [];
    let text = '';
    const part = (container: object, indent: string): void => {
      let byIndent = this.parts.get(container);
      let bytes = byIndent?.get(indent);
      if (bytes === undefined) {
        // JSON strings hold no raw line breaks: each one is the start of a line to indent.
        bytes = Buffer.from(JSON.stringify(container, null, 2).replaceAll('\n', `\n${indent}`));
        if (byIndent === undefined) this.parts.set(container, (byIndent = new Map()));
        byIndent.set(indent, bytes);
      }
      if (text !== '') chunks.push(text);
      text = '';
      chunks.push(bytes);
    };
    /** Writes `item` (JSON.stringify's rules for `key`); false when it has no JSON (undefined, a function, a symbol). */
    const write = (key: string, item: unknown, indent: string): boolean => {
      const current =
        typeof item === 'object' && item !== null && typeof (item as { toJSON?: unknown }).toJSON === 'function' ? (item as { toJSON: (key: string) => unknown }).toJSON(key) : item;
      if (typeof current !== 'object' || current === null || !isPlain(current)) {
        // JSON.stringify's own rules, toJSON included (called again, with the key '').
        const json = JSON.stringify(item, null, 2) as string | undefined;
        if (json === undefined) return false;
        text += json.replaceAll('\n', `\n${indent}`);
        return true;
      }
      if (this.parts.has(current) || isLargeLeaf(current, SHARED_PART_MIN_ENTRIES)) {
        part(current, indent);
        return true;
      }
      const inner = `${indent}  `;
      if (Array.isArray(current)) {
        if (current.length === 0) {
          text += '[]';
          return true;
        }
        text += '[';
        current.forEach((element: unknown, index) => {
          text += `${index === 0 ? '' : ','}\n${inner}`;
          if (!write(String(index), element, inner)) text += 'null';
        });
        text += `\n${indent}]`;
        return true;
      }
      let written = 0;
      for (const [name, field] of Object.entries(current)) {
        const before = text;
        text += `${written === 0 ? '{' : ','}\n${inner}${JSON.stringify(name)}: `;
        // Nothing to show (write changes nothing then): the key is taken back.
        if (write(name, field, inner)) written += 1;
        else text = before;
      }
      text += written === 0 ? '{}' : `\n${indent}}`;
      return true;
    };
    if (!write('', value, '')) return [];
    if (text !== '') chunks.push(text);
    return chunks;
  }
}

/** A plain object or an array: what JsonParts walks itself. */
function isPlain(value: object): boolean {
  if (Array.isArray(value)) return true;
  const prototype = Object.getPrototypeOf(value) as unknown;
  return prototype === Object.prototype || prototype === null;
}

/**
 * Whether `container` is a list of more than `bound` values, none of them an object (listeners by name, names of
 * listeners): a snapshot of a few dozen fields, some of them objects, is not (the walk stops at its first object).
 * Without listing the keys: a part of thousands of listeners is walked this way once, when first seen.
 */
function isLargeLeaf(container: object, bound: number): boolean {
  let count = 0;
  for (const name in container) {
    if (!Object.hasOwn(container, name)) continue;
    const entry = (container as Record<string, unknown>)[name];
    if (typeof entry === 'object' && entry !== null) return false;
    count += 1;
  }
  return count > bound;
}

function zeroCounts(): Record<ConnectionCloseReason, number> {
  return { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 0 };
}

/**
 * Sockets, each with the instant its clock started, oldest first (a Map keeps insertion order), and one timer,
 * for the oldest: the first to pass `limitMs`. Those that do are removed and handed to `expired`.
 */
class Deadlines {
  private readonly since = new Map<Socket, number>();
  private timer: NodeJS.Timeout | undefined;

  /** Deadlines on the sidecar's monotonic clock; the timer is Node's (libuv's monotonic clock too), unref'd. */
  constructor(
    private readonly limitMs: number,
    private readonly expired: (socket: Socket) => void,
    private readonly clock: Pick<Clock, 'now'>,
  ) {}

  get size(): number {
    return this.since.size;
  }

  has(socket: Socket): boolean {
    return this.since.has(socket);
  }

  oldest(): Socket | undefined {
    return this.since.keys().next().value;
  }

  sockets(): Socket[] {
    return [...this.since.keys()];
  }

  /** (Re)starts the socket's clock: it becomes the newest. */
  start(socket: Socket): void {
    this.since.delete(socket);
    this.since.set(socket, this.clock.now());
    this.arm();
  }

  delete(socket: Socket): void {
    this.since.delete(socket);
  }

  stop(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }

  private arm(): void {
    // Infinity: the bound is lifted (tests); setTimeout would take it as 1 ms.
    if (this.timer !== undefined || !Number.isFinite(this.limitMs)) return;
    const oldestSince = this.since.values().next();
    if (oldestSince.done === true) return;
    this.timer = setTimeout(() => this.fire(), Math.max(1, oldestSince.value + this.limitMs - this.clock.now()));
    this.timer.unref();
  }

  private fire(): void {
    this.timer = undefined;
    const cutoff = this.clock.now() - this.limitMs;
    for (const [socket, since] of this.since) {
      if (since > cutoff) break;
      this.since.delete(socket);
      this.expired(socket);
    }
    this.arm();
  }
}

/** The guard's closes, as warnings: the first at once, then one summary per period while they go on. */
class ClosedConnectionsLog {
  private readonly sinceLine = zeroCounts();
  private readonly throttle: LogThrottle;

  constructor(
    private readonly log: SidecarLog,
    private readonly limits: ConnectionLimits,
    periodMs: number,
    private readonly openConnections: () => number,
  ) {
    this.throttle = new LogThrottle(periodMs, () => this.flush());
  }

  closed(reason: ConnectionCloseReason): void {
    this.sinceLine[reason] += 1;
    this.throttle.noted();
  }

  stop(): void {
    this.throttle.stop();
  }

  private flush(): boolean {
    const counts = { ...this.sinceLine };
    if (CLOSE_REASONS.every((reason) => counts[reason] === 0)) return false;
    for (const reason of CLOSE_REASONS) this.sinceLine[reason] = 0;
    const { maxConnections, requestWithinMs, maxRequestsInFlight, maxUnflushedBytes, writeWithinMs } = this.limits;
    const why: Record<ConnectionCloseReason, string> = {
      shed: `to make room at the limit of ${maxConnections} connections`,
      timedOut: `for sending no request within ${requestWithinMs} ms`,
      refused: 'new, refused while every connection had a request awaiting its answer',
      tooManyInFlight: `for pipelining more than ${maxRequestsInFlight} requests`,
      slowReader: `for leaving more than ${maxUnflushedBytes} bytes of answers unread`,
      writeTimedOut: `for not taking an answer within ${writeWithinMs} ms`,
    };
    const parts = CLOSE_REASONS.filter((reason) => counts[reason] > 0).map((reason) => `${counts[reason]} ${why[reason]}`);
    this.log.warn(
      {
        event: 'connections_closed',
        shed: counts.shed,
        timed_out: counts.timedOut,
        refused: counts.refused,
        too_many_in_flight: counts.tooManyInFlight,
        slow_reader: counts.slowReader,
        write_timed_out: counts.writeTimedOut,
        open_connections: this.openConnections(),
        max_connections: maxConnections,
      },
      `closed connections: ${parts.join('; ')}`,
    );
    return true;
  }
}

/**
 * /shutdown and /wait calls refused for want of the token: counted, and logged as a LogThrottle does. The
 * first line comes at once (an operator must see a hook sent without the pod's token); a flood of strangers
 * then adds one line per period, with the count and the last caller.
 */
class RefusalLog {
  /** Cumulative, never reset. */
  total = 0;
  private sinceLine = 0;
  private last = { path: '', remote: '' };
  private readonly throttle: LogThrottle;

  constructor(
    private readonly log: SidecarLog,
    periodMs: number,
  ) {
    this.throttle = new LogThrottle(periodMs, () => this.flush());
  }

  refused(path: string, remote: string | undefined): void {
    this.total += 1;
    this.sinceLine += 1;
    this.last = { path, remote: remote ?? 'unknown' };
    this.throttle.noted();
  }

  stop(): void {
    this.throttle.stop();
  }

  private flush(): boolean {
    const count = this.sinceLine;
    if (count === 0) return false;
    this.sinceLine = 0;
    const { path, remote } = this.last;
    const fields = { event: 'shutdown_refused', path, remote, refused: count, total: this.total };
    const message =
      count === 1
        ? `${path} without the right token refused (from ${remote})`
        : `${count} calls of ${SIDECAR_PATHS.shutdown} or ${SIDECAR_PATHS.wait} without the right token refused since the last such line (${this.total} in all); the last: ${path} from ${remote}`;
    this.log.info(fields, message);
    return true;
  }
}

/** Compares digests, so that neither the token's content nor its length leaks through timing. */
/**
 * node:crypto is loaded at the first check, not at start: loading it (OpenSSL's tables included) costs the
 * sidecar 3-4 MiB of memory for a check that runs once per pod, when it is deleted.
 */
function bearerCheck(token: string | undefined): (header: string | undefined) => boolean {
  if (token === undefined) return () => true;
  let expected: Buffer | undefined;
  return (header) => {
    if (header === undefined) return false;
    const { createHash, timingSafeEqual } = process.getBuiltinModule('node:crypto');
    const digest = (text: string): Buffer => createHash('sha256').update(text).digest();
    expected ??= digest(`Bearer ${token}`);
    return timingSafeEqual(digest(header), expected);
  };
}

function answerWhenDrained(
  response: ServerResponse,
  outcome: Promise<DrainOutcome | undefined>,
  reply: Reply,
  log: SidecarLog,
  { waitWindowMs, asJson }: { readonly waitWindowMs: number; readonly asJson: boolean },
): void {
  outcome.then(
    (result) => {
      if (result === undefined) {
        // /wait with no drain: the container may stop (or restart) at once, Envoy untouched.
        reply(response, 200, 'text/plain', `no drain started within ${waitWindowMs} ms: nothing to wait for, Envoy left serving\n`);
        return;
      }
      const status = result.state === 'drained' ? 200 : 503;
      // The kubelet reads only the status; a program that asks for JSON gets the whole outcome (the lag above all).
      if (asJson) reply(response, status, 'application/json', `${JSON.stringify({ ...result, description: describeOutcome(result) })}\n`);
      else reply(response, status, 'text/plain', `${describeOutcome(result)}\n`);
    },
    (error: unknown) => {
      log.error({ event: 'drain_failed', error: String(error) }, 'the drain failed unexpectedly');
      reply(response, 500, 'text/plain', `drain failed: ${String(error)}\n`);
    },
  );
}
