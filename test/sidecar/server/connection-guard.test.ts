/**
 * The ConnectionGuard (src/sidecar/server/connection-guard.ts) on a real node:http server on loopback, wired as the
 * sidecar's server wires it, with each close counted by reason and logged without flooding. Its deadlines run on a
 * clock the test moves: a connection expires only once the test has moved the clock past its bound (the guard's
 * timer looks again every few ms of real time), so no assertion depends on how fast this machine is. That one
 * connection is not cut when another is rests on order: the guard's deadlines expire oldest first, so the one that
 * would have been cut first is still open when the later one closes.
 * The server tests (test/sidecar/server-*.test.ts) hold the same bounds through the sidecar's own server.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http from 'node:http';
import type { AddressInfo, Socket } from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import type { ConnectionLimits } from '../../../src/sidecar/server/connection-limits.js';
import { ConnectionGuard } from '../../../src/sidecar/server/connection-guard.js';
import { requestHead } from '../../support/abuse.js';
import { openTcpConnection } from '../../support/connections.js';
import { MemoryLog } from '../../support/memory-log.js';
import { waitUntil } from '../../support/wait.js';

/** Deadlines of 20 on the test's clock (also how often, in real ms, the guard looks while the clock stands still). */
const LIMITS: ConnectionLimits = { requestWithinMs: 20, maxConnections: 64, maxRequestsInFlight: 8, maxUnflushedBytes: 1024 * 1024, writeWithinMs: 20 };

/** More than the kernel's socket buffers of a client that reads nothing take: the answer stays unflushed. */
const UNTAKEN = Buffer.alloc(64 * 1024 * 1024);

/** A client's socket, and the server's side of the connection, which the guard closes. */
interface Connection {
  readonly client: Socket;
  readonly server: Socket;
}

/** Waits until the guard has closed the connection. */
function closed(connection: Connection, what: string): Promise<void> {
  return waitUntil(() => connection.server.destroyed, 5_000, what);
}

interface Received {
  readonly response: http.ServerResponse;
}

async function guarded(t: TestContext, limits: Partial<ConnectionLimits> = {}) {
  const clock = { ms: 0, now: () => clock.ms };
  const log = new MemoryLog();
  const guard = new ConnectionGuard({ ...LIMITS, ...limits }, log, 60_000, clock);
  const received: Received[] = [];
  const server = http.createServer({ highWaterMark: 16 * 1024 }, (request, response) => {
    if (!guard.requestStarted(request.socket, response)) return;
    response.once('close', () => guard.requestEnded(request.socket, response));
    received.push({ response });
  });
  // Before the guard's listener, which may close the socket at once: each server side is found by its client's port
  // (taken now: a destroyed socket forgets it), and claimed by one client (a port may be used again).
  const serverSides: { readonly port: number | undefined; readonly socket: Socket; claimed: boolean }[] = [];
  server.on('connection', (socket: Socket) => serverSides.push({ port: socket.remotePort, socket, claimed: false }));
  server.on('connection', (socket: Socket) => guard.accepted(socket));
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as AddressInfo;
  t.after(async () => {
    guard.stop();
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
  });
  /**
   * A new connection and its server side, once the guard has seen it (so that the order of connections is the
   * order of these calls). One that does not read never sees the server's close: tests look at the server side.
   */
  const connect = async (options: { reads?: boolean } = {}): Promise<Connection> => {
    const client = await openTcpConnection(port);
    t.after(() => client.close());
    if (options.reads === false) client.socket.pause();
    else client.socket.resume();
    const side = () => serverSides.find(({ port, claimed }) => port === client.socket.localPort && !claimed);
    await waitUntil(() => side() !== undefined, 5_000, 'the server to accept the connection');
    const found = side() as (typeof serverSides)[number];
    found.claimed = true;
    return { client: client.socket, server: found.socket };
  };
  /** Sends requests for `paths` in one write, and waits until the server has them all (unless the guard closes it). */
  const ask = async (connection: Connection, ...paths: string[]): Promise<Received[]> => {
    const before = received.length;
    connection.client.write(paths.map((path) => requestHead(path)).join(''));
    await waitUntil(() => received.length >= before + paths.length || connection.server.destroyed, 5_000, `requests for ${paths.join(', ')}`);
    return received.slice(before);
  };
  /** Answers through the guard, as the routes do; false when the guard closed the connection instead. */
  const answer = (response: http.ServerResponse, body: string | Buffer): boolean => {
    if (!guard.answering(response, Buffer.byteLength(body))) return false;
    response.end(body);
    return true;
  };
  /** A connection whose every request is answered, the answer not taken: stalled. */
  const stalledConnection = async (): Promise<Connection> => {
    const connection = await connect({ reads: false });
    const [request] = await ask(connection, '/metrics');
    answer(request!.response, UNTAKEN);
    return connection;
  };
  return { guard, log, clock, connect, ask, answer, stalledConnection };
}

