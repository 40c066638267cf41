/** Client-side helpers for tests: connections held open on purpose, and small HTTP calls with timeouts. */
import http from 'node:http';
import net from 'node:net';

export interface HeldConnection {
  readonly socket: net.Socket;
  /** Resolves when the connection is closed, by either side. */
  readonly closed: Promise<void>;
  /** Closes from the client side and waits for it. */
  close(): Promise<void>;
}

function hold(socket: net.Socket): HeldConnection {
  const closed = new Promise<void>((resolve) => socket.once('close', () => resolve()));
  socket.on('error', () => undefined); // a reset by the server is an expected way to end here
  return {
    socket,
    closed,
    close: async () => {
      socket.end();
      socket.destroy();
      await closed;
    },
  };
}

/** Opens a raw TCP connection (to the emulator's tcp_proxy listener) and keeps it open. */
/** How long a connect may take: a SYN dropped by a full listen backlog is retried for up to two minutes. */
const CONNECT_TIMEOUT_MS = 10_000;

export function openTcpConnection(port: number, host = '127.0.0.1'): Promise<HeldConnection> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host }, () => {
      socket.setTimeout(0);
      socket.off('error', reject);
      resolve(hold(socket));
    });
    socket.setTimeout(CONNECT_TIMEOUT_MS, () => {
      socket.destroy();
      reject(new Error(`connecting to ${host}:${port} took more than ${CONNECT_TIMEOUT_MS} ms`));
    });
    socket.once('error', reject);
  });
}

export async function openTcpConnections(port: number, count: number, host = '127.0.0.1'): Promise<HeldConnection[]> {
  return Promise.all(Array.from({ length: count }, () => openTcpConnection(port, host)));
}

export interface RawHttpResponse {
  readonly status: number;
  readonly headers: Readonly<Record<string, string>>;
  readonly body: string;
}

/**
 * Sends one HTTP/1.1 keep-alive request on a raw socket and reads the response (Content-Length bodies
 * only, which is what the emulator's data listener sends); the socket stays open unless the server closes it.
 */
export function requestOn(socket: net.Socket, path = '/', timeoutMs = 2_000): Promise<RawHttpResponse> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    const timer = setTimeout(() => finish(new Error(`no HTTP response within ${timeoutMs} ms`)), timeoutMs);
    const onData = (chunk: Buffer): void => {
      buffer += chunk.toString('latin1');
      const headerEnd = buffer.indexOf('\r\n\r\n');
      if (headerEnd === -1) return;
      const [statusLine = '', ...headerLines] = buffer.slice(0, headerEnd).split('\r\n');
      const headers: Record<string, string> = {};
      for (const line of headerLines) {
        const colon = line.indexOf(':');
        headers[line.slice(0, colon).trim().toLowerCase()] = line.slice(colon + 1).trim();
      }
      const length = Number(headers['content-length'] ?? 0);
      const body = buffer.slice(headerEnd + 4);
      if (body.length < length) return;
      finish(undefined, { status: Number(statusLine.split(' ')[1]), headers, body: body.slice(0, length) });
    };
    const onClose = (): void => finish(new Error('connection closed before a complete response'));
    const finish = (error?: Error, response?: RawHttpResponse): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      if (error !== undefined) reject(error);
      else resolve(response as RawHttpResponse);
    };
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.write(`GET ${path} HTTP/1.1\r\nHost: test\r\n\r\n`);
  });
}

/** Opens an HTTP/1.1 connection, makes one request on it, and keeps it open (keep-alive). */
export async function openHttpConnection(port: number, host = '127.0.0.1'): Promise<HeldConnection> {
  const held = await openTcpConnection(port, host);
  await requestOn(held.socket);
  return held;
}

export async function closeAll(connections: readonly HeldConnection[]): Promise<void> {
  await Promise.all(connections.map((connection) => connection.close()));
}

export interface SimpleResponse {
  readonly status: number;
  readonly headers: http.IncomingHttpHeaders;
  readonly body: string;
}

/** One HTTP request on a fresh connection (no agent reuse), rejecting after `timeoutMs`. */
export function httpRequest(
  url: string,
  options: { method?: string; timeoutMs?: number; headers?: Record<string, string>; socketPath?: string } = {},
): Promise<SimpleResponse> {
  return new Promise((resolve, reject) => {
    const settings = {
      method: options.method ?? 'GET',
      headers: options.headers ?? {},
      agent: false,
      signal: AbortSignal.timeout(options.timeoutMs ?? 5_000),
      // Over a Unix socket (an admin API such as Contour's), the URL gives only the path.
      ...(options.socketPath === undefined ? {} : { socketPath: options.socketPath }),
    };
    const request = http.request(url, settings, (response) => {
      let body = '';
      response.setEncoding('utf8');
      response.on('data', (chunk: string) => (body += chunk));
      response.on('end', () => resolve({ status: response.statusCode ?? 0, headers: response.headers, body }));
      response.on('error', reject);
    });
    request.on('error', reject);
    request.end();
  });
}
