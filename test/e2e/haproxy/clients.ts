/**
 * The project's own clients of HAProxy's frontend, on real sockets: busy HTTP/1.1 keep-alive clients, sparse ones
 * (a new client now and then, one request each), TCP echo clients for `mode tcp`, and the kubelet's readiness probe
 * of a pod's traffic port. Each runs until stopped, leaves no socket or timer behind, and counts what HAProxy
 * served (200, or the echo back) and what failed, by kind: a status other than 200 (HAProxy's 503 after its
 * retries to a server that refuses, its 502 when a server cut a request), a refused or reset connection, no answer.
 */
import net from 'node:net';
import { Http1Connection } from '../fleet/clients.js';
import { pause } from '../fleet/time.js';

/** What a group of clients saw. */
export class Tally {
  served = 0;
  failed = 0;
  /** Failures by kind, e.g. "HTTP 503", "connection closed". */
  readonly failures = new Map<string, number>();
  /** Date.now() of each failure (bounded), to tell when losses happened. */
  readonly failedAt: number[] = [];

  fail(kind: string): void {
    this.failed += 1;
    this.failures.set(kind, (this.failures.get(kind) ?? 0) + 1);
    if (this.failedAt.length < 10_000) this.failedAt.push(Date.now());
  }

  /** Adds another tally's counts (a load generator's, say). */
  add(other: { readonly served: number; readonly failed: number; readonly failures: ReadonlyMap<string, number> }): void {
    this.served += other.served;
    this.failed += other.failed;
    for (const [kind, count] of other.failures) this.failures.set(kind, (this.failures.get(kind) ?? 0) + count);
  }
}

export interface ClientRun {
  readonly tally: Tally;
  /** Stops every client (each ends its request in flight first, bounded by its timeout) and waits for them. */
  stop(): Promise<void>;
}

const CONNECT_TIMEOUT_MS = 2_000;
/** A request's bound: above HAProxy's 3 retries with their pauses (200 ms each) and the emulator's answer. */
const REQUEST_TIMEOUT_MS = 5_000;

/** A TCP connection to 127.0.0.1:`port`, bounded by CONNECT_TIMEOUT_MS. */
function dial(port: number): Promise<net.Socket> {
  return new Promise((resolve, reject) => {
    const socket = net.connect({ port, host: '127.0.0.1' });
    const timer = setTimeout(() => socket.destroy(new Error('connect timeout')), CONNECT_TIMEOUT_MS);
    const failed = (error: Error): void => {
      clearTimeout(timer);
      reject(error);
    };
    socket.once('connect', () => {
      clearTimeout(timer);
      socket.off('error', failed);
      resolve(socket);
    });
    socket.once('error', failed);
  });
}

function reason(error: unknown): string {
  const code = (error as NodeJS.ErrnoException).code;
  if (code === 'ECONNREFUSED') return 'connection refused';
  if (code === 'ECONNRESET') return 'connection reset';
  const message = error instanceof Error ? error.message : String(error);
  if (message.startsWith('no response within')) return 'no answer in time';
  if (message.startsWith('connection closed')) return 'connection closed before the answer';
  return message;
}

/**
 * `count` HTTP/1.1 keep-alive clients, each sending GET / every `thinkMs` on one connection to HAProxy, opened
 * anew every `requestsPerConnection` requests and when HAProxy closes it.
 */
export function busyHttpClients(options: { readonly port: number; readonly count: number; readonly thinkMs: number; readonly requestsPerConnection: number }): ClientRun {
  const tally = new Tally();
  const stopped = new AbortController();
  const one = async (): Promise<void> => {
    let connection: Http1Connection | undefined;
    let sent = 0;
    try {
      while (!stopped.signal.aborted) {
        if (connection?.closed === true) connection = undefined;
        if (connection === undefined) {
          try {
            connection = new Http1Connection(await dial(options.port), '/');
            sent = 0;
          } catch (error) {
            tally.fail(reason(error));
            await pause(options.thinkMs, stopped.signal);
            continue;
          }
        }
        try {
          const response = await connection.request(REQUEST_TIMEOUT_MS);
          if (response.status === 200) tally.served += 1;
          else tally.fail(`HTTP ${response.status}`);
          sent += 1;
          if (response.closing || sent >= options.requestsPerConnection) connection.close();
        } catch (error) {
          tally.fail(reason(error));
        }
        await pause(options.thinkMs, stopped.signal);
      }
    } finally {
      connection?.close();
    }
  };
  const running = Array.from({ length: options.count }, () => one());
  return {
    tally,
    stop: async () => {
      stopped.abort();
      await Promise.all(running);
    },
  };
}

