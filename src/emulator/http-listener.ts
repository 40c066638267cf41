/**
 * The HTTP listener: one HTTP connection manager (stat prefix `ingress_http` by default, codec_type AUTO) speaking
 * HTTP/1.1 (http1.ts) and h2c (http2.ts) on one port, with WebSocket upgrades (upgrades.ts), Envoy's HTTP
 * health-check filter when configured (health-check-filter.ts), and its routes: a tiny fixed response, `/delay/<ms>`,
 * `/stream?interval_ms=N&count=M`, or, with `upstreamPort`, every request to an upstream on loopback (router.ts). It
 * counts connections, requests and responses where Envoy's connection manager does.
 *
 * The codec choice and the counters, with their Envoy source:
 * docs/emulator.md#codec-choice-and-the-connection-managers-counters.
 */
import http from 'node:http';
import net from 'node:net';
import type { AddressInfo } from 'node:net';
import { setTimeout as sleep } from 'node:timers/promises';
import { closeServer, listenOrInherit, type CodecHost, type DataExchange, type EmulatorCore } from './core.js';
import { listenerConfig, type ListenerConfig } from './drain-manager.js';
import { HealthCheckFilter, IMMEDIATE_HEALTH_CHECK_FAIL } from './health-check-filter.js';
import { createHttp1Codec } from './http1.js';
import { Http2Codec } from './http2.js';
import { forward } from './router.js';
import { chargeStats, ConnectionGauge, counter, gauge, listenerStatName, ListenerStats, ResponseCounters, type StatValue } from './stats.js';
import type { HttpConnectionCounts, ListenerSpec } from './types.js';
import { WebSocketUpgrades } from './upgrades.js';

const DATA_RESPONSE_BODY = 'ok\n';
/**
 * Http2::CLIENT_MAGIC_PREFIX (source/common/http/http2/codec_impl.h), what codec_type AUTO looks for at the
 * start of a connection (ConnectionManagerUtility::determineNextProtocol): the start of the HTTP/2 preface.
 */
const HTTP2_MAGIC_PREFIX = Buffer.from('PRI * HTTP/2', 'latin1');
/** `/stream` defaults and bounds: a chunk a second, until the client or Envoy's exit ends it. */
const STREAM_DEFAULT_INTERVAL_MS = 1_000;
const STREAM_MAX_INTERVAL_MS = 60_000;

export class HttpListener implements CodecHost {
  readonly config: ListenerConfig;
  /** The `http.<prefix>.downstream_cx_{http1,http2,upgrades}_*` gauges and counters. */
  readonly codecs = { http1: new ConnectionGauge(), http2: new ConnectionGauge(), upgrades: new ConnectionGauge() };
  readonly responses = new ResponseCounters();
  readonly healthCheck: HealthCheckFilter;
  /** `downstream_rq_total`. */
  requests = 0;
  /** The listener socket: it reads each connection's first bytes to pick a codec (`sniffCodec`). */
  private server: net.Server;
  /** The HTTP/1.1 codec, handed connections by `server`; it never listens itself. */
  private readonly http1Server: http.Server;
  private readonly http2: Http2Codec;
  private readonly upgrades: WebSocketUpgrades;
  /** Connections to the upstream, pooled as Envoy's cluster connection pool keeps them. */
  private readonly upstreamAgent = new http.Agent({ keepAlive: true });
  private drainCloses = 0;
  private listener: ListenerStats | undefined;

  constructor(
    private readonly core: EmulatorCore,
    spec: ListenerSpec | undefined,
  ) {
    this.config = listenerConfig(spec);
    this.healthCheck = new HealthCheckFilter(core);
    this.upgrades = new WebSocketUpgrades(core, this);
    this.http1Server = createHttp1Codec(core, this, (request, socket, head) => this.upgrades.upgrade(request, socket, head));
    this.http2 = new Http2Codec(core, this);
    this.server = this.createListener();
  }

  /**
   * Binds the listener (or takes a hot restart parent's listen socket, `inherited`); its stats are named after
   * the port it got (`listenerStatName`).
   */
  async listen(inherited?: net.Server): Promise<void> {
    const { host, httpPort, statAddress, workers } = this.core.options;
    this.server = await listenOrInherit(this.server, inherited, httpPort, host);
    this.listener = new ListenerStats(listenerStatName(statAddress, (this.server.address() as AddressInfo).port), workers);
  }

  /** The listener's per-worker connection bookkeeping (`listener.<address>.*`). */
  get stats(): ListenerStats {
    if (this.listener === undefined) throw new Error('the HTTP listener is not listening yet');
    return this.listener;
  }

  get port(): number | undefined {
    return (this.server.address() as AddressInfo | null)?.port;
  }

