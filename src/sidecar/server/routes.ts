/**
 * What each path of the sidecar's port answers. Routes only translate between HTTP and the Drain; every
 * decision lives there. Answers are written through the ConnectionGuard (answerer), which may refuse to queue
 * one for a client that leaves too much unread.
 */
import type { IncomingMessage, ServerResponse } from 'node:http';
import { SIDECAR_PATHS } from '../../config/endpoints.js';
import { describeOutcome, type DrainOutcome } from '../drain-outcome.js';
import type { SidecarLog } from '../log.js';
import type { ConnectionGuard } from './connection-guard.js';
import { JsonParts, sharedPerTurn } from './render-cache.js';
import { bearerCheck, type RefusalLog } from './shutdown-token.js';

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

/** What the routes answer from, and with. */
export interface RouteOptions {
  readonly drain: DrainEndpoints;
  /** How long GET /wait waits for a drain to start. */
  readonly waitWindowMs: number;
  readonly log: SidecarLog;
  /** When set, /shutdown needs "Authorization: Bearer <token>": nobody else in the cluster may drain Envoy. */
  readonly shutdownToken?: string | undefined;
  /**
   * Prometheus exposition for /metrics. Called at most once a turn of the event loop, its answer shared by every
   * /metrics request answered in that turn (see sharedPerTurn).
   */
  readonly metrics?: () => Promise<{ readonly contentType: string; readonly body: string }>;
}

/**
 * An answer's body: text, bytes, or chunks of both written one after the other. A Buffer is written as it is,
 * not copied: one rendering of a large part can be queued on many connections for the memory of one.
 */
export type Body = string | Buffer | readonly (string | Buffer)[];

/** Writes an answer: status, content type, body, extra headers. */
export type Reply = (response: ServerResponse, status: number, contentType: string, body: Body, headers?: Record<string, string>) => void;

/**
 * Every route of the server, answering through `reply`. /drain and /metrics, whose answers grow with Envoy's
 * listeners, are rendered once the requests of the read that brought them are parsed, only for a connection
 * still open and within its bound on unread answers (`wanted`), and at most once a turn of the event loop,
 * shared by every request answered in it (sharedPerTurn); /drain's parts as large as the listeners are rendered
 * once per poll (JsonParts). Measured before (issue 28): 100 connections pipelining /metrics without reading,
 * against an Envoy of 3,000 listeners, had the sidecar render 190 KB (26 ms of CPU) for every request, those of
 * connections already closed included: /healthz timed out and /shutdown answered seconds after its deadline.
 */
export function router(
  options: RouteOptions,
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
    const path = requestPath(request);
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
      case SIDECAR_PATHS.wait: {
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
    }
    reply(response, 404, 'text/plain', `no such path; try ${Object.values(SIDECAR_PATHS).join(', ')}\n`);
  };
}

/** What a status line and our headers take, about: counted with each answer's body against maxUnflushedBytes. */
const ANSWER_HEAD_BYTES = 256;

/** Replies through the guard, which may refuse to queue an answer for a client that leaves too much unread. */
export function answerer(guard: Pick<ConnectionGuard, 'answering'>): Reply {
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

/** The path a request asks for, without its query: what the routes are matched on. */
export function requestPath(request: IncomingMessage): string | undefined {
  return (request.url ?? '/').split('?', 1)[0];
}
