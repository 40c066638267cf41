/**
 * feedParserInSlices (src/sidecar/server/parser-slices.ts): Node's HTTP parser fed one request head at a time, so
 * that it stops at the request that broke a bound instead of parsing a whole read of pipelined requests; and a
 * client that pipelines more than it reads is reported once Node pauses its connection. First on a socket whose one
 * 'data' listener is a recorder, then on a real node:http server on loopback.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { feedParserInSlices } from '../../../src/sidecar/server/parser-slices.js';
import { requestHead } from '../../support/abuse.js';
import { openTcpConnection } from '../../support/connections.js';
import { waitUntil } from '../../support/wait.js';

/** An unconnected socket whose one 'data' listener records what it is given, sliced. */
function recordedSocket(t: TestContext, afterSlice: (slices: readonly string[], socket: net.Socket) => void = () => undefined) {
  const socket = new net.Socket();
  t.after(() => socket.destroy());
  const slices: string[] = [];
  socket.on('data', (chunk: Buffer) => {
    slices.push(chunk.toString('latin1'));
    afterSlice(slices, socket);
  });
  let unread = 0;
  feedParserInSlices(socket, () => (unread += 1));
  return { socket, slices, unread: () => unread };
}

describe('feedParserInSlices: how a read is cut', () => {
  test("each request head is a slice of its own, ending after its blank line; a body goes on to the next head's slice", (t) => {
    const { socket, slices } = recordedSocket(t);
    const post = 'POST /x HTTP/1.1\r\nHost: a\r\nContent-Length: 4\r\n\r\n';
    const read = `${requestHead('/drain')}${post}body${requestHead('/metrics')}`;
    socket.emit('data', Buffer.from(read, 'latin1'));
    assert.deepEqual(slices, [requestHead('/drain'), post, `body${requestHead('/metrics')}`], 'cut after each blank line');
    assert.equal(slices.join(''), read, 'every byte passed on, in order');
  });

  test('a run of more than 1024 bytes without a blank line is cut every 1024 bytes; a read with no head end is passed on whole', (t) => {
    const { socket, slices } = recordedSocket(t);
    const long = `GET / HTTP/1.1\r\nX-Long: ${'a'.repeat(2_500)}\r\n\r\n`;
    socket.emit('data', Buffer.from(long, 'latin1'));
    assert.deepEqual(
      slices.map((slice) => slice.length),
      [1_024, 1_024, long.length - 2_048],
      'two full slices, then the rest up to the blank line',
    );
    assert.equal(slices.join(''), long, 'every byte passed on, in order');
    slices.length = 0;
    socket.emit('data', Buffer.from('GET /half', 'latin1'));
    assert.deepEqual(slices, ['GET /half'], 'a head cut by TCP is passed on as it came');
  });

  test('stops at once when the socket is destroyed by what a slice did', (t) => {
    // As the guard closes the connection at the second request, from within the parser.
    const { socket, slices } = recordedSocket(t, (parsed, parsing) => parsed.length === 2 && parsing.destroy());
    const heads = [requestHead('/1'), requestHead('/2'), requestHead('/3'), requestHead('/4')];
    socket.emit('data', Buffer.from(heads.join(''), 'latin1'));
    assert.deepEqual(slices, heads.slice(0, 2), 'the heads after the close are never parsed');
  });

  test("Node's backpressure flag (_paused) stops the read and reports the client; a socket paused otherwise is still read", (t) => {
    const { socket, slices, unread } = recordedSocket(t);
    const read = Buffer.from(requestHead('/a') + requestHead('/b'), 'latin1');
    (socket as net.Socket & { _paused?: boolean })._paused = true;
    socket.emit('data', read);
    assert.deepEqual([slices.length, unread()], [0, 1], 'nothing parsed, the client reported');

    // A socket Node paused for a request body nobody reads, answers flowing (_paused false): no client fault.
    (socket as net.Socket & { _paused?: boolean })._paused = false;
    socket.pause();
    socket.emit('data', read);
    assert.deepEqual([slices.length, unread()], [2, 1], 'both heads parsed, nothing reported');
  });

  test('without _paused (another Node), isPaused() is the flag', (t) => {
    const { socket, slices, unread } = recordedSocket(t);
    socket.pause();
    socket.emit('data', Buffer.from(requestHead('/a'), 'latin1'));
    assert.deepEqual([slices.length, unread()], [0, 1], 'a paused socket is not read');
  });

  test("any other shape of socket is left as it is: no 'data' listener, or more than one", (t) => {
    const bare = new net.Socket();
    t.after(() => bare.destroy());
    feedParserInSlices(bare, () => assert.fail('not called'));
    assert.equal(bare.listenerCount('data'), 0, 'nothing added to a socket without a parser');

    const shared = new net.Socket();
    t.after(() => shared.destroy());
    const first = (): void => undefined;
    const second = (): void => undefined;
    shared.on('data', first).on('data', second);
    feedParserInSlices(shared, () => assert.fail('not called'));
    assert.deepEqual(shared.listeners('data'), [first, second], 'both listeners kept, in place');
  });
});

