/**
 * The sidecar's HTTP edge (node:http, no framework: this process should stay small). Routes only
 * translate between HTTP and the Drain; every decision lives there.
 */
import { readFileSync } from 'node:fs';
import type { ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { SIDECAR_PATHS } from '../config/endpoints.js';
import { UserFacingError } from '../errors.js';
import { describeOutcome, type DrainOutcome } from './drain.js';
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

export interface DrainServer {
  /** The address bound: `::` for every interface of both families, `0.0.0.0` where IPv6 is off. */
  readonly address: string;
  readonly port: number;
  /** Open connections now: `busy` have a request in progress, `waiting` have none (see ConnectionLimits). */
  readonly connections: { readonly waiting: number; readonly busy: number };
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
/** How long close() lets in-flight responses finish before cutting their connections. */
const CLOSE_GRACE_MS = 1_000;

/**
 * How the server keeps its port usable when something holds connections open without asking anything
 * (a port scanner, a broken client, a flood): every file descriptor such a connection holds is one the
 * kubelet's /shutdown and probes may not get, and past the process's open-file limit Node resets new
 * connections as it accepts them.
 */
export interface ConnectionLimits {
  /**
   * A connection must deliver a complete request head within this long of opening, or of its previous
   * answer (keep-alive); otherwise it is closed. A request being answered (a held /shutdown) is never cut.
   */
  readonly requestWithinMs: number;
  /**
   * Open connections at most. At the limit a new connection still gets served: it closes the connection
   * that has waited longest without a request in progress. Only when every connection has a request in
   * progress is the new one closed.
   */
  readonly maxConnections: number;
}

/** A kubelet, curl or Prometheus sends its request head within milliseconds of connecting; 5 s leaves room for a loaded node. */
const REQUEST_HEAD_TIMEOUT_MS = 5_000;
/** Legitimate clients are a handful (probes, two preStop hooks, a scrape): the limit only bounds descriptors and memory. */
const MAX_CONNECTIONS_CAP = 512;
const MIN_CONNECTIONS = 8;
/** Descriptors left for everything but served connections: stdio, epoll, the admin client's sockets, libuv's own (21 at rest, measured). */
const RESERVED_DESCRIPTORS = 64;

/** The limits for this process: at most 512 connections, fewer when the open-file limit is below 576. */
export function defaultConnectionLimits(openFilesLimit: number | undefined = openFilesSoftLimit()): ConnectionLimits {
  const budget = openFilesLimit === undefined ? MAX_CONNECTIONS_CAP : openFilesLimit - RESERVED_DESCRIPTORS;
  return {
    requestWithinMs: REQUEST_HEAD_TIMEOUT_MS,
    maxConnections: Math.max(MIN_CONNECTIONS, Math.min(MAX_CONNECTIONS_CAP, budget)),
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

export async function startDrainServer(options: {
  readonly drain: DrainEndpoints;
  /** How long GET /wait waits for a drain to start. */
  readonly waitWindowMs: number;
  /** Empty: every interface, IPv4 and IPv6 (Node binds `::` accepting v4-mapped, or `0.0.0.0` without IPv6). */
  readonly host: string;
  readonly port: number;
  readonly log: SidecarLog;
  /** When set, /shutdown needs "Authorization: Bearer <token>": nobody else in the cluster may drain Envoy. */
  readonly shutdownToken?: string | undefined;
  /** Prometheus exposition for /metrics. */
  readonly metrics?: () => Promise<{ readonly contentType: string; readonly body: string }>;
  /** Default: defaultConnectionLimits() (tests shorten them). */
  readonly connectionLimits?: ConnectionLimits;
}): Promise<DrainServer> {
  const { drain, log } = options;
  const authorized = bearerCheck(options.shutdownToken);
  const limits = options.connectionLimits ?? defaultConnectionLimits();
  const guard = new ConnectionGuard(limits, log);
  const server = http.createServer({ requestTimeout: REQUEST_RECEIVE_TIMEOUT_MS }, (request, response) => {
    guard.requestStarted(request.socket);
    // 'close' comes once the answer is written, or when the client gave up: either way nothing is in progress.
    response.once('close', () => guard.requestEnded(request.socket));
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
      case SIDECAR_PATHS.drain:
        reply(response, 200, 'application/json', `${JSON.stringify(drain.snapshot(), null, 2)}\n`);
        return;
      case SIDECAR_PATHS.metrics:
        if (options.metrics === undefined) break;
        options.metrics().then(
          ({ contentType, body }) => reply(response, 200, contentType, body),
          (error: unknown) => reply(response, 500, 'text/plain', `metrics failed: ${String(error)}\n`),
        );
        return;
      case SIDECAR_PATHS.shutdown:
      case SIDECAR_PATHS.wait:
        if (!authorized(request.headers.authorization)) {
          log.info({ event: 'shutdown_refused', path, remote: request.socket.remoteAddress }, `${path} without the right token refused`);
          reply(response, 401, 'text/plain', 'a valid "Authorization: Bearer <token>" header is required\n', {
            'www-authenticate': 'Bearer realm="shutdown-manager"',
          });
          return;
        }
        answerWhenDrained(response, path === SIDECAR_PATHS.shutdown ? drain.shutdown() : drain.wait(options.waitWindowMs), log, options.waitWindowMs);
        return;
    }
    reply(response, 404, 'text/plain', `no such path; try ${Object.values(SIDECAR_PATHS).join(', ')}\n`);
  });
  // Node's default keep-alive of 5 s would hold the process after close(); kubelet probes open a new connection each time anyway.
  server.keepAliveTimeout = 1_000;
  // Registered after http's own listener: the socket already has its parser, and may be closed here.
  server.on('connection', (socket: Socket) => guard.accepted(socket));

  await new Promise<void>((resolve, reject) => {
    const onError = (error: NodeJS.ErrnoException): void => reject(new ServeError(options.host, options.port, error));
    server.once('error', onError);
    const listening = (): void => {
      server.off('error', onError);
      resolve();
    };
    // No host is how Node listens on every interface of both families; '::' would fail where IPv6 is off.
    if (options.host === '') server.listen(options.port, listening);
    else server.listen(options.port, options.host, listening);
  });
  const { address, port } = server.address() as AddressInfo;
  log.info(
    { event: 'connection_limits', max_connections: limits.maxConnections, request_within_ms: limits.requestWithinMs },
    `serving at most ${limits.maxConnections} connections; each must send its request within ${limits.requestWithinMs} ms`,
  );

  return {
    address,
    port,
    get connections() {
      return guard.counts;
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
      }
    },
  };
}

/** At most one warning per period about connections the guard closed: a flood must not flood the log too. */
const GUARD_REPORT_EVERY_MS = 10_000;

type GuardAction = 'shed' | 'timedOut' | 'refused';

/**
 * Enforces ConnectionLimits. Connections are either waiting (no request in progress: silent since they
 * opened, sending a head slowly, or idle after an answer) or busy (a request received and not answered
 * yet). Only waiting connections are ever closed: when they have waited too long, or, oldest first, to
 * make room for a new connection at the limit.
 */
class ConnectionGuard {
  /** Waiting connections and since when (performance.now()), oldest first: a Map keeps insertion order. */
  private readonly waiting = new Map<Socket, number>();
  /** Busy connections and their requests in progress (pipelined requests can queue on one connection). */
  private readonly busy = new Map<Socket, number>();
  private readonly closedSinceReport: Record<GuardAction, number> = { shed: 0, timedOut: 0, refused: 0 };
  private expiryTimer: NodeJS.Timeout | undefined;
  private reportTimer: NodeJS.Timeout | undefined;
  private closing = false;

  constructor(
    private readonly limits: ConnectionLimits,
    private readonly log: SidecarLog,
  ) {}

  get counts(): { readonly waiting: number; readonly busy: number } {
    return { waiting: this.waiting.size, busy: this.busy.size };
  }

  accepted(socket: Socket): void {
    socket.once('close', () => {
      this.waiting.delete(socket);
      this.busy.delete(socket);
    });
    if (this.waiting.size + this.busy.size >= this.limits.maxConnections && !this.shedOldestWaiting()) {
      // Every connection has a request in progress: the new one waits for none of them, and the limit holds.
      socket.destroy();
      this.note('refused');
      return;
    }
    this.wait(socket);
  }

  requestStarted(socket: Socket): void {
    this.waiting.delete(socket);
    this.busy.set(socket, (this.busy.get(socket) ?? 0) + 1);
  }

  requestEnded(socket: Socket): void {
    const inProgress = (this.busy.get(socket) ?? 1) - 1;
    if (inProgress > 0) {
      this.busy.set(socket, inProgress);
      return;
    }
    this.busy.delete(socket);
    if (!socket.destroyed) this.wait(socket);
  }

  /** For close(): waiting connections have nothing to be answered; later ones are closed as they become waiting. */
  closeWaiting(): void {
    this.closing = true;
    for (const socket of this.waiting.keys()) socket.destroy();
    this.waiting.clear();
  }

  stop(): void {
    clearTimeout(this.expiryTimer);
    clearTimeout(this.reportTimer);
    this.expiryTimer = this.reportTimer = undefined;
  }

  private wait(socket: Socket): void {
    if (this.closing) {
      socket.destroy();
      return;
    }
    this.waiting.delete(socket); // re-inserted last: it is now the newest waiting connection
    this.waiting.set(socket, performance.now());
    this.armExpiry();
  }

  private shedOldestWaiting(): boolean {
    const oldest = this.waiting.keys().next();
    if (oldest.done === true) return false;
    this.waiting.delete(oldest.value);
    oldest.value.destroy();
    this.note('shed');
    return true;
  }

  /** One timer, for the oldest waiting connection: its deadline comes first. */
  private armExpiry(): void {
    if (this.expiryTimer !== undefined) return;
    const oldestSince = this.waiting.values().next();
    if (oldestSince.done === true) return;
    const delay = Math.max(1, oldestSince.value + this.limits.requestWithinMs - performance.now());
    this.expiryTimer = setTimeout(() => this.expire(), delay);
    this.expiryTimer.unref();
  }

  private expire(): void {
    this.expiryTimer = undefined;
    const cutoff = performance.now() - this.limits.requestWithinMs;
    for (const [socket, since] of this.waiting) {
      if (since > cutoff) break;
      this.waiting.delete(socket);
      socket.destroy();
      this.note('timedOut');
    }
    this.armExpiry();
  }

  /** Warns at the first close, then sums up every GUARD_REPORT_EVERY_MS while closes go on. */
  private note(action: GuardAction): void {
    this.closedSinceReport[action] += 1;
    if (this.reportTimer === undefined) this.report();
  }

  private report(): void {
    const { shed, timedOut, refused } = this.closedSinceReport;
    if (shed + timedOut + refused === 0) {
      this.reportTimer = undefined;
      return;
    }
    this.closedSinceReport.shed = this.closedSinceReport.timedOut = this.closedSinceReport.refused = 0;
    const { maxConnections, requestWithinMs } = this.limits;
    this.log.warn(
      {
        event: 'connections_closed',
        shed,
        timed_out: timedOut,
        refused,
        open_connections: this.waiting.size + this.busy.size,
        max_connections: maxConnections,
      },
      `closed connections without a request in progress: ${shed} to make room at the limit of ${maxConnections}, ` +
        `${timedOut} after ${requestWithinMs} ms; refused ${refused} new ones while every connection had a request in progress`,
    );
    this.reportTimer = setTimeout(() => this.report(), GUARD_REPORT_EVERY_MS);
    this.reportTimer.unref();
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
  log: SidecarLog,
  waitWindowMs: number,
): void {
  outcome.then(
    (result) => {
      if (result === undefined) {
        // /wait with no drain: the container may stop (or restart) at once, Envoy untouched.
        reply(response, 200, 'text/plain', `no drain started within ${waitWindowMs} ms: nothing to wait for, Envoy left serving\n`);
        return;
      }
      const status = result.state === 'drained' ? 200 : 503;
      reply(response, status, 'text/plain', `${describeOutcome(result)}\n`);
    },
    (error: unknown) => {
      log.error({ event: 'drain_failed', error: String(error) }, 'the drain failed unexpectedly');
      reply(response, 500, 'text/plain', `drain failed: ${String(error)}\n`);
    },
  );
}

function reply(
  response: ServerResponse,
  status: number,
  contentType: string,
  body: string,
  headers: Record<string, string> = {},
): void {
  // The caller may have given up (a kubelet hook abandoned at the grace period): nothing to answer.
  if (response.destroyed || response.writableEnded) return;
  const type = contentType.includes('charset') ? contentType : `${contentType}; charset=utf-8`;
  response.writeHead(status, { 'content-type': type, 'cache-control': 'no-store', ...headers });
  response.end(response.req.method === 'HEAD' ? undefined : body);
}
