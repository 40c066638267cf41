/**
 * The HTTP/2 codec of the HTTP listener (h2c with prior knowledge; Node's nghttp2 standing in for Envoy's
 * source/common/http/http2/codec_impl.cc) and the HTTP connection manager's HTTP/2 drain sequence: a GOAWAY with
 * last-stream-id 2^31-1 on the first response the drain decision says yes to, the final GOAWAY at the HCM
 * `drain_timeout`, and a close once the streams end. A connection with no response since the drain began gets
 * nothing until Envoy exits; on Envoy main the proactive drain reaches it (drain-manager.ts), for which the codec
 * counts its streams in the connection's `inFlight`.
 *
 * The sequence and its Envoy source: docs/emulator.md#the-http2-drain.
 */
import http2 from 'node:http2';
import type net from 'node:net';
import type { CodecHost, DataExchange, EmulatorCore } from './core.js';
import type { HcmConnection } from './drain-manager.js';

/** HTTP/2's largest stream id: a GOAWAY naming it refuses no stream, the "shutdown notice" (RFC 9113 §6.8). */
const HTTP2_MAX_STREAM_ID = 2 ** 31 - 1;

/** An HTTP/2 connection's ConnectionManagerImpl::drain_state_, and its drain_timer_. */
interface Http2Drain {
  state: 'not-draining' | 'draining' | 'closing';
  timer: NodeJS.Timeout | undefined;
  /** The client has sent a GOAWAY: it opens no more streams. */
  peerGoaway: boolean;
  /** Streams open on the connection. */
  streams: number;
}

/**
 * A client that sent GOAWAY and has no stream left is done with the connection: Go's and gRPC's clients
 * close it themselves then, Node's waits for the server to, so the emulator closes it for them.
 */
function peerDone(drain: Http2Drain): boolean {
  return drain.peerGoaway && drain.streams === 0;
}

/** The HTTP listener's HTTP/2 codec: handed connections by its codec sniffing, it never listens itself. */
export class Http2Codec {
  private readonly server: http2.Http2Server;
  private readonly drains = new Map<http2.Http2Session, Http2Drain>();
  /** The connection whose session is being created (Http2Server emits `session` synchronously). */
  private opening: HcmConnection | undefined;

  constructor(
    private readonly core: EmulatorCore,
    private readonly host: CodecHost,
  ) {
    this.server = http2.createServer();
    this.server.on('session', (session: http2.ServerHttp2Session) => this.trackSession(session));
    this.server.on('request', (request: http2.Http2ServerRequest, response: http2.Http2ServerResponse) => {
      void this.host.serveData(this.exchange(request, response));
    });
  }

  /** Takes a connection whose first bytes were the HTTP/2 preface; the session reads what is buffered. */
  accept(socket: net.Socket, connection: HcmConnection | undefined): void {
    this.opening = connection;
    try {
      this.server.emit('connection', socket);
    } finally {
      this.opening = undefined;
    }
  }

  private trackSession(session: http2.ServerHttp2Session): void {
    const drain: Http2Drain = { state: 'not-draining', timer: undefined, peerGoaway: false, streams: 0 };
    this.drains.set(session, drain);
    const connection = this.opening;
    if (connection !== undefined) {
      connection.startHttp2Drain = () => {
        if (drain.state === 'not-draining') this.startDrain(session, drain);
      };
    }
    session.on('error', () => undefined); // a client gone mid-frame: the socket's close does the bookkeeping
    // Emitted before Node's own reaction to a peer's GOAWAY (see `deferClose`).
    session.on('goaway', () => (drain.peerGoaway = true));
    session.on('stream', (stream: http2.ServerHttp2Stream) => {
      drain.streams += 1;
      if (connection !== undefined) connection.inFlight += 1;
      stream.once('close', () => {
        drain.streams -= 1;
        if (connection !== undefined) connection.inFlight -= 1;
        if (peerDone(drain)) session.close();
      });
    });
    deferClose(session, () => drain.state === 'closing' || this.core.closed || peerDone(drain));
    session.once('close', () => {
      this.core.stopTimer(drain.timer);
      this.drains.delete(session);
    });
  }

  private exchange(request: http2.Http2ServerRequest, response: http2.Http2ServerResponse): DataExchange {
    request.resume();
    const stream = response.stream;
    const exchange: DataExchange = {
      url: request.url,
      healthCheck: false,
      gone: () => this.core.closed || stream.destroyed || stream.closed,
      head: (status, headers) => {
        this.host.encodeResponseHeaders(exchange.healthCheck, status, headers);
        this.encodeHeaders(stream.session);
        response.writeHead(status, headers);
      },
      write: (text) => void response.write(text),
      end: (text) => void (text === undefined ? response.end() : response.end(text)),
      onClose: (action) => void stream.once('close', action),
    };
    return exchange;
  }

  /**
   * ConnectionManagerImpl::ActiveStream::encodeHeaders on an HTTP/2 connection: when it is not draining yet
   * and drainClose() says so, startDrainSequence (conn_manager_impl.cc) counts `downstream_cx_drain_close`
   * and sends the codec's shutdownNotice (http2/codec_impl.cc: nghttp2_submit_shutdown_notice, a GOAWAY
   * with last-stream-id 2^31-1), before these headers, and arms the drain timer. Streams go on; new ones
   * are still accepted (the notice refuses none). A connection already draining is not asked again.
   */
  private encodeHeaders(session: http2.Http2Session | undefined): void {
    const drain = session === undefined ? undefined : this.drains.get(session);
    if (session === undefined || drain === undefined || drain.state !== 'not-draining') return;
    if (!this.core.drain.drainClose(this.host.config)) return;
    this.startDrain(session, drain);
  }

  /** ConnectionManagerImpl::startDrainSequence on an HTTP/2 connection, counted in `downstream_cx_drain_close`. */
  private startDrain(session: http2.Http2Session, drain: Http2Drain): void {
    this.host.countDrainClose();
    drain.state = 'draining';
    session.goaway(http2.constants.NGHTTP2_NO_ERROR, HTTP2_MAX_STREAM_ID);
    drain.timer = this.core.startTimer(() => this.onDrainTimeout(session, drain), this.core.options.httpDrainTimeoutMs);
  }

  /**
   * ConnectionManagerImpl::onDrainTimeout: the codec's goAway() (GOAWAY NO_ERROR naming the last stream it
   * processed), drain state Closing, and checkForDeferredClose: the connection closes once no stream is
   * active, at once if none is. Node's Http2Session#close is exactly that: a GOAWAY with the last
   * processed stream id (nghttp2_session_get_last_proc_stream_id), then destroy when the last stream ends.
   */
  private onDrainTimeout(session: http2.Http2Session, drain: Http2Drain): void {
    drain.state = 'closing';
    drain.timer = undefined;
    session.close();
  }
}

/**
 * Envoy ignores a GOAWAY from the client (ConnectionManagerImpl::onGoAway does nothing): its own drain
 * sequence alone decides when it sends the final GOAWAY. Node's session answers a peer's NO_ERROR GOAWAY
 * with close() (lib/internal/http2/core.js onGoawayData), which would send that final GOAWAY at once, and
 * a Node client sends one as soon as it gets the shutdown notice. So the session's close() does nothing
 * until `allowed()` (the drain timeout, the emulator's exit, or a client done with it); destroy() still works.
 */
function deferClose(session: http2.ServerHttp2Session, allowed: () => boolean): void {
  const close = session.close.bind(session);
  session.close = (callback?: () => void): void => {
    if (allowed()) close(callback);
  };
}