/** A node:http server on 127.0.0.1:0 whose connections are fed in slices; `onRequest` sees each request parsed. */
async function slicedServer(t: TestContext, onRequest: (request: http.IncomingMessage, response: http.ServerResponse) => void, sliced = true) {
  const unread: net.Socket[] = [];
  const server = http.createServer({ highWaterMark: 16 * 1024 }, onRequest);
  // After http's own 'connection' listener, as the sidecar's server registers it: the socket has its parser.
  if (sliced) server.on('connection', (socket: net.Socket) => feedParserInSlices(socket, () => unread.push(socket)));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  t.after(async () => {
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  return { port: (server.address() as net.AddressInfo).port, unread };
}

describe('feedParserInSlices on a real server', () => {
  test('a connection closed at its second request of a pipelined read: the rest are never parsed (without slices, they are)', async (t) => {
    const run = async (sliced: boolean): Promise<number> => {
      let parsed = 0;
      const { port } = await slicedServer(t, (request) => {
        parsed += 1;
        if (parsed === 2) request.socket.destroy(); // as the guard closes a connection over a bound
      }, sliced);
      const client = await openTcpConnection(port);
      client.socket.write(requestHead('/drain').repeat(50));
      await client.closed;
      return parsed;
    };
    assert.equal(await run(true), 2, 'sliced: parsing stops at the request that closed the connection');
    assert.ok((await run(false)) > 2, "control: Node's own reading parses the rest of the read");
  });

  test('long heads and request bodies reach the server whole through the slices', async (t) => {
    const seen: { header: string | undefined; body: string }[] = [];
    const { port } = await slicedServer(t, (request, response) => {
      let body = '';
      request.setEncoding('latin1').on('data', (chunk: string) => (body += chunk));
      request.on('end', () => {
        seen.push({ header: request.headers['x-long'] as string | undefined, body });
        response.end('ok');
      });
    });
    const client = await openTcpConnection(port);
    t.after(() => client.close());
    const long = 'b'.repeat(3_000);
    const payload = 'p'.repeat(2_500);
    client.socket.write(`POST /a HTTP/1.1\r\nHost: a\r\nX-Long: ${long}\r\nContent-Length: ${payload.length}\r\n\r\n${payload}${requestHead('/b')}`);
    await waitUntil(() => seen.length === 2, 5_000, 'both requests');
    assert.deepEqual(seen, [{ header: long, body: payload }, { header: undefined, body: '' }], 'the header and body intact, then the next request');
  });

  test('a client that pipelines big answers and reads none is reported once Node pauses it; one that reads is not', async (t) => {
    const answer = Buffer.alloc(64 * 1024, 'x');
    const { port, unread } = await slicedServer(t, (_request, response) => response.end(answer));
    const greedy = await openTcpConnection(port);
    t.after(() => greedy.close());
    greedy.socket.pause(); // reads nothing
    greedy.socket.write(requestHead('/metrics').repeat(20));
    await waitUntil(() => unread.length > 0, 5_000, 'the client to be reported');
    assert.equal(unread.length, 1, 'reported once for its read');

    const polite = await openTcpConnection(port);
    t.after(() => polite.close());
    let received = 0;
    polite.socket.on('data', (chunk: Buffer) => (received += chunk.length));
    polite.socket.write(requestHead('/metrics'));
    await waitUntil(() => received > answer.length, 5_000, 'the answer read');
    assert.equal(unread.length, 1, 'a client that reads is never reported');
  });
});
