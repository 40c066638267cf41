/**
 * The client kinds over HTTP/2 and WebSocket, as real clients behave (node:http2, the `ws` library): HTTP/2
 * request/response on one multiplexed connection that moves to a new one on GOAWAY (new requests on a new
 * connection, streams in flight finish on the old one: RFC 9113 §6.8), a gRPC-style long server stream that
 * is re-opened on a new connection once it ends or its connection goes away, and a WebSocket that sends a
 * message now and then and reconnects through the LB when the connection ends. Each gets its connection from
 * the LB (`context.dial`), like the kinds in clients.ts.
 */
import http2 from 'node:http2';
import WebSocket from 'ws';
import { dialOrFail, goOn, type ClientContext, type ClientKind } from './clients.js';
import type { Connection } from './load-balancer.js';

const REQUEST_TIMEOUT_MS = 5_000;

/** An HTTP/2 session on a socket the LB chose, and whether the server said it is going away. */
interface H2Session {
  readonly session: http2.ClientHttp2Session;
  /** Set by a GOAWAY (graceful): no new stream may start on it. */
  goingAway: boolean;
  /** Set when the session ended without a GOAWAY first: a cut. */
  cut: boolean;
  closed: boolean;
}

async function openH2(context: ClientContext): Promise<H2Session | undefined> {
  const connection: Connection | undefined = await dialOrFail(context, 'http');
  if (connection === undefined) return undefined;
  const session = http2.connect('http://fleet', { createConnection: () => connection.socket });
  const state: H2Session = { session, goingAway: false, cut: false, closed: false };
  session.on('error', () => undefined); // 'close' decides
  session.on('goaway', () => (state.goingAway = true));
  session.on('close', () => {
    state.closed = true;
    if (!state.goingAway) state.cut = true;
  });
  return state;
}

/** What a request sends besides its path: GET by default; a gRPC call is a POST with a framed message. */
interface H2Request {
  readonly headers?: http2.OutgoingHttpHeaders;
  readonly body?: Buffer;
}

/** One request (a GET unless said otherwise) on `session`: the status, or the error that ended it. */
function get(state: H2Session, path: string, request: H2Request = {}): Promise<{ status: number; body: string }> {
  return new Promise((resolve, reject) => {
    const stream = state.session.request({ ':path': path, ':method': 'GET', ...request.headers });
    let status = 0;
    let body = '';
    const timer = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), REQUEST_TIMEOUT_MS);
    stream.setEncoding('utf8');
    stream.on('response', (headers) => (status = Number(headers[':status'] ?? 0)));
    stream.on('data', (chunk: string) => (body += chunk));
    stream.on('end', () => {
      clearTimeout(timer);
      resolve({ status, body });
    });
    stream.on('error', (error) => {
      clearTimeout(timer);
      reject(error);
    });
    stream.on('close', () => {
      clearTimeout(timer);
      if (status === 0) reject(new Error(`stream closed (code ${stream.rstCode ?? 'none'}) before a response`));
    });
    stream.end(request.body);
  });
}

/** Closes a session that is done: gracefully when it still can be, else at once. */
function release(state: H2Session | undefined): void {
  if (state === undefined || state.closed) return;
  state.session.close();
  setTimeout(() => state.session.destroy(), 1_000).unref();
}

/**
 * The life of an HTTP/2 client: `work` on one session until the server says GOAWAY (or the session ends), then
 * a new session through the LB, as gRPC and browsers do; until the rollout is over. `countCuts`: a session
 * that ended without a GOAWAY is a cut of this kind.
 */
async function onHttp2Sessions(context: ClientContext, countCuts: boolean, work: (state: H2Session) => Promise<void>): Promise<void> {
  let state: H2Session | undefined;
  try {
    do {
      if (state !== undefined && (state.goingAway || state.closed)) {
        if (countCuts && state.cut) context.tally.cut += 1;
        release(state);
        state = undefined;
      }
      state ??= await openH2(context);
      if (state !== undefined) await work(state);
    } while (await goOn(context));
  } finally {
    state?.session.destroy();
  }
}

/**
 * HTTP/2 request/response: requests one after the other on one connection; on GOAWAY the next request goes
 * on a new connection through the LB. A request that fails is a failure; a connection that ends without a
 * GOAWAY is a cut.
 */
export function http2RequestResponse(): ClientKind {
  return {
    name: 'HTTP/2 request/response',
    failureUnit: 'requests',
    run: (context) =>
      onHttp2Sessions(context, true, async (state) => {
        try {
          const { status } = await get(state, '/');
          if (status === 200) context.tally.ok += 1;
          else context.tally.fail(`HTTP ${status}`);
        } catch (error) {
          context.tally.fail(`request: ${error instanceof Error ? error.message : String(error)}`);
        }
      }),
  };
}

/**
 * gRPC unary calls over one HTTP/2 connection (a gRPC channel): a POST with gRPC's headers and one
 * length-prefixed message, answered by Envoy's route (the emulator's fixed answer; a 200 is success); on
 * GOAWAY the channel's next call goes on a new connection through the LB, as gRPC's transport does. A call
 * that fails is a failure (a gRPC client sees UNAVAILABLE); a connection that ends without a GOAWAY is a cut.
 * As request/response, it differs from HTTP/2 GETs only on the wire: both get Envoy's GOAWAY drain.
 */