  /** Open connections by codec (the `http.<prefix>.downstream_cx_*_active` gauges). */
  get connections(): HttpConnectionCounts {
    const { http1, http2, upgrades } = this.codecs;
    return { active: this.stats.active, http1: http1.active, http2: http2.active, upgrades: upgrades.active };
  }

  /** The listener's socket, for ListenerManagerImpl::stopListeners. */
  get socket(): net.Server {
    return this.server;
  }

  countDrainClose(): void {
    this.drainCloses += 1;
  }

  /** Its connection manager's stats (`http.<prefix>.*`), its per-listener ones and the listener's. */
  statValues(): StatValue[] {
    const httpPrefix = `http.${this.core.options.httpStatPrefix}`;
    return [
      gauge(`${httpPrefix}.downstream_cx_active`, this.stats.active, this.stats.total > 0),
      counter(`${httpPrefix}.downstream_cx_drain_close`, this.drainCloses),
      ...this.codecStats(httpPrefix),
      counter(`${httpPrefix}.downstream_cx_total`, this.stats.total),
      counter(`${httpPrefix}.downstream_rq_total`, this.requests),
      ...this.responses.stats(httpPrefix),
      ...this.responses.stats(`listener.${this.stats.statName}.${httpPrefix}`),
      ...this.healthCheck.stats(httpPrefix),
      ...this.stats.stats(),
    ];
  }

  /** At exit: every connection was cut by the caller; pools, codecs and the listener close. */
  close(): Promise<void> {
    this.upstreamAgent.destroy();
    this.http1Server.closeAllConnections();
    this.upgrades.close();
    return closeServer(this.server);
  }

  /**
   * The HTTP connection manager's per-codec stats (docs/root/configuration/http/http_conn_man/stats.rst:
   * downstream_cx_http1_active / _http2_active / _upgrades_active gauges, their _total counters; upgraded
   * connections "are also counted as active http1/http2 connections").
   */
  private codecStats(httpPrefix: string): StatValue[] {
    const codecs = (['http1', 'http2', 'upgrades'] as const).flatMap((codec) => {
      const { active, total } = this.codecs[codec];
      return [gauge(`${httpPrefix}.downstream_cx_${codec}_active`, active, total > 0), counter(`${httpPrefix}.downstream_cx_${codec}_total`, total)];
    });
    // Every HCM has the HTTP/3 pair too, at 0 without a QUIC listener (stats.rst lists them beside http1/http2).
    return [...codecs, gauge(`${httpPrefix}.downstream_cx_http3_active`, 0, false), counter(`${httpPrefix}.downstream_cx_http3_total`, 0)];
  }

  /**
   * The HTTP listener with codec_type AUTO: each connection counts in the listener's stats from its accept
   * (onNewConnection), then its first bytes choose HTTP/2 or HTTP/1.1 (`sniffCodec`) and the codec's gauge.
   */
  private createListener(): net.Server {
    return net.createServer((socket) => {
      this.core.track(socket, this.stats);
      this.core.trackHcm(socket, this);
      sniffCodec(socket, (codec) => this.openCodec(socket, codec));
    });
  }

  /**
   * ConnectionManagerImpl::createCodec counts `downstream_cx_http1_*` or `downstream_cx_http2_*` (the active
   * gauge until the connection closes), then the codec reads the bytes the sniffing held back.
   */
  private openCodec(socket: net.Socket, codec: 'http1' | 'http2'): void {
    socket.once('close', this.codecs[codec].open());
    const connection = this.core.hcmConnections.get(socket);
    if (connection !== undefined) connection.codec = codec;
    if (codec === 'http2') {
      // The HTTP/2 session reads what is buffered on the socket itself; a resume would lose it.
      this.http2.accept(socket, connection);
      return;
    }
    this.http1Server.emit('connection', socket);
    socket.resume();
  }

  /**
   * What every response of the HTTP listener goes through as its headers are encoded, before the codec's own
   * drain signal: the health-check filter's encodeHeaders, which adds `x-envoy-immediate-health-check-fail:
   * true` to every response, health check or not, while health checks are failed (health_check_filter.rst's
   * note; source/extensions/filters/http/health_check/health_check.cc), then chargeStats (stats.ts).
   */
  encodeResponseHeaders(healthCheck: boolean, status: number, headers: Record<string, string>): void {
    if (this.healthCheck.marksResponses()) headers[IMMEDIATE_HEALTH_CHECK_FAIL] = 'true';
    chargeStats(this.responses, status, healthCheck);
  }