describe('ConnectionGuard: waiting and busy connections', () => {
  test('a connection waits until a request starts, is busy until it is answered, and waits again (keep-alive)', async (t) => {
    const { guard, connect, ask, answer } = await guarded(t);
    const client = await connect();
    assert.deepEqual(guard.counts, { waiting: 1, busy: 0 }, 'open, no request yet');
    const [request] = await ask(client, '/drain');
    assert.deepEqual(guard.counts, { waiting: 0, busy: 1 }, 'a request in progress');
    assert.equal(answer(request!.response, 'ok'), true, 'the answer is let through');
    await waitUntil(() => guard.counts.waiting === 1, 5_000, 'the connection to wait again');
    assert.deepEqual(guard.counts, { waiting: 1, busy: 0 }, 'answered: waiting for the next request');
  });

  test('no request head within requestWithinMs closes a connection; the clock restarts at each answer, and a request in progress is never cut', async (t) => {
    const { guard, log, clock, connect, ask, answer } = await guarded(t);
    const kept = await connect(); // accepted at 0
    const held = await connect();
    await ask(held, '/shutdown'); // never answered
    clock.ms = 10;
    const silent = await connect(); // accepted at 10
    clock.ms = 15;
    const [request] = await ask(kept, '/healthz');
    answer(request!.response, 'ok'); // waits again from 15
    await waitUntil(() => guard.counts.waiting === 2, 5_000, 'the answered connection to wait again');

    clock.ms = 10 + LIMITS.requestWithinMs; // past the silent one's bound, not past the restarted one's
    await closed(silent, 'the silent connection to be closed');
    assert.deepEqual([kept.server.destroyed, held.server.destroyed], [false, false], "older connections kept: the answered one's clock restarted, the held one is busy");
    assert.equal(guard.closed.timedOut, 1, 'counted as timed out');
    const [line] = log.lines;
    assert.equal(line?.level, 'warn', 'the first close logged at once, as a warning');
    assert.deepEqual([line?.fields['event'], line?.fields['timed_out'], line?.message], ['connections_closed', 1, `closed connections: 1 for sending no request within ${LIMITS.requestWithinMs} ms`], 'what was closed and why');

    clock.ms = 1_000;
    await closed(kept, 'the idle keep-alive connection to be closed');
    assert.equal(held.server.destroyed, false, 'the held request outlasts every bound');
    assert.equal(guard.closed.timedOut, 2, 'the keep-alive one timed out too');
  });
});

describe('ConnectionGuard: room at maxConnections', () => {
  test('a new connection closes the oldest waiting one, else the oldest stalled one; when all are busy, it is refused', async (t) => {
    const { guard, connect, ask, stalledConnection } = await guarded(t, { maxConnections: 3 });
    const stalled = await stalledConnection();
    const busy = await connect();
    await ask(busy, '/shutdown');
    const waiting = await connect();

    const second = await connect(); // at the limit: the waiting one goes, though the stalled one is older
    await closed(waiting, 'the waiting connection to make room');
    assert.equal(stalled.server.destroyed, false, 'a stalled connection goes only when none waits');
    await ask(second, '/shutdown');

    const third = await connect(); // none waiting: the stalled one goes
    await closed(stalled, 'the stalled connection to make room');
    await ask(third, '/shutdown');

    const refused = await connect(); // every connection busy
    await closed(refused, 'the new connection to be refused');
    assert.deepEqual(guard.counts, { waiting: 0, busy: 3 }, 'the limit holds, the busy ones kept');
    assert.deepEqual([guard.closed.shed, guard.closed.refused], [2, 1], 'two shed to make room, one refused');
  });
});

