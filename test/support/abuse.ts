/**
 * Clients that misbehave on purpose, for the drain server's per-connection bounds: connections that pipeline
 * thousands of requests and never read, that ask within the bounds and never read, and floods of calls
 * without the token; and the resident memory of the process under attack, from /proc.
 */
import { readFileSync } from 'node:fs';
import net from 'node:net';
import { performance } from 'node:perf_hooks';
import { httpRequest } from './connections.js';

/** One HTTP/1.1 GET head, as the kubelet sends it. */
export function requestHead(path: string, headers: Readonly<Record<string, string>> = {}): string {
  const extra = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`);
  return `GET ${path} HTTP/1.1\r\nHost: sidecar\r\n${extra.join('')}\r\n`;
}

/** The resident memory of a process and its peak so far (VmRSS, VmHWM), in MiB; Linux only. */
export function residentMemory(pid: number): { readonly rssMiB: number; readonly peakMiB: number } {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  const kib = (field: string): number => Number(new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(status)?.[1] ?? NaN);
  return { rssMiB: kib('VmRSS') / 1024, peakMiB: kib('VmHWM') / 1024 };
}

/** Connections opened at once: enough to be a flood, few enough not to overflow the listen backlog. */
const BATCH = 100;

/** Client sockets that never read: each reset or end by the server is seen only once they are read. */
export class UnreadConnections {
  readonly sockets: net.Socket[] = [];

  /** Opens `count` connections (in batches) and writes `payload` on each, reading nothing. */
  async open(port: number, count: number, payload: Buffer): Promise<void> {
    for (let opened = 0; opened < count; opened += BATCH) {
      const batch = Array.from({ length: Math.min(BATCH, count - opened) }, () => connectPaused(port));
      for (const socket of await Promise.all(batch)) {
        socket.write(payload);
        this.sockets.push(socket);
      }
    }
  }

  /** Destroys them all from the client side (a pending write to a closed socket is dropped, not an error). */
  close(): void {
    for (const socket of this.sockets) socket.destroy();
    this.sockets.length = 0;
  }
}

function connectPaused(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    socket.pause(); // never read: the answers stay in the kernel's buffers, then in the server's
    socket.on('error', () => undefined); // a reset by the server is the expected end
    socket.once('connect', () => resolve(socket));
    socket.once('error', reject);
  });
}

/**
 * Waves of `connections` connections, each pipelining `requestsPerConnection` copies of `head` and reading
 * nothing, every `everyMs`, until stop(): an attacker who reconnects as fast as it is cut. Each wave's
 * connections are dropped from the client side when the next wave opens, so that the test process holds one
 * wave at a time.
 */
export function pipelineFloodWaves(
  port: number,
  options: { readonly connections: number; readonly requestsPerConnection: number; readonly head: string; readonly everyMs: number },
): { readonly waves: () => number; stop(): Promise<void> } {
  const payload = Buffer.from(options.head.repeat(options.requestsPerConnection));
  let waves = 0;
  let stopped = false;
  let current = new UnreadConnections();
  const loop = (async () => {
    while (!stopped) {
      const next = new UnreadConnections();
      await next.open(port, options.connections, payload).catch(() => undefined);
      current.close();
      current = next;
      waves += 1;
      await new Promise((resolve) => setTimeout(resolve, options.everyMs));
    }
  })();
  return {
    waves: () => waves,
    stop: async () => {
      stopped = true;
      await loop;
      current.close();
    },
  };
}

/** Milliseconds for one call on a new connection, as the kubelet makes its probes and hooks. */
export async function timedCall(
  url: string,
  options: { readonly headers?: Record<string, string>; readonly timeoutMs?: number } = {},
): Promise<{ readonly status: number; readonly body: string; readonly ms: number }> {
  const started = performance.now();
  const answer = await httpRequest(url, { timeoutMs: options.timeoutMs ?? 5_000, ...(options.headers === undefined ? {} : { headers: options.headers }) });
  return { status: answer.status, body: answer.body, ms: performance.now() - started };
}

/**
 * `total` calls of `head` over `connections` keep-alive connections, each sending `depth` requests at a time
 * and reading their answers before the next ones; resolves with the status codes seen, by count.
 */
export async function callsOverKeepAlive(
  port: number,
  options: { readonly head: string; readonly total: number; readonly connections: number; readonly depth: number },
): Promise<Map<number, number>> {
  const statuses = new Map<number, number>();
  const perConnection = Math.ceil(options.total / options.connections);
  await Promise.all(
    Array.from({ length: options.connections }, async () => {
      const socket = await connectPaused(port);
      socket.resume();
      try {
        for (let sent = 0; sent < perConnection; sent += options.depth) {
          const batch = Math.min(options.depth, perConnection - sent);
          for (const status of await writeAndReadAnswers(socket, options.head.repeat(batch), batch)) statuses.set(status, (statuses.get(status) ?? 0) + 1);
        }
      } finally {
        socket.destroy();
      }
    }),
  );
  return statuses;
}

/** Writes `requests` and reads `count` answers (Content-Length bodies); their status codes. */
export function writeAndReadAnswers(socket: net.Socket, requests: string, count: number, timeoutMs = 5_000): Promise<number[]> {
  return new Promise((resolve, reject) => {
    let buffer = '';
    const statuses: number[] = [];
    const timer = setTimeout(() => finish(new Error(`${statuses.length} of ${count} answers within ${timeoutMs} ms`)), timeoutMs);
    const onData = (chunk: Buffer): void => {
      buffer += chunk.toString('latin1');
      for (;;) {
        const headEnd = buffer.indexOf('\r\n\r\n');
        if (headEnd === -1) return;
        const head = buffer.slice(0, headEnd);
        const length = Number(/^content-length:\s*(\d+)/im.exec(head)?.[1] ?? 0);
        if (buffer.length < headEnd + 4 + length) return;
        statuses.push(Number(head.split(' ', 2)[1]));
        buffer = buffer.slice(headEnd + 4 + length);
        if (statuses.length === count) {
          finish();
          return;
        }
      }
    };
    const onClose = (): void => finish(new Error(`connection closed after ${statuses.length} of ${count} answers`));
    const finish = (error?: Error): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      if (error === undefined) resolve(statuses);
      else reject(error);
    };
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.write(requests);
  });
}
