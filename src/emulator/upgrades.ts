/**
 * HTTP/1.1 upgrades on the HTTP listener (HCM `upgrade_configs: [{upgrade_type: websocket}]`, as ingress
 * controllers configure; source/common/http/conn_manager_impl.cc, the upgrade paths of ActiveStream): a
 * WebSocket upgrade is accepted and its upstream echoes messages; any other is refused with 403. An upgraded
 * connection never gets a drain signal from a release (envoyproxy/envoy#45250): the 101 is a response like
 * any, so a yes from the drain decision starts the connection's drain sequence and counts
 * `downstream_cx_drain_close`, but encodeHeaders sends no `Connection: close` on an upgrade and the deferred
 * close waits for the upgraded stream; the socket is cut at exit (or, on Envoy main, closed by its proactive
 * drain in the last third of the drain time, see drain-manager.ts). Counted in `downstream_cx_upgrades_total`/`_active`, and in
 * the HTTP/1.1 gauges too (http_conn_man/stats.rst).
 */
import type http from 'node:http';
import type net from 'node:net';
import { WebSocketServer, type WebSocket } from 'ws';
import type { CodecHost, EmulatorCore } from './core.js';
import { IMMEDIATE_HEALTH_CHECK_FAIL, type HealthCheckFilter } from './health-check-filter.js';
import { chargeStats, type ConnectionGauge, type ResponseCounters } from './stats.js';

/**
 * What the upgrades read and count on their listener: the HttpListener (http-listener.ts) that creates them. Named
 * here, not imported, so that the two modules do not import each other (test/architecture.test.ts).
 */
export interface UpgradingListener extends Pick<CodecHost, 'config' | 'countDrainClose' | 'encodeResponseHeaders'> {
  readonly healthCheck: Pick<HealthCheckFilter, 'marksResponses'>;
  /** `downstream_rq_total`. */
  requests: number;
  readonly responses: ResponseCounters;
  readonly codecs: { readonly upgrades: ConnectionGauge };
}

export class WebSocketUpgrades {
  /** WebSocket upgrades of HTTP/1.1 requests, echoing messages. */
  private readonly webSockets = new WebSocketServer({ noServer: true });

  constructor(
    private readonly core: EmulatorCore,
    private readonly listener: UpgradingListener,
  ) {
    // The health-check filter's encodeHeaders marks the 101 too while health checks are failed.
    this.webSockets.on('headers', (headers: string[]) => {
      if (this.listener.healthCheck.marksResponses()) headers.push(`${IMMEDIATE_HEALTH_CHECK_FAIL}: true`);
    });
  }

  /**
   * An HTTP/1.1 Upgrade. A WebSocket one (HCM `upgrade_configs: [{upgrade_type: websocket}]`, as ingress
   * controllers configure) is accepted and echoes messages; any other is refused with 403, the local reply
   * for an upgrade the HCM does not allow. Encoding the 101 asks drainClose() like any response, and a yes
   * starts the connection's drain sequence and counts `downstream_cx_drain_close`, but an upgrade gets no
   * `Connection: close` (encodeHeaders skips it for tunnels) and the drain timer's deferred close waits for
   * the upgraded stream to end: Envoy never signals a WebSocket to go (envoyproxy/envoy#45250). It lasts
   * until a peer closes it or Envoy exits and cuts it. Counted in `downstream_cx_upgrades_*` while open.
   */
  upgrade(request: http.IncomingMessage, socket: net.Socket, head: Buffer): void {
    this.listener.requests += 1;
    if ((request.headers.upgrade ?? '').toLowerCase() !== 'websocket') {
      const headers: Record<string, string> = { 'content-length': '0', server: 'envoy', connection: 'close' };
      this.listener.encodeResponseHeaders(false, 403, headers);
      const lines = Object.entries(headers).map(([name, value]) => `${name}: ${value}\r\n`).join('');
      socket.end(`HTTP/1.1 403 Forbidden\r\n${lines}\r\n`);
      return;
    }
    // The 101 is a response like any: charged as 1xx, with the health-check filter's header while failed
    // (added in the WebSocketServer's `headers` hook, see the constructor).
    chargeStats(this.listener.responses, 101, false);
    const connection = this.core.hcmConnections.get(socket);
    if (connection !== undefined) connection.codec = 'upgraded';
    if (connection?.draining !== true && this.core.drain.drainClose(this.listener.config)) {
      this.listener.countDrainClose();
      if (connection !== undefined) connection.draining = true;
    }
    this.webSockets.handleUpgrade(request, socket, head, (webSocket) => {
      socket.once('close', this.listener.codecs.upgrades.open());
      echo(webSocket);
    });
  }

  /** At exit: the sockets are cut by the caller; this stops the WebSocket server. */
  close(): void {
    this.webSockets.close();
  }
}

/** The WebSocket upstream: every message back as it came (text or binary). */
function echo(webSocket: WebSocket): void {
  webSocket.on('message', (data, isBinary) => webSocket.send(data, { binary: isBinary }));
  webSocket.on('error', () => undefined); // cut by Envoy's exit or the peer: nothing to do
}
