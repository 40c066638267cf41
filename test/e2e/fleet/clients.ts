/**
 * Client kinds: what the traffic through the load balancer is made of. A kind is a plug-in: `run` drives one
 * client until the signal aborts, getting every new connection from `context.dial` (the LB picks the pod,
 * an LB never moves a connection) and recording into `context.tally`. HTTP/1.1 keep-alive and raw TCP
 * are here; HTTP/2 request/response, a gRPC long server stream and WebSocket fit the same interface
 * (dial a socket, then `http2.connect(url, { createConnection: () => socket })` or
 * `new WebSocket(url, { createConnection: () => socket })`), once the emulator serves them.
 */
import type net from 'node:net';
import type { Connection } from './load-balancer.js';
import { pause } from './time.js';

/** What one kind of client saw during a rollout. */
export class Tally {
  /** Requests answered (HTTP), or echo round trips completed (TCP). */
  ok = 0;
  /** Requests that failed (HTTP), or connection attempts that failed (every kind): the rollout promise is zero. */
  failed = 0;
  /** Connections (or streams) the server ended while they were in use or open without a graceful close: Envoy's SIGTERM or SIGKILL. */
  cut = 0;
  /** A few failure reasons, for the report. */
  readonly samples: string[] = [];

  fail(reason: string): void {
    this.failed += 1;
    if (this.samples.length < 5) this.samples.push(reason);
  }
}

export interface ClientContext {
  /** A new connection to one of the pod's Envoy listeners ('http', 'tcp'…), through the load balancer. */
  readonly dial: (listener: string) => Promise<Connection>;
  readonly tally: Tally;
  /** Aborted when the rollout is over: the client closes its connection and returns. */
  readonly signal: AbortSignal;
  /** Real milliseconds between two requests (or echoes) of one client. */
  readonly thinkMs: number;
  /** When set, the pause before each next request instead of `thinkMs` (idle clients: a random 30-60 s of the fleet's time). */
  readonly nextThinkMs?: () => number;
  /** The L7 load balancer, when the fleet has one (see l7-load-balancer.ts): clients that talk to it, not to Envoy. */
  readonly l7?: L7Frontend;
}

/** A request/response client's view of an L7 load balancer: it answers each request, a 502 when its backend failed it. */
export interface L7Frontend {
  /** One request through the LB: the status the client gets (502/503 from the LB itself when the backend hop failed). */
  request(path: string): Promise<{ status: number; reason?: string }>;
}

export interface ClientKind {
  /** Shown in the report, e.g. "HTTP/1.1 keep-alive". */
  readonly name: string;
  /** What `failed` counts for this kind, e.g. "requests". */
  readonly failureUnit: string;
  /** Runs one client until `context.signal` aborts; must leave no socket or timer behind. */
  run(context: ClientContext): Promise<void>;
}

/** Waits for the next `think` pause; false once the rollout is over. */
export async function goOn(context: ClientContext): Promise<boolean> {
  await pause(context.nextThinkMs?.() ?? context.thinkMs, context.signal);
  return !context.signal.aborted;
}

/** Dials through the LB; a failed attempt is recorded and undefined returned (the client retries after a pause). */
export async function dialOrFail(context: ClientContext, listener: string): Promise<Connection | undefined> {
  try {
    return await context.dial(listener);
  } catch (error) {
    context.tally.fail(`connect: ${error instanceof Error ? error.message : String(error)}`);
    return undefined;
  }
}

/** One HTTP/1.1 response, as much as the client needs of it. */
export interface Http1Response {
  readonly status: number;
  /** The server asked to close the connection after it (Envoy draining). */
  readonly closing: boolean;
}

/**
 * An HTTP/1.1 connection that sends one request at a time and reads Content-Length responses (the
 * emulator's). It knows whether the server ended it gracefully (after a `Connection: close` response).
 */
export class Http1Connection {
  private buffer = Buffer.alloc(0);
  private waiting: { resolve: (response: Http1Response) => void; reject: (error: Error) => void } | undefined;
  private closedByServerGracefully = false;
  private closedByClient = false;
  closed = false;
  /** Whether the server closed it without a `Connection: close` first (a cut). */
  cut = false;

  constructor(private readonly socket: net.Socket, private readonly path: string) {
    socket.on('data', (chunk: Buffer) => this.onData(chunk));
    socket.on('error', () => undefined); // a reset ends as 'close', which decides
    socket.on('close', () => this.onClose());
  }

  request(timeoutMs: number): Promise<Http1Response> {
    if (this.closed) return Promise.reject(new Error('connection already closed'));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => this.fail(new Error(`no response within ${timeoutMs} ms`)), timeoutMs);
      this.waiting = {
        resolve: (response) => (clearTimeout(timer), resolve(response)),
        reject: (error) => (clearTimeout(timer), reject(error)),
      };
      this.socket.write(`GET ${this.path} HTTP/1.1\r\nhost: fleet\r\n\r\n`);
    });
  }

  close(): void {
    this.closedByClient = true;
    this.socket.destroy();
  }

  private onData(chunk: Buffer): void {
    this.buffer = Buffer.concat([this.buffer, chunk]);
    const headEnd = this.buffer.indexOf('\r\n\r\n');
    if (headEnd < 0) return;
    const head = this.buffer.subarray(0, headEnd).toString('latin1');
    const length = Number(/\r\ncontent-length:\s*(\d+)/i.exec(head)?.[1] ?? 0);
    if (this.buffer.length < headEnd + 4 + length) return;
    this.buffer = this.buffer.subarray(headEnd + 4 + length);
    const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(head)?.[1] ?? 0);
    const closing = /\r\nconnection:\s*close/i.test(head);
    if (closing) this.closedByServerGracefully = true;
    const waiting = this.waiting;
    this.waiting = undefined;
    waiting?.resolve({ status, closing });
  }

  private onClose(): void {
    this.closed = true;
    this.cut = !this.closedByServerGracefully && !this.closedByClient;
    this.fail(new Error('connection closed before the response'));
  }

  private fail(error: Error): void {
    const waiting = this.waiting;
    this.waiting = undefined;
    if (waiting !== undefined) {
      this.socket.destroy();
      waiting.reject(error);
    }
  }
}

