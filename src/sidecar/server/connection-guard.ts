/**
 * Per-connection bounds (ConnectionLimits, connection-limits.ts), enforced: requests in flight, unflushed bytes, the
 * request-head and write deadlines, room made at the limit of connections; each close counted by reason and
 * logged without flooding the log.
 */
import type { ServerResponse } from 'node:http';
import type { Socket } from 'node:net';
import type { Clock } from '../../clock.js';
import { LogThrottle } from '../log-throttle.js';
import type { SidecarLog } from '../log.js';
import { Deadlines } from './deadlines.js';
import type { ConnectionLimits } from './connection-limits.js';
import { feedParserInSlices } from './parser-slices.js';

/** Why the ConnectionGuard closed a connection; each is a bound of ConnectionLimits. */
export type ConnectionCloseReason =
  /** No request in progress, or its answers not read, closed to make room at maxConnections. */
  | 'shed'
  /** No complete request head within requestWithinMs. */
  | 'timedOut'
  /** A new connection closed at maxConnections: every open one had a request awaiting its answer. */
  | 'refused'
  /** More than maxRequestsInFlight requests pipelined. */
  | 'tooManyInFlight'
  /** More than maxUnflushedBytes of answers left unread. */
  | 'slowReader'
  /** An answer not taken within writeWithinMs. */
  | 'writeTimedOut';

const CLOSE_REASONS: readonly ConnectionCloseReason[] = ['shed', 'timedOut', 'refused', 'tooManyInFlight', 'slowReader', 'writeTimedOut'];

function zeroCounts(): Record<ConnectionCloseReason, number> {
  return { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 0 };
}

/** The state of one open connection, for the guard; a few entries at most (maxRequestsInFlight). */
interface ConnectionState {
  /**
   * Requests received and not yet answered in full, each with its place on the connection: pipelined
   * requests queue, and HTTP/1.1 sends their answers in that order, whatever order they are written in.
   */
  readonly inFlight: Map<ServerResponse, number>;
  /** Of those, the ones whose answer is written but not yet taken by the kernel, with its bytes. */
  readonly unflushed: Map<ServerResponse, number>;
  received: number;
}

/**
 * Enforces ConnectionLimits. A connection is waiting (no request in progress: silent since it opened,
 * sending a head slowly, or idle after an answer), stalled (every request answered, an answer not yet taken)
 * or else awaiting an answer (a held /shutdown, a /metrics being read). Waiting and stalled connections are
 * closed when they take too long, or, oldest first, to make room for a new connection at the limit; one
 * awaiting an answer is closed only when its client breaks a bound itself (pipelining too many, leaving too
 * much unread).
 */
export class ConnectionGuard {
  /** Cumulative, never reset. */
  readonly closed: Record<ConnectionCloseReason, number> = zeroCounts();
  private readonly open = new Map<Socket, ConnectionState>();
  private readonly waiting: Deadlines;
  private readonly stalled: Deadlines;
  private readonly report: ClosedConnectionsLog;
  private closing = false;

  constructor(
    private readonly limits: ConnectionLimits,
    log: SidecarLog,
    reportEveryMs: number,
    clock: Pick<Clock, 'now'>,
  ) {
    this.waiting = new Deadlines(limits.requestWithinMs, (socket) => this.close(socket, 'timedOut'), clock);
    this.stalled = new Deadlines(limits.writeWithinMs, (socket) => this.close(socket, 'writeTimedOut'), clock);
    this.report = new ClosedConnectionsLog(log, limits, reportEveryMs, () => this.open.size);
  }

  get counts(): { readonly waiting: number; readonly busy: number } {
    return { waiting: this.waiting.size, busy: this.open.size - this.waiting.size };
  }

  accepted(socket: Socket): void {
    if (this.open.size >= this.limits.maxConnections && !this.makeRoom()) {
      // Every connection has a request awaiting its answer: the new one waits for none of them, and the limit holds.
      this.close(socket, 'refused');
      return;
    }
    this.open.set(socket, { inFlight: new Map(), unflushed: new Map(), received: 0 });
    socket.once('close', () => this.forget(socket));
    // Lifted (tests): Node's own reading, to show what the bound prevents.
    if (Number.isFinite(this.limits.maxRequestsInFlight)) feedParserInSlices(socket, () => this.close(socket, 'tooManyInFlight'));
    this.wait(socket);
  }

  /** False when the request must not be served: its connection is closed (now, for pipelining too many, or before). */
  requestStarted(socket: Socket, response: ServerResponse): boolean {
    const state = this.open.get(socket);
    if (state === undefined || socket.destroyed) return false;
    if (state.inFlight.size >= this.limits.maxRequestsInFlight) {
      this.close(socket, 'tooManyInFlight');
      return false;
    }
    state.inFlight.set(response, state.received++);
    this.waiting.delete(socket);
    this.track(socket, state);
    return true;
  }

  requestEnded(socket: Socket, response: ServerResponse): void {
    const state = this.open.get(socket);
    if (state === undefined) return;
    state.inFlight.delete(response);
    state.unflushed.delete(response);
    if (state.inFlight.size > 0) this.track(socket, state);
    else if (!socket.destroyed) this.wait(socket);
  }

  /**
   * Before an answer is computed: false when nobody will take it, its connection having closed since the request
   * was parsed (the client left, or a later request of the same read broke a bound), or when its connection is
   * closed now, for the reason answering() would close it: what is computed for it would be thrown away.
   */
  wanted(response: ServerResponse): boolean {
    const socket = response.req.socket;
    if (response.destroyed || socket.destroyed) return false;
    const state = this.open.get(socket);
    if (state === undefined) return true;
    if (unflushedAhead(state, response) > this.limits.maxUnflushedBytes) {
      this.close(socket, 'slowReader');
      return false;
    }
    return true;
  }

