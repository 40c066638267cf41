/**
 * The HTTP/1.1 codec of an HTTP connection manager (source/common/http/http1/codec_impl.cc, Node's parser
 * standing in for it) and what ConnectionManagerImpl::ActiveStream::encodeHeaders
 * (source/common/http/conn_manager_impl.cc) does to an HTTP/1.1 response for the drain: when drainClose() says
 * so, the connection starts draining (counted in `downstream_cx_drain_close`) and the response says
 * `Connection: close`, after which the connection closes; a connection already draining says it without
 * asking. Envoy's default idle timeout is 1 h, so idle keep-alive connections stay open.
 */
import http from 'node:http';
import type net from 'node:net';
import type { CodecHost, DataExchange, EmulatorCore } from './core.js';
import type { ConnectionManager, HcmConnection } from './drain-manager.js';

/**
 * The HTTP listener's HTTP/1.1 codec: handed connections by the listener's codec sniffing, it never listens
 * itself. Requests go to the host's filter chain and routes; Upgrade requests to `onUpgrade`.
 */
export function createHttp1Codec(
  core: EmulatorCore,
  host: CodecHost,
  onUpgrade: (request: http.IncomingMessage, socket: net.Socket, head: Buffer) => void,
): http.Server {
  // Envoy's default idle timeout is 1 h: idle keep-alive connections stay open for the whole test.
  const server = http.createServer({ keepAliveTimeout: 0, requestTimeout: 0 }, (request, response) => {
    void host.serveData(http1Exchange(core, host, request, response));
  });
  server.keepAliveTimeout = 0;
  server.on('upgrade', onUpgrade);
  return server;
}

function http1Exchange(core: EmulatorCore, host: CodecHost, request: http.IncomingMessage, response: http.ServerResponse): DataExchange {
  request.resume();
  const connection = core.hcmConnections.get(request.socket);
  countInFlight(connection, response);
  const exchange: DataExchange = {
    url: request.url ?? '/',
    healthCheck: false,
    gone: () => core.closed || response.destroyed,
    head: (status, headers) => {
      host.encodeResponseHeaders(exchange.healthCheck, status, headers);
      // ConnectionManagerImpl asks drainClose() while encoding each response's headers; for HTTP/1.1 a
      // "yes" means `Connection: close` and a close once the response is out (conn_manager_impl.cc). A
      // connection already draining (the connection-level drain marked it) says close without asking.
      if (drainCloseResponse(core, host, connection)) headers['connection'] = 'close';
      response.writeHead(status, headers);
    },
    write: (text) => void response.write(text),
    end: (text) => void response.end(text),
    onClose: (action) => void response.once('close', action),
  };
  return exchange;
}

/**
 * The drain decision of an HTTP/1.1 response's headers (ConnectionManagerImpl::ActiveStream::encodeHeaders):
 * a connection not draining yet starts draining when drainClose() says so, counted in
 * `downstream_cx_drain_close`; a draining one gets `Connection: close`.
 */
export function drainCloseResponse(core: EmulatorCore, manager: ConnectionManager, connection: HcmConnection | undefined): boolean {
  if (connection?.draining === true) return true;
  if (!core.drain.drainClose(manager.config)) return false;
  if (connection !== undefined) connection.draining = true;
  manager.countDrainClose();
  return true;
}

/** Counts an HTTP/1.1 request in its connection's `inFlight` until its response has ended or is cut. */
export function countInFlight(connection: HcmConnection | undefined, response: http.ServerResponse): void {
  if (connection === undefined) return;
  connection.inFlight += 1;
  response.once('close', () => {
    connection.inFlight -= 1;
    if (connection.inFlight === 0 && connection.closeWhenIdle) connection.socket.destroySoon();
  });
}