/**
 * Sparse clients: a new client every `meanGapMs` on average (exponential gaps, capped at three times the mean),
 * each one request on a connection of its own, then gone.
 */
export function sparseHttpClients(options: { readonly port: number; readonly meanGapMs: number }): ClientRun {
  const tally = new Tally();
  const stopped = new AbortController();
  const inFlight = new Set<Promise<void>>();
  const one = async (): Promise<void> => {
    let connection: Http1Connection | undefined;
    try {
      connection = new Http1Connection(await dial(options.port), '/');
      const response = await connection.request(REQUEST_TIMEOUT_MS);
      if (response.status === 200) tally.served += 1;
      else tally.fail(`HTTP ${response.status}`);
    } catch (error) {
      tally.fail(reason(error));
    } finally {
      connection?.close();
    }
  };
  const arrivals = (async () => {
    while (!stopped.signal.aborted) {
      const gap = Math.min(3 * options.meanGapMs, -Math.log(1 - Math.random()) * options.meanGapMs);
      await pause(gap, stopped.signal);
      if (stopped.signal.aborted) break;
      const client = one();
      inFlight.add(client);
      void client.finally(() => inFlight.delete(client));
    }
  })();
  return {
    tally,
    stop: async () => {
      stopped.abort();
      await arrivals;
      await Promise.all([...inFlight]);
    },
  };
}

/**
 * `count` TCP clients of HAProxy in `mode tcp` (to Envoy's TCP proxy, an echo): each connects, sends a line, waits
 * for it back, and closes, every `thinkMs`. A connection closed (or not answered) before the echo is a failure:
 * HAProxy closes the client's connection when its server refused it three times over.
 */
export function tcpEchoClients(options: { readonly port: number; readonly count: number; readonly thinkMs: number }): ClientRun {
  const tally = new Tally();
  const stopped = new AbortController();
  const one = async (): Promise<void> => {
    while (!stopped.signal.aborted) {
      let socket: net.Socket | undefined;
      try {
        socket = await dial(options.port);
        const failure = await echo(socket);
        if (failure === undefined) tally.served += 1;
        else tally.fail(failure);
      } catch (error) {
        tally.fail(reason(error));
      } finally {
        socket?.destroy();
      }
      await pause(options.thinkMs, stopped.signal);
    }
  };
  const running = Array.from({ length: options.count }, () => one());
  return {
    tally,
    stop: async () => {
      stopped.abort();
      await Promise.all(running);
    },
  };
}

/** Sends a line and waits (bounded) for it to come back: undefined if it did, else why not. */
function echo(socket: net.Socket): Promise<string | undefined> {
  return new Promise((resolve) => {
    const line = `ping ${Math.random()}\n`;
    let received = '';
    const finish = (failure: string | undefined): void => {
      clearTimeout(timer);
      socket.off('data', onData);
      socket.off('close', onClose);
      socket.off('error', onError);
      resolve(failure);
    };
    const onData = (chunk: Buffer): void => {
      received += chunk.toString('latin1');
      if (received.includes(line)) finish(undefined);
    };
    const onClose = (): void => finish('connection closed before the echo');
    const onError = (error: Error): void => finish(reason(error));
    const timer = setTimeout(() => finish('no echo in time'), REQUEST_TIMEOUT_MS);
    socket.on('data', onData);
    socket.once('close', onClose);
    socket.once('error', onError);
    socket.write(line);
  });
}

/**
 * The kubelet's readiness probe of a pod's traffic port: GET `path` on a new connection every `periodMs`,
 * straight to the pod (not through HAProxy). What it gets does not matter here; it runs until stopped.
 */
export function kubeletProbe(options: { readonly port: number; readonly path: string; readonly periodMs: number }): { stop(): Promise<void> } {
  const stopped = new AbortController();
  const running = (async () => {
    while (!stopped.signal.aborted) {
      let connection: Http1Connection | undefined;
      try {
        connection = new Http1Connection(await dial(options.port), options.path);
        await connection.request(1_000);
      } catch {
        // A probe that fails is the kubelet's business: Envoy may have exited.
      } finally {
        connection?.close();
      }
      await pause(options.periodMs, stopped.signal);
    }
  })();
  return {
    stop: async () => {
      stopped.abort();
      await running;
    },
  };
}
