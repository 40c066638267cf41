/**
 * The sidecar's HTTP edge (node:http, no framework: this process should stay small). Routes only
 * translate between HTTP and the Drain; every decision lives there.
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import http from 'node:http';
import type { AddressInfo } from 'node:net';
import { SIDECAR_PATHS } from '../config/endpoints.js';
import { describeOutcome, type DrainOutcome } from './drain.js';
import type { SidecarLog } from './log.js';

/** The server could not listen: says where, and what to check. */
export class ServeError extends Error {
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
}

export interface DrainServer {
  /** The address bound: `::` for every interface of both families, `0.0.0.0` where IPv6 is off. */
  readonly address: string;
  readonly port: number;
  /**
   * Stops listening and resolves once every connection is closed. Held /shutdown requests are answered
   * first (interrupt the drain before, so that they have an answer); stragglers are cut after a second.
   */
  close(): Promise<void>;
}

/** Receiving a request must be quick (they have no body); answering /shutdown may take as long as the drain. */
const REQUEST_RECEIVE_TIMEOUT_MS = 30_000;
/** How long close() lets in-flight responses finish before cutting their connections. */
const CLOSE_GRACE_MS = 1_000;

export async function startDrainServer(options: {
  readonly drain: DrainEndpoints;
  readonly minOpenConnections: number;
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
}): Promise<DrainServer> {
  const { drain, minOpenConnections, log } = options;
  const authorized = bearerCheck(options.shutdownToken);
  const server = http.createServer({ requestTimeout: REQUEST_RECEIVE_TIMEOUT_MS }, (request, response) => {
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
        answerWhenDrained(response, path === SIDECAR_PATHS.shutdown ? drain.shutdown() : drain.wait(options.waitWindowMs), minOpenConnections, log, options.waitWindowMs);
        return;
    }
    reply(response, 404, 'text/plain', `no such path; try ${Object.values(SIDECAR_PATHS).join(', ')}\n`);
  });
  // Node's default keep-alive of 5 s would hold the process after close(); kubelet probes open a new connection each time anyway.
  server.keepAliveTimeout = 1_000;

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

  return {
    address,
    port,
    close: async () => {
      const closed = new Promise<void>((resolve) => server.close(() => resolve()));
      // A keep-alive socket becomes idle once its response is written: sweep until none is left.
      const sweeper = setInterval(() => server.closeIdleConnections(), 20);
      const cutoff = setTimeout(() => server.closeAllConnections(), CLOSE_GRACE_MS);
      server.closeIdleConnections();
      try {
        await closed;
      } finally {
        clearInterval(sweeper);
        clearTimeout(cutoff);
      }
    },
  };
}

/** Compares digests, so that neither the token's content nor its length leaks through timing. */
function bearerCheck(token: string | undefined): (header: string | undefined) => boolean {
  if (token === undefined) return () => true;
  const digest = (text: string): Buffer => createHash('sha256').update(text).digest();
  const expected = digest(`Bearer ${token}`);
  return (header) => header !== undefined && timingSafeEqual(digest(header), expected);
}

function answerWhenDrained(
  response: http.ServerResponse,
  outcome: Promise<DrainOutcome | undefined>,
  minOpenConnections: number,
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
      reply(response, status, 'text/plain', `${describeOutcome(result, minOpenConnections)}\n`);
    },
    (error: unknown) => {
      log.error({ event: 'drain_failed', error: String(error) }, 'the drain failed unexpectedly');
      reply(response, 500, 'text/plain', `drain failed: ${String(error)}\n`);
    },
  );
}

function reply(
  response: http.ServerResponse,
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
