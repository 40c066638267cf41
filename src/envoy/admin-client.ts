/**
 * A small client for the few Envoy admin endpoints the drain needs. Every call has a timeout, and every
 * failure is one of the typed errors below, so that the caller can tell "Envoy is gone" (connection
 * refused) from "Envoy is busy or confused" (timeout, 5xx, unreadable answer).
 *
 * Why node:http and not undici: undici compiles its WebAssembly HTTP parser on the first request, which
 * measured +15 to +20 MiB of resident memory in this sidecar (about 70 MiB in all, over the 60 MiB budget),
 * even when importing only its Client; node:http costs about 2 MiB. One request every few seconds on
 * loopback needs nothing more.
 */
import http from 'node:http';
import { countDownstreamConnections, DOWNSTREAM_CX_ACTIVE_FILTER, parseStats, type ConnectionCount } from './stats.js';

export interface EnvoyAdminOptions {
  readonly address: string;
  readonly port: number;
  /** Upper bound of each call, connection included. */
  readonly timeoutMs: number;
  /** Count only these listeners; empty counts every listener but admin and internal ones. */
  readonly listeners?: readonly string[];
}

/** Base of every admin failure; `endpoint` is what was called, e.g. "POST /healthcheck/fail". */
export class EnvoyAdminError extends Error {
  override readonly name: string = 'EnvoyAdminError';

  constructor(
    readonly endpoint: string,
    message: string,
    options?: ErrorOptions,
  ) {
    super(`Envoy admin ${endpoint}: ${message}`, options);
  }
}

/** Nothing listens on the admin port: Envoy has exited (or not started). */
export class AdminRefusedError extends EnvoyAdminError {
  override readonly name = 'AdminRefusedError';
}

/** No complete answer within the timeout: Envoy is overloaded or stuck. */
export class AdminTimeoutError extends EnvoyAdminError {
  override readonly name = 'AdminTimeoutError';
}

/** Envoy answered with a status other than 200. */
export class AdminStatusError extends EnvoyAdminError {
  override readonly name = 'AdminStatusError';

  constructor(
    endpoint: string,
    readonly status: number,
    body: string,
  ) {
    super(endpoint, `answered HTTP ${status}: ${JSON.stringify(body.slice(0, 200))}`);
  }
}

/** Envoy answered 200 with a body that is not what the endpoint returns (see StatsParseError in cause). */
export class AdminResponseError extends EnvoyAdminError {
  override readonly name = 'AdminResponseError';
}

/** Any other transport failure (connection reset, DNS…). */
export class AdminTransportError extends EnvoyAdminError {
  override readonly name = 'AdminTransportError';
}

/** The answer to the stats request is never large; anything bigger is not Envoy's filtered stats. */
const MAX_BODY_BYTES = 4 * 1024 * 1024;

export class EnvoyAdminClient {
  // No keep-alive: a fresh connection per call makes "refused" mean "Envoy's port is closed right now",
  // and avoids reusing a socket Envoy closed as it exits. One connection every check-interval is nothing.
  private readonly agent = new http.Agent({ keepAlive: false, maxSockets: 4 });

  constructor(private readonly options: EnvoyAdminOptions) {}

  /** Describes the target, for logs and error messages. */
  get target(): string {
    return `http://${this.options.address}:${this.options.port}`;
  }

  /** `POST /healthcheck/fail`: Envoy fails health checks and closes HTTP/1.1 connections after their responses. */
  async failHealthChecks(signal?: AbortSignal): Promise<void> {
    await this.call('POST', '/healthcheck/fail', signal);
  }

  /** `POST /drain_listeners?graceful&inboundonly`: Envoy discourages new requests on inbound listeners. */
  async drainInboundListeners(signal?: AbortSignal): Promise<void> {
    await this.call('POST', '/drain_listeners?graceful&inboundonly', signal);
  }

  /** Reads the listeners' `downstream_cx_active` gauges and counts the open downstream connections. */
  async countOpenConnections(signal?: AbortSignal): Promise<ConnectionCount> {
    const path = `/stats?format=json&usedonly&filter=${encodeURIComponent(DOWNSTREAM_CX_ACTIVE_FILTER)}`;
    const body = await this.call('GET', path, signal);
    try {
      return countDownstreamConnections(parseStats(body), { listeners: this.options.listeners ?? [] });
    } catch (error) {
      throw new AdminResponseError(`GET ${path}`, (error as Error).message, { cause: error });
    }
  }

  /** Releases sockets; calls still in flight fail. */
  close(): void {
    this.agent.destroy();
  }

  private call(method: 'GET' | 'POST', path: string, signal: AbortSignal | undefined): Promise<string> {
    const endpoint = `${method} ${path}`;
    const timeout = AbortSignal.timeout(this.options.timeoutMs);
    const combined = signal === undefined ? timeout : AbortSignal.any([timeout, signal]);
    return new Promise<string>((resolve, reject) => {
      const request = http.request(
        {
          host: this.options.address,
          port: this.options.port,
          method,
          path,
          agent: this.agent,
          signal: combined,
          headers: { accept: 'application/json, text/plain' },
        },
        (response) => {
          const chunks: Buffer[] = [];
          let size = 0;
          response.on('data', (chunk: Buffer) => {
            size += chunk.length;
            if (size > MAX_BODY_BYTES) {
              request.destroy(new AdminResponseError(endpoint, `answer larger than ${MAX_BODY_BYTES} bytes`));
              return;
            }
            chunks.push(chunk);
          });
          response.on('end', () => {
            const body = Buffer.concat(chunks).toString('utf8');
            if (response.statusCode === 200) resolve(body);
            else reject(new AdminStatusError(endpoint, response.statusCode ?? 0, body));
          });
          response.on('error', (error) => reject(this.classify(endpoint, error, timeout, signal)));
        },
      );
      request.on('error', (error) => reject(this.classify(endpoint, error, timeout, signal)));
      request.end();
    });
  }

  private classify(endpoint: string, error: Error, timeout: AbortSignal, caller: AbortSignal | undefined): EnvoyAdminError {
    if (error instanceof EnvoyAdminError) return error;
    const code = (error as NodeJS.ErrnoException).code;
    if (code === 'ECONNREFUSED') {
      return new AdminRefusedError(endpoint, `connection refused at ${this.target} (Envoy not running?)`, { cause: error });
    }
    if (timeout.aborted && caller?.aborted !== true) {
      return new AdminTimeoutError(endpoint, `no answer within ${this.options.timeoutMs} ms from ${this.target}`, { cause: error });
    }
    if (caller?.aborted === true) return new AdminTransportError(endpoint, 'cancelled', { cause: error });
    return new AdminTransportError(endpoint, `${code ?? error.name}: ${error.message}`, { cause: error });
  }
}