describe('ConnectionGuard: what a client may leave pending', () => {
  test('a request past maxRequestsInFlight closes the connection, and the requests after it are never parsed', async (t) => {
    const { guard, connect, ask } = await guarded(t, { maxRequestsInFlight: 2 });
    const client = await connect();
    const parsed = await ask(client, '/drain', '/drain', '/drain', '/drain', '/drain');
    await closed(client, 'the connection to be closed');
    assert.equal(parsed.length, 2, 'the two in flight reached the server, no more');
    assert.equal(guard.closed.tooManyInFlight, 1, 'counted as pipelining too many');
  });

  test('an answer behind more than maxUnflushedBytes of untaken answers closes the connection, whether checked before (wanted) or as it is written (answering)', async (t) => {
    const { guard, connect, ask, answer } = await guarded(t);
    const checked = await connect({ reads: false });
    const [first, second] = await ask(checked, '/metrics', '/drain');
    assert.equal(guard.wanted(first!.response), true, 'nothing untaken ahead of the first');
    answer(first!.response, UNTAKEN);
    assert.equal(guard.wanted(second!.response), false, 'nobody will take the second answer');
    await closed(checked, 'the slow reader to be closed');

    const written = await connect({ reads: false });
    const [one, two] = await ask(written, '/metrics', '/drain');
    answer(one!.response, UNTAKEN);
    assert.equal(answer(two!.response, 'small'), false, 'the answer is not written');
    await closed(written, 'the slow reader to be closed');
    assert.equal(guard.closed.slowReader, 2, 'both counted as slow readers');
    assert.equal(guard.wanted(two!.response), false, 'an answer for a closed connection is not wanted, nor counted again');
    assert.equal(guard.closed.slowReader, 2, 'still two');
  });

  test("answers queued behind a request awaiting its answer, or written ahead of their turn, are not the client's doing", async (t) => {
    const { guard, connect, ask, answer } = await guarded(t);
    const behindHeld = await connect({ reads: false });
    const [, second, third] = await ask(behindHeld, '/shutdown', '/metrics', '/drain'); // the first is held
    assert.equal(answer(second!.response, UNTAKEN), true, 'an answer behind the held request');
    assert.equal(answer(third!.response, 'small'), true, 'nothing can be taken before the held answer: nothing counts');

    const outOfTurn = await connect({ reads: false });
    const [early, late] = await ask(outOfTurn, '/drain', '/metrics');
    assert.equal(answer(late!.response, UNTAKEN), true, 'the later request answered first: it waits behind the earlier one');
    assert.equal(answer(early!.response, 'small'), true, 'the earlier answer goes out first: what waits behind it does not count');
    assert.deepEqual([behindHeld.server.destroyed, outOfTurn.server.destroyed, guard.closed.slowReader], [false, false, 0], 'no connection closed');
  });

  test('an answer not taken within writeWithinMs closes its connection; answers waiting behind a held request are not timed', async (t) => {
    const { guard, clock, connect, ask, answer, stalledConnection } = await guarded(t);
    const behindHeld = await connect({ reads: false });
    const [, queued] = await ask(behindHeld, '/shutdown', '/metrics');
    answer(queued!.response, UNTAKEN); // written first: were it timed, it would expire first
    const stalled = await stalledConnection();

    clock.ms = 1_000;
    await closed(stalled, 'the stalled connection to be closed');
    assert.equal(behindHeld.server.destroyed, false, 'the connection with a held request is kept');
    assert.equal(guard.closed.writeTimedOut, 1, 'counted as not taking its answer in time');
  });
});

describe('ConnectionGuard: closing, and the log', () => {
  test('closeWaiting closes the waiting connections now and the others once answered, uncounted; a new one is closed at once', async (t) => {
    const { guard, log, connect, ask, answer } = await guarded(t);
    const waiting = await connect();
    const busy = await connect();
    const [request] = await ask(busy, '/shutdown');
    guard.closeWaiting();
    await closed(waiting, 'the waiting connection to be closed');
    assert.equal(busy.server.destroyed, false, 'the busy one is answered first');
    answer(request!.response, 'drained');
    await closed(busy, 'the answered connection to be closed');
    const late = await connect();
    await closed(late, 'a connection opened while closing to be closed');
    assert.deepEqual(Object.values(guard.closed), [0, 0, 0, 0, 0, 0], 'closing is no bound broken: nothing counted');
    assert.deepEqual(log.lines, [], 'nor logged');
  });

  test('the first close is logged at once; those that follow within the period, as one summary (at stop() at the latest)', async (t) => {
    const { guard, log, connect, ask } = await guarded(t, { maxConnections: 1 });
    await ask(await connect(), '/shutdown');
    for (let refused = 0; refused < 3; refused += 1) await closed(await connect(), 'the new connection to be refused');
    assert.equal(log.lines.length, 1, 'one line for the first, the others held for the summary');
    guard.stop();
    assert.deepEqual(
      log.lines.map(({ level, fields, message }) => [level, fields['refused'], fields['open_connections'], fields['max_connections'], message]),
      [
        ['warn', 1, 1, 1, 'closed connections: 1 new, refused while every connection had a request awaiting its answer'],
        ['warn', 2, 1, 1, 'closed connections: 2 new, refused while every connection had a request awaiting its answer'],
      ],
      'the first at once, then the two since it',
    );
    assert.equal(guard.closed.refused, 3, 'the counter counts them all');
  });
});
