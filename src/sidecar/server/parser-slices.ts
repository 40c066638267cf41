import type { Socket } from 'node:net';

/** A slice ends after a request head's blank line, or after this many bytes (a head this long comes in several). */
const MAX_PARSE_SLICE_BYTES = 1024;
const END_OF_HEAD = Buffer.from('\r\n\r\n');

/**
 * Node's HTTP parser takes a whole read (up to 64 KiB) at once, and makes a request and a response for every
 * request in it before anything can stop it: some 1,800 for a read of pipelined GETs, measured at 35 ms of CPU
 * and a few MiB of memory each, also after the guard has closed the connection at the fifth; 512 such reads
 * in one turn of the event loop are 18 s during which the kubelet gets no answer. Fed one request head at a
 * time, the parser stops at the request that broke a bound.
 *
 * node:http's connection handling gives the socket one 'data' listener, which feeds its parser: it is taken
 * off and called with slices instead (a TCP stream may be cut anywhere, so the parser sees nothing new). A
 * 'data' listener of our own also switches the socket from the parser reading it natively to JavaScript reads,
 * each a Buffer: nothing to our handful of clients. Any other shape of socket (a Node that does it differently)
 * is left as it is: the bounds then hold the same, at that cost per read.
 *
 * Node pauses a connection whose answers pile up unread (backpressure); if bytes of the read are still
 * unparsed then, the client pipelines more than it reads: `pipelinesUnread` closes it.
 */
export function feedParserInSlices(socket: Socket, pipelinesUnread: () => void): void {
  const listeners = socket.listeners('data');
  if (listeners.length !== 1) return;
  const parse = listeners[0] as (chunk: Buffer) => void;
  socket.removeListener('data', parse);
  socket.on('data', (chunk: Buffer) => {
    let offset = 0;
    while (offset < chunk.length && !socket.destroyed) {
      // Node's own backpressure flag for answers not taken (`_paused`, which socketOnData asserts on), not
      // isPaused(): Node also pauses a socket while a request body nobody reads fills its buffer, and resumes it
      // once the answer is written, with no client fault in that.
      if ((socket as Socket & { _paused?: boolean })._paused ?? socket.isPaused()) {
        pipelinesUnread();
        return;
      }
      const headEnd = chunk.indexOf(END_OF_HEAD, offset);
      const end = Math.min(headEnd === -1 ? chunk.length : headEnd + END_OF_HEAD.length, offset + MAX_PARSE_SLICE_BYTES);
      parse(chunk.subarray(offset, end));
      offset = end;
    }
  });
}