export interface Http1Options {
  /** Path asked for: `/delay/<ms>` makes Envoy answer later (a slow upstream: requests in flight at SIGTERM). */
  readonly path?: string;
  readonly requestTimeoutMs?: number;
  /**
   * The client closes its connection after this many requests and opens a new one through the LB: the
   * churn of real traffic (clients coming and going, pools recycling connections) that puts new
   * connections on a pod the LB has not deregistered yet. Default 20; Infinity keeps connections forever.
   */
  readonly requestsPerConnection?: number;
  /** The kind's name in reports (default "HTTP/1.1 keep-alive"): idle clients are a kind of their own. */
  readonly name?: string;
}

/**
 * HTTP/1.1 keep-alive request/response: one connection reused until Envoy answers `Connection: close`
 * (draining) or the connection is gone, then a new one through the LB. A request that fails is a failure;
 * a connection closed under the client without `Connection: close` (idle or not) is a cut.
 */
export function http1KeepAlive(options: Http1Options = {}): ClientKind {
  const path = options.path ?? '/';
  const timeoutMs = options.requestTimeoutMs ?? 5_000;
  const requestsPerConnection = options.requestsPerConnection ?? 20;
  return {
    name: options.name ?? 'HTTP/1.1 keep-alive',
    failureUnit: 'requests',
    async run(context) {
      let connection: Http1Connection | undefined;
      let sentOnConnection = 0;
      try {
        do {
          if (connection?.closed === true) {
            if (connection.cut) context.tally.cut += 1;
            connection = undefined;
          }
          if (connection === undefined) {
            const dialled = await dialOrFail(context, 'http');
            if (dialled === undefined) continue;
            connection = new Http1Connection(dialled.socket, path);
            sentOnConnection = 0;
          }
          try {
            const response = await connection.request(timeoutMs);
            if (response.status === 200) context.tally.ok += 1;
            else context.tally.fail(`HTTP ${response.status}`);
            sentOnConnection += 1;
            // The client's own close comes after a complete response: never a cut.
            if (response.closing || sentOnConnection >= requestsPerConnection) connection.close();
          } catch (error) {
            context.tally.fail(`request: ${error instanceof Error ? error.message : String(error)}`);
          }
        } while (await goOn(context));
      } finally {
        connection?.close();
      }
    },
  };
}

/**
 * Raw TCP through Envoy's tcp_proxy (an echo upstream): a long-lived connection sending a line now and then
 * and reading it back. Envoy's drain never ends such a connection (tcp_proxy has no drain close): only the
 * client or Envoy's exit does. A connection the server ended is a cut; the client then reconnects via the LB.
 */
export function rawTcp(): ClientKind {
  return {
    name: 'TCP (long-lived echo)',
    failureUnit: 'connects',
    async run(context) {
      let socket: net.Socket | undefined;
      let ended = false;
      try {
        do {
          if (socket !== undefined && ended) {
            context.tally.cut += 1;
            socket = undefined;
          }
          if (socket === undefined) {
            const dialled = await dialOrFail(context, 'tcp');
            if (dialled === undefined) continue;
            socket = dialled.socket;
            ended = false;
            socket.on('error', () => undefined);
            socket.once('close', () => (ended = true));
          }
          if (await echoes(socket)) context.tally.ok += 1;
        } while (await goOn(context));
      } finally {
        socket?.destroy();
      }
    },
  };
}

/** Sends a line and waits (bounded) for it to come back; false if the connection ended meanwhile. */
function echoes(socket: net.Socket): Promise<boolean> {
  return new Promise((resolve) => {
    const line = `ping ${Math.random()}\n`;
    let received = '';
    const finish = (ok: boolean): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      resolve(ok);
    };
    const onData = (chunk: Buffer): void => {
      received += chunk.toString('latin1');
      if (received.includes(line)) finish(true);
    };
    const onClose = (): void => finish(false);
    const timer = setTimeout(() => finish(false), 5_000);
    socket.on('data', onData);
    socket.once('close', onClose);
    if (socket.destroyed) return finish(false);
    socket.write(line);
  });
}

/**
 * A client of an L7 load balancer (context.l7): one request at a time through it, whatever connection the LB
 * uses to Envoy. A request the LB answers with anything but 200 (a 502 when its connection to Envoy failed,
 * a 503 when it had no target) is a failure. `name` tells busy clients from idle ones in reports.
 */
export function l7Client(options: { readonly name: string }): ClientKind {
  return {
    name: options.name,
    failureUnit: 'requests',
    async run(context) {
      const l7 = context.l7;
      if (l7 === undefined) throw new Error(`${options.name}: the fleet has no L7 load balancer`);
      do {
        const answer = await l7.request('/');
        if (answer.status === 200) context.tally.ok += 1;
        else context.tally.fail(`HTTP ${answer.status}${answer.reason === undefined ? '' : `: ${answer.reason}`}`);
      } while (await goOn(context));
    },
  };
}