  /**
   * Before an answer of `bytes` is written: false when its connection is closed instead, its client having left
   * more than maxUnflushedBytes of earlier answers untaken. Only answers that go out before this one count (see
   * unflushedAhead): those written earlier for later requests wait behind it, and are not the client's doing.
   */
  answering(response: ServerResponse, bytes: number): boolean {
    const socket = response.req.socket;
    const state = this.open.get(socket);
    if (state === undefined) return !socket.destroyed;
    if (unflushedAhead(state, response) > this.limits.maxUnflushedBytes) {
      this.close(socket, 'slowReader');
      return false;
    }
    state.unflushed.set(response, bytes);
    // 'finish': the last byte was handed to the kernel (Node's write callback); a client that does not read stops that.
    response.once('finish', () => this.flushed(socket, response));
    this.track(socket, state);
    return true;
  }

  /** For close(): waiting connections have nothing to be answered; later ones are closed as they become waiting. */
  closeWaiting(): void {
    this.closing = true;
    for (const socket of this.waiting.sockets()) this.close(socket);
  }

  stop(): void {
    this.waiting.stop();
    this.stalled.stop();
    this.report.stop();
  }

  private flushed(socket: Socket, response: ServerResponse): void {
    const state = this.open.get(socket);
    if (state === undefined) return;
    state.unflushed.delete(response);
    // The client is reading: the next answer gets a whole writeWithinMs.
    this.stalled.delete(socket);
    this.track(socket, state);
  }

  /** Stalled, and since when, once every request in flight is answered and an answer is still not taken. */
  private track(socket: Socket, state: ConnectionState): void {
    const stalled = state.unflushed.size > 0 && state.unflushed.size === state.inFlight.size;
    if (!stalled) this.stalled.delete(socket);
    else if (!this.stalled.has(socket)) this.stalled.start(socket);
  }

  private wait(socket: Socket): void {
    if (this.closing) {
      this.close(socket);
      return;
    }
    this.stalled.delete(socket);
    this.waiting.start(socket);
  }

  /** Closes the oldest waiting connection, or else the oldest stalled one; false when there is none. */
  private makeRoom(): boolean {
    const victim = this.waiting.oldest() ?? this.stalled.oldest();
    if (victim === undefined) return false;
    this.close(victim, 'shed');
    return true;
  }

  /** Closes at once (destroy: the descriptor is freed now, whatever the client does), counted under `reason` when there is one. */
  private close(socket: Socket, reason?: ConnectionCloseReason): void {
    this.forget(socket);
    socket.destroy();
    if (reason === undefined) return;
    this.closed[reason] += 1;
    this.report.closed(reason);
  }

  private forget(socket: Socket): void {
    this.open.delete(socket);
    this.waiting.delete(socket);
    this.stalled.delete(socket);
  }
}

/**
 * Bytes of the answers written and not yet taken that go out before `response`'s; 0 while a request ahead of it
 * still awaits its answer (a held /shutdown): nothing behind that can be taken before it, whatever the client does.
 */
function unflushedAhead(state: ConnectionState, response: ServerResponse): number {
  const place = state.inFlight.get(response) ?? Infinity;
  let bytes = 0;
  for (const [earlier, earlierPlace] of state.inFlight) {
    if (earlierPlace >= place) continue;
    const size = state.unflushed.get(earlier);
    if (size === undefined) return 0;
    bytes += size;
  }
  return bytes;
}

/** The guard's closes, as warnings: the first at once, then one summary per period while they go on. */
class ClosedConnectionsLog {
  private readonly sinceLine = zeroCounts();
  private readonly throttle: LogThrottle;

  constructor(
    private readonly log: SidecarLog,
    private readonly limits: ConnectionLimits,
    periodMs: number,
    private readonly openConnections: () => number,
  ) {
    this.throttle = new LogThrottle(periodMs, () => this.flush());
  }

  closed(reason: ConnectionCloseReason): void {
    this.sinceLine[reason] += 1;
    this.throttle.noted();
  }

  stop(): void {
    this.throttle.stop();
  }

  private flush(): boolean {
    const counts = { ...this.sinceLine };
    if (CLOSE_REASONS.every((reason) => counts[reason] === 0)) return false;
    for (const reason of CLOSE_REASONS) this.sinceLine[reason] = 0;
    const { maxConnections, requestWithinMs, maxRequestsInFlight, maxUnflushedBytes, writeWithinMs } = this.limits;
    const why: Record<ConnectionCloseReason, string> = {
      shed: `to make room at the limit of ${maxConnections} connections`,
      timedOut: `for sending no request within ${requestWithinMs} ms`,
      refused: 'new, refused while every connection had a request awaiting its answer',
      tooManyInFlight: `for pipelining more than ${maxRequestsInFlight} requests`,
      slowReader: `for leaving more than ${maxUnflushedBytes} bytes of answers unread`,
      writeTimedOut: `for not taking an answer within ${writeWithinMs} ms`,
    };
    const parts = CLOSE_REASONS.filter((reason) => counts[reason] > 0).map((reason) => `${counts[reason]} ${why[reason]}`);
    this.log.warn(
      {
        event: 'connections_closed',
        shed: counts.shed,
        timed_out: counts.timedOut,
        refused: counts.refused,
        too_many_in_flight: counts.tooManyInFlight,
        slow_reader: counts.slowReader,
        write_timed_out: counts.writeTimedOut,
        open_connections: this.openConnections(),
        max_connections: maxConnections,
      },
      `closed connections: ${parts.join('; ')}`,
    );
    return true;
  }
}