export function grpcUnary(): ClientKind {
  // A protobuf message of 5 bytes behind gRPC's 5-byte prefix (not compressed, length 5).
  const message = Buffer.from([0, 0, 0, 0, 5, 0x0a, 0x03, 0x66, 0x6c, 0x74]);
  const headers = { ':method': 'POST', 'content-type': 'application/grpc', te: 'trailers' };
  return {
    name: 'gRPC unary (HTTP/2)',
    failureUnit: 'calls',
    run: (context) =>
      onHttp2Sessions(context, true, async (state) => {
        try {
          const { status } = await get(state, '/fleet.Echo/Unary', { headers, body: message });
          if (status === 200) context.tally.ok += 1;
          else context.tally.fail(`HTTP ${status}`);
        } catch (error) {
          context.tally.fail(`call: ${error instanceof Error ? error.message : String(error)}`);
        }
      }),
  };
}

/**
 * A gRPC-style long server stream over HTTP/2: one stream at a time, `intervalMs` between messages, ended
 * by the server after `messages` (a finite RPC), then opened again; on GOAWAY the next one goes on a new
 * connection. `ok` counts messages received; a stream that breaks before its end is a cut (a gRPC client sees
 * UNAVAILABLE), and a stream that cannot be opened a failure.
 */
export function grpcServerStream(options: { intervalMs?: number; messages?: number } = {}): ClientKind {
  const intervalMs = options.intervalMs ?? 50;
  const messages = options.messages ?? 40;
  return {
    name: 'gRPC server stream (HTTP/2)',
    failureUnit: 'streams',
    run: (context) => onHttp2Sessions(context, false, (state) => oneStream(context, state, { intervalMs, messages })),
  };
}

/**
 * Reads one long stream to its end, counting messages; records a cut or a failure. Complete means every
 * message arrived: when the connection is lost, Node ends the stream's body all the same (rstCode CANCEL), as
 * a gRPC client sees a stream without its status (UNAVAILABLE).
 */
function oneStream(context: ClientContext, state: H2Session, { intervalMs, messages }: { intervalMs: number; messages: number }): Promise<void> {
  return new Promise((resolve) => {
    let status = 0;
    let received = 0;
    const stream = state.session.request({ ':path': `/stream?interval_ms=${intervalMs}&count=${messages}`, ':method': 'GET' });
    // A stream that says nothing for this long is dead (a gRPC keepalive would notice).
    let silence = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), intervalMs * 20 + REQUEST_TIMEOUT_MS);
    const stop = (): void => stream.close(http2.constants.NGHTTP2_CANCEL);
    context.signal.addEventListener('abort', stop, { once: true });
    stream.on('response', (headers) => (status = Number(headers[':status'] ?? 0)));
    stream.on('data', (chunk: Buffer) => {
      // One message per line: chunks may arrive together.
      const count = chunk.toString('latin1').split('\n').length - 1;
      received += count;
      context.tally.ok += count;
      clearTimeout(silence);
      silence = setTimeout(() => stream.close(http2.constants.NGHTTP2_CANCEL), intervalMs * 20 + REQUEST_TIMEOUT_MS);
    });
    stream.on('error', () => undefined);
    stream.on('close', () => {
      clearTimeout(silence);
      context.signal.removeEventListener('abort', stop);
      if (!context.signal.aborted) {
        if (status === 0) context.tally.fail(`stream not opened (code ${stream.rstCode ?? 'none'})`);
        else if (received < messages) context.tally.cut += 1;
      }
      resolve();
    });
    stream.end();
  });
}

/**
 * WebSocket: a long-lived connection that sends a message now and then and reads its echo. Envoy gives an
 * upgraded connection no drain signal (envoy #45250): only a peer closes it, or Envoy's exit cuts it
 * (close code 1006). A cut connection is counted, and the client reconnects through the LB.
 */
export function webSocket(): ClientKind {
  return {
    name: 'WebSocket',
    failureUnit: 'connects',
    async run(context) {
      let socket: WebSocket | undefined;
      try {
        do {
          if (socket !== undefined && socket.readyState === WebSocket.CLOSED) socket = undefined;
          if (socket === undefined) {
            socket = await openWebSocket(context);
            if (socket === undefined) continue;
          }
          if (await echoed(socket)) context.tally.ok += 1;
        } while (await goOn(context));
      } finally {
        socket?.terminate();
      }
    },
  };
}

async function openWebSocket(context: ClientContext): Promise<WebSocket | undefined> {
  const connection = await dialOrFail(context, 'http');
  if (connection === undefined) return undefined;
  return new Promise((resolve) => {
    const socket = new WebSocket('ws://fleet/', { createConnection: () => connection.socket, handshakeTimeout: REQUEST_TIMEOUT_MS });
    socket.once('open', () => {
      socket.once('close', (code) => {
        // 1006: the connection ended without a close frame, as Envoy's exit leaves it.
        if (code === 1006 && !context.signal.aborted) context.tally.cut += 1;
      });
      resolve(socket);
    });
    socket.once('error', (error) => {
      if (socket.readyState !== WebSocket.OPEN) {
        context.tally.fail(`upgrade: ${error.message}`);
        socket.terminate();
        resolve(undefined);
      }
    });
  });
}

function echoed(socket: WebSocket): Promise<boolean> {
  return new Promise((resolve) => {
    if (socket.readyState !== WebSocket.OPEN) return resolve(false);
    const text = `ping ${Math.random()}`;
    const finish = (ok: boolean): void => {
      clearTimeout(timer);
      socket.off('message', onMessage);
      socket.off('close', onClose);
      resolve(ok);
    };
    const onMessage = (data: WebSocket.RawData): void => {
      if (data.toString() === text) finish(true);
    };
    const onClose = (): void => finish(false);
    const timer = setTimeout(() => finish(false), REQUEST_TIMEOUT_MS);
    socket.on('message', onMessage);
    socket.once('close', onClose);
    socket.send(text);
  });
}