  /**
   * The HTTP listener's routes, the same on both codecs: `/delay/<ms>`, `/stream?…` (`serveStream`), and
   * anything else the fixed `ok` answer, like a `direct_response` route; or, with `upstreamPort`, every
   * request routed upstream.
   */
  async serveData(exchange: DataExchange): Promise<void> {
    this.requests += 1;
    if (this.healthCheck.answer(exchange)) return;
    const { upstreamPort, host } = this.core.options;
    if (upstreamPort !== undefined) {
      const answer = await forward(exchange.url, { host, port: upstreamPort }, this.upstreamAgent, this.core.closing.signal);
      if (!exchange.gone()) answerWith(exchange, answer.status, answer.body);
      return;
    }
    const url = new URL(exchange.url, 'http://ingress');
    if (url.pathname === '/stream') return this.serveStream(exchange, url.searchParams);
    // `/delay/<ms>` stands for a slow upstream: the response, and so the drain-close decision, comes
    // that much later, and a request still waiting when Envoy exits is lost, as it is with real Envoy.
    const delayMs = Number(/^\/delay\/(\d{1,6})$/.exec(url.pathname)?.[1] ?? 0);
    if (delayMs > 0) {
      await sleep(delayMs, undefined, { signal: this.core.closing.signal }).catch(() => undefined);
      if (exchange.gone()) return;
    }
    answerWith(exchange, 200, DATA_RESPONSE_BODY);
  }

  /**
   * `/stream?interval_ms=N&count=M`: a long server stream, as a gRPC server-streaming call is: headers at
   * once, then a small chunk (`<i>\n`) every N ms (default 1000), M of them (default: no end; the client or
   * Envoy's exit ends it), then the end. Its headers are encoded once, at its start, so it asks the drain
   * decision only then: a drain starting later leaves its connection unsignalled until another response is
   * encoded on it (envoyproxy/envoy#14350, #42305). HTTP/1.1 sends it chunked.
   */
  private serveStream(exchange: DataExchange, params: URLSearchParams): void {
    const intervalMs = boundedInteger(params.get('interval_ms'), STREAM_DEFAULT_INTERVAL_MS, 1, STREAM_MAX_INTERVAL_MS);
    const count = boundedInteger(params.get('count'), Number.POSITIVE_INFINITY, 0, Number.MAX_SAFE_INTEGER);
    exchange.head(200, { 'content-type': 'text/plain', server: 'envoy' });
    if (count === 0) return exchange.end();
    let sent = 0;
    const timer = setInterval(() => {
      if (exchange.gone()) return this.core.stopTimer(timer);
      sent += 1;
      exchange.write(`${sent}\n`);
      if (sent < count) return;
      this.core.stopTimer(timer);
      exchange.end();
    }, intervalMs);
    this.core.keepTimer(timer);
    exchange.onClose(() => this.core.stopTimer(timer));
  }
}

/**
 * ConnectionManagerUtility::determineNextProtocol with codec_type AUTO on a cleartext connection: HTTP/2
 * if its data starts with Http2::CLIENT_MAGIC_PREFIX, else HTTP/1.1. Envoy decides on the first read;
 * this waits for more while the bytes so far are a prefix of it, so a preface split across reads still
 * picks HTTP/2. The bytes read are put back for the codec; the socket stays paused until it takes them.
 */
function sniffCodec(socket: net.Socket, decide: (codec: 'http1' | 'http2') => void): void {
  let seen = Buffer.alloc(0);
  const onError = (): void => void socket.destroy();
  const onData = (chunk: Buffer): void => {
    seen = Buffer.concat([seen, chunk]);
    const compared = Math.min(seen.length, HTTP2_MAGIC_PREFIX.length);
    const http2Start = seen.subarray(0, compared).equals(HTTP2_MAGIC_PREFIX.subarray(0, compared));
    if (http2Start && seen.length < HTTP2_MAGIC_PREFIX.length) return;
    socket.off('data', onData);
    socket.off('error', onError);
    socket.pause();
    socket.unshift(seen);
    decide(http2Start ? 'http2' : 'http1');
  };
  socket.on('data', onData);
  socket.on('error', onError);
}

/** A complete response with a body: the fixed answer or the upstream's. */
function answerWith(exchange: DataExchange, status: number, body: string): void {
  exchange.head(status, { 'content-type': 'text/plain', server: 'envoy', 'content-length': String(Buffer.byteLength(body)) });
  exchange.end(body);
}

/** A whole number within [min, max] from a query parameter, or `fallback` when absent or not one. */
function boundedInteger(text: string | null, fallback: number, min: number, max: number): number {
  const value = Number(text ?? NaN);
  if (text === null || text.trim() === '' || !Number.isInteger(value)) return fallback;
  return Math.min(max, Math.max(min, value));
}
