/**
 * The sidecar's HTTP edge (node:http, no framework: this process should stay small): listening, and closing.
 * What each path answers is in server/routes.ts; the ConnectionGuard (server/connection-guard.ts) keeps the
 * port answering the kubelet whatever other clients of the port do, within the bounds of server/connection-limits.ts;
 * server/render-cache.ts renders the answers that grow with Envoy's listeners.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { systemClock, type Clock } from '../clock.js';
import { UserFacingError } from '../errors.js';
import { ConnectionGuard, type ConnectionCloseReason } from './server/connection-guard.js';
import { defaultConnectionLimits, logLimits, type ConnectionLimits } from './server/connection-limits.js';
import { answerer, router, type RouteOptions } from './server/routes.js';
import { RefusalLog } from './server/shutdown-token.js';

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

/** How often a burst of events may add a line to the log (see LogThrottle in log-throttle.ts). */
export interface ReportPeriods {
  /** Connections closed by the guard: a flood of them must not flood the log too. */
  readonly connectionsClosedMs: number;
  /** /shutdown and /wait refused for want of the token: 20,000 calls were 20,000 lines. */
  readonly refusalsMs: number;
}

const REPORT_PERIODS: ReportPeriods = { connectionsClosedMs: 10_000, refusalsMs: 60_000 };

export interface DrainServerOptions extends RouteOptions {
  /** Empty: every interface, IPv4 and IPv6 (Node binds `::` accepting v4-mapped, or `0.0.0.0` without IPv6). */
  readonly host: string;
  readonly port: number;
  /** Over defaultConnectionLimits(): tests shorten them, or lift one (Infinity) to show what it prevents. */
  readonly connectionLimits?: Partial<ConnectionLimits>;
  /** Over REPORT_PERIODS: tests shorten them. */
  readonly reportPeriods?: Partial<ReportPeriods>;
  /** The sidecar's one clock (monotonic now() for the connections' deadlines); default the system clock. */
  readonly clock?: Pick<Clock, 'now'>;
  /**
   * Undefined when a request can be routed at once; otherwise it is routed once this settles (answered 500 if it
   * rejects). The sidecar holds what needs its drain until the drain's code is loaded (engine-loader.ts).
   */
  readonly hold?: (request: IncomingMessage) => Promise<unknown> | undefined;
}

export async function startDrainServer(options: DrainServerOptions): Promise<DrainServer> {
  const { log } = options;
  const limits = { ...defaultConnectionLimits(), ...options.connectionLimits };
  const periods = { ...REPORT_PERIODS, ...options.reportPeriods };
  const guard = new ConnectionGuard(limits, log, periods.connectionsClosedMs, options.clock ?? systemClock);
  const refusals = new RefusalLog(log, periods.refusalsMs);
  const reply = answerer(guard);
  const route = router(options, reply, refusals, (response) => guard.wanted(response));
  const onRequest = (request: IncomingMessage, response: ServerResponse): void => {
    // False for requests parsed after the guard closed their connection (the rest of a pipelined read): nobody to answer.
    if (!guard.requestStarted(request.socket, response)) return;
    // 'close' comes once the answer is written, or when the client gave up: either way nothing is in progress.
    response.once('close', () => guard.requestEnded(request.socket, response));
    const held = options.hold?.(request);
    if (held === undefined) route(request, response);
    else held.then(() => route(request, response), (error: unknown) => reply(response, 500, 'text/plain', `not ready to answer: ${String(error)}\n`));
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
