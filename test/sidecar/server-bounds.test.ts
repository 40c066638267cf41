/**
 * The drain server's per-connection bounds, one at a time (the others lifted), in-process with a stub drain and
 * short limits: requests in flight, answers left untaken, the write timeout; that a held /shutdown, and the
 * answers queued behind it, are never cut by any of them; refusals logged in aggregate and counted; GET /ready.
 * The built sidecar under the same clients: server-abuse.test.ts.
 */
import assert from 'node:assert/strict';
import diagnostics from 'node:diagnostics_channel';
import { performance } from 'node:perf_hooks';
import { describe, test, type TestContext } from 'node:test';
import { SIDECAR_PATHS } from '../../src/config/endpoints.js';
import type { DrainOutcome } from '../../src/sidecar/drain.js';
import { startDrainServer, type DrainServer, type ReportPeriods } from '../../src/sidecar/server.js';
import type { ConnectionLimits } from '../../src/sidecar/server/connection-limits.js';
import type { DrainEndpoints } from '../../src/sidecar/server/routes.js';
import { callsOverKeepAlive, requestHead, writeAndReadAnswers } from '../support/abuse.js';
import { httpRequest, openTcpConnection, type HeldConnection, type SimpleResponse } from '../support/connections.js';
import { MemoryLog } from '../support/memory-log.js';
import { waitUntil, within } from '../support/wait.js';
import { anOutcome } from '../support/drain-outcomes.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const TOKEN = 'bounds-test-token';
const AUTH = { authorization: `Bearer ${TOKEN}` };
const LIFTED: ConnectionLimits = { requestWithinMs: 60_000, maxConnections: 512, maxRequestsInFlight: Infinity, maxUnflushedBytes: Infinity, writeWithinMs: Infinity };

const DRAINED: DrainOutcome = anOutcome({ reason: 'connections-closed', durationMs: 1_000 });

/** A drain that ends when the test says, and counts the calls that reached it. */
class StubDrain implements DrainEndpoints {
  snapshots = 0;
  ready = { ready: false, detail: "Envoy's admin API at 127.0.0.1:9901 has not answered yet" };
  private release: ((outcome: DrainOutcome) => void) | undefined;
  private readonly outcome = new Promise<DrainOutcome>((resolve) => (this.release = resolve));

  shutdown(): Promise<DrainOutcome> {
    return this.outcome;
  }

  wait(): Promise<DrainOutcome | undefined> {
    return this.outcome;
  }

  snapshot(): object {
    this.snapshots += 1;
    return { state: 'idle' };
  }

  readiness(): { ready: boolean; detail: string } {
    return this.ready;
  }

  finish(): void {
    this.release?.(DRAINED);
  }
}

interface Served {
  readonly server: DrainServer;
  readonly drain: StubDrain;
  readonly log: MemoryLog;
  url(path: string): string;
}

async function serve(
  t: TestContext,
  limits: Partial<ConnectionLimits>,
  options: { readonly metricsBody?: string; readonly reportPeriods?: Partial<ReportPeriods> } = {},
): Promise<Served> {
  const drain = new StubDrain();
  const log = new MemoryLog();
  const { metricsBody } = options;
  const server = await startDrainServer({
    drain,
    waitWindowMs: 100,
    host: '127.0.0.1',
    port: 0,
    log,
    shutdownToken: TOKEN,
    connectionLimits: limits,
    ...(metricsBody === undefined ? {} : { metrics: () => Promise.resolve({ contentType: 'text/plain', body: metricsBody }) }),
    ...(options.reportPeriods === undefined ? {} : { reportPeriods: options.reportPeriods }),
  });
  t.after(async () => {
    drain.finish();
    await server.close();
  });
  return { server, drain, log, url: (path) => `http://127.0.0.1:${server.port}${path}` };
}

/**
 * A raw connection that reads nothing until told: what it was sent stays in the kernel's buffers, then in the
 * server's. Paused from the start, it does not even see the server close it: the tests wait on the server's counters.
 */
async function unreadConnection(t: TestContext, port: number): Promise<HeldConnection> {
  const connection = await openTcpConnection(port);
  connection.socket.pause();
  t.after(() => connection.close());
  return connection;
}

describe('drain server: requests in flight on one connection', () => {
  test('four pipelined requests are answered; a fifth before they are closes the connection, and Node parses no further', async (t) => {
    const { server, drain, log } = await serve(t, { ...LIFTED, maxRequestsInFlight: 4 });
    const reader = await openTcpConnection(server.port);
    t.after(() => reader.close());
    assert.deepEqual(await writeAndReadAnswers(reader.socket, requestHead('/drain').repeat(4), 4), [200, 200, 200, 200]);
    assert.deepEqual(await writeAndReadAnswers(reader.socket, requestHead('/drain').repeat(4), 4), [200, 200, 200, 200], 'answered ones no longer count');

    let parsed = 0;
    const count = (): void => void (parsed += 1);
    diagnostics.subscribe('http.server.request.start', count);
    t.after(() => diagnostics.unsubscribe('http.server.request.start', count));
    const flooder = await unreadConnection(t, server.port);
    const before = drain.snapshots;
    flooder.socket.write(requestHead('/drain').repeat(2_000));
    await waitUntil(() => server.counters.connectionsClosed.tooManyInFlight === 1, 5_000, 'the pipelining connection to be closed');
    assert.equal(parsed, 5, 'the four requests within the bound and the fifth that broke it, no further');
    // Issue 28: their answers are computed once the read is parsed, and their connection is closed by then.
    assert.equal(drain.snapshots - before, 0, 'nothing rendered for a connection already closed');
    assert.equal(log.events('connections_closed')[0]?.['too_many_in_flight'], 1);
    assert.equal(reader.socket.destroyed, false, 'the client that reads its answers is kept');
  });

  for (const [what, head] of [
    ['an Expect header other than 100-continue (Node would answer 417 itself)', requestHead('/drain', { expect: 'x' })],
    ['no Host header (Node would answer 400 itself)', 'GET /drain HTTP/1.1\r\n\r\n'],
  ] as const) {
    test(`heads with ${what} are bounded like any other`, async (t) => {
      const { server, drain } = await serve(t, { ...LIFTED, maxRequestsInFlight: 4 });
      // Every request Node's server parses, whether or not it tells the server (it answers these two kinds itself).
      let parsed = 0;
      const count = (): void => void (parsed += 1);
      diagnostics.subscribe('http.server.request.start', count);
      t.after(() => diagnostics.unsubscribe('http.server.request.start', count));
      const flooder = await unreadConnection(t, server.port);
      flooder.socket.write(head.repeat(2_000));
      await waitUntil(() => server.counters.connectionsClosed.tooManyInFlight === 1, 5_000, 'the pipelining connection to be closed');
      assert.ok(drain.snapshots <= 4, `${drain.snapshots} requests reached the routes`);
      assert.ok(parsed <= 8, `${parsed} requests parsed from one read (unbounded, a 64 KiB read held over 100)`);
    });
  }

  test('a request body nobody reads, sent with its head, does not pass for pipelining: the request behind it is answered too', async (t) => {
    const { server } = await serve(t, { ...LIFTED, maxRequestsInFlight: 4 });
    const client = await openTcpConnection(server.port);
    t.after(() => client.close());
    const body = 'b'.repeat(200 * 1024);
    const withBody = `GET /healthz HTTP/1.1\r\nHost: sidecar\r\nContent-Length: ${body.length}\r\n\r\n${body}`;
    assert.deepEqual(await writeAndReadAnswers(client.socket, withBody + requestHead('/ready'), 2), [200, 503]);
    assert.equal(server.counters.connectionsClosed.tooManyInFlight, 0);
  });

  test('negative control: without the bound, the same 2,000 pipelined requests all reach the routes', async (t) => {
    const { server, drain } = await serve(t, LIFTED);
    // Counted as Node hands them to the server: /drain is rendered once a turn of the event loop, not once a request.
    let served = 0;
    const count = (): void => void (served += 1);
    diagnostics.subscribe('http.server.request.start', count);
    t.after(() => diagnostics.unsubscribe('http.server.request.start', count));
    const flooder = await unreadConnection(t, server.port);
    flooder.socket.write(requestHead('/drain').repeat(2_000));
    await waitUntil(() => served === 2_000, 10_000, `2,000 requests served (${served})`);
    assert.ok(drain.snapshots >= 1 && drain.snapshots < 2_000, `${drain.snapshots} renderings of /drain for 2,000 requests`);
    assert.equal(flooder.socket.destroyed, false);
    assert.equal(server.counters.connectionsClosed.tooManyInFlight, 0);
  });
});

describe('drain server: answers the client does not take', () => {
  // 256 KiB answers: the kernel's socket buffers of a client that does not read hold a few of them at most.
  const BIG_ANSWER = 'x'.repeat(256 * 1024);

  test('an answer written while more than maxUnflushedBytes of earlier ones are untaken closes the connection', async (t) => {
    const { server, log } = await serve(t, { ...LIFTED, maxUnflushedBytes: 32 * 1024 }, { metricsBody: BIG_ANSWER });
    const client = await unreadConnection(t, server.port);
    let sent = 0;
    // One request at a time, never reading: the kernel takes the first answers, then one stays untaken.
    while (!client.socket.destroyed && sent < 200) {
      client.socket.write(requestHead('/metrics'));
      sent += 1;
      await new Promise((resolve) => setTimeout(resolve, 5));
      if (server.counters.connectionsClosed.slowReader > 0) break;
    }
    await waitUntil(() => server.counters.connectionsClosed.slowReader === 1, 5_000, 'the slow reader to be closed');
    t.diagnostic(`closed after ${sent} requests for 256 KiB answers`);
    assert.equal(server.connections.busy + server.connections.waiting, 0);
    assert.equal(log.events('connections_closed')[0]?.['slow_reader'], 1);
  });

  test('an answer not taken within writeWithinMs closes the connection; one being read is not cut', async (t) => {
    const writeWithinMs = 500;
    const { server, url } = await serve(t, { ...LIFTED, writeWithinMs }, { metricsBody: 'x'.repeat(16 * 1024 * 1024) });
    // The client that reads takes the 16 MiB well within the limit.
    const read = await httpRequest(url('/metrics'), { timeoutMs: 10_000 });
    assert.equal(read.body.length, 16 * 1024 * 1024);

    const client = await unreadConnection(t, server.port);
    const sentAt = performance.now();
    client.socket.write(requestHead('/metrics'));
    await waitUntil(() => server.counters.connectionsClosed.writeTimedOut === 1, 10_000, 'the connection that does not read to be closed');
    const after = performance.now() - sentAt;
    t.diagnostic(`closed ${after.toFixed(0)} ms after the request (limit ${writeWithinMs} ms)`);
    assert.ok(after >= writeWithinMs - 1, `closed after ${after.toFixed(0)} ms`);
    assert.deepEqual(server.counters.connectionsClosed, { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 1 });
  });
});

describe('drain server: the kubelet is never cut by the bounds', () => {
  test('two held /shutdown calls, probes, and a held /shutdown with answers pipelined behind it outlast every bound many times', async (t) => {
    const tight: ConnectionLimits = { requestWithinMs: 100, maxConnections: 16, maxRequestsInFlight: 4, maxUnflushedBytes: 1, writeWithinMs: 100 };
    const { server, drain, url } = await serve(t, tight);
    const settled: SimpleResponse[] = [];
    const hook = async (): Promise<SimpleResponse> => {
      const answer = await httpRequest(url('/shutdown'), { headers: AUTH, timeoutMs: 10_000 });
      settled.push(answer);
      return answer;
    };
    const hooks = [hook(), hook()];
    // Answers queued behind a held request cannot be taken before it: neither their bytes nor their wait count.
    const pipelined = await unreadConnection(t, server.port);
    pipelined.socket.write(requestHead('/shutdown', AUTH) + requestHead('/healthz') + requestHead('/drain'));
    await waitUntil(() => server.connections.busy === 3, 5_000, 'the three connections to be received');

    for (let probe = 0; probe < 10; probe++) {
      assert.equal((await httpRequest(url('/healthz'))).status, 200);
      await new Promise((resolve) => setTimeout(resolve, 50));
    }
    assert.equal(settled.length, 0, 'held for 5 times every bound');
    assert.equal(server.connections.busy, 3);

    drain.finish();
    assert.deepEqual((await Promise.all(hooks)).map((answer) => answer.status), [200, 200]);
    pipelined.socket.resume();
    assert.deepEqual(await writeAndReadAnswers(pipelined.socket, '', 3), [200, 200, 200]);
    assert.deepEqual(server.counters.connectionsClosed, { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 0 });
  });
});

describe('drain server: calls without the token', () => {
  test('the first refusal is logged at once, then one line per period with the count and the last caller; counted for good', async (t) => {
    const refusalsMs = 300;
    const { server, log } = await serve(t, {}, { reportPeriods: { refusalsMs } });
    const lines = (): Record<string, unknown>[] => log.events('shutdown_refused');

    assert.equal((await httpRequest(`http://127.0.0.1:${server.port}/wait`)).status, 401);
    assert.deepEqual(lines().map((line) => [line['refused'], line['total'], line['path'], line['remote']]), [[1, 1, '/wait', '127.0.0.1']]);

    const startedAt = performance.now();
    const statuses = await callsOverKeepAlive(server.port, { head: requestHead('/shutdown', { authorization: 'Bearer nope' }), total: 500, connections: 5, depth: 4 });
    assert.deepEqual([...statuses], [[401, 500]]);
    await waitUntil(() => lines().reduce((sum, line) => sum + Number(line['refused']), 0) === 501, 5_000, 'every refusal reported');
    const elapsed = performance.now() - startedAt;
    const summaries = lines().slice(1);
    t.diagnostic(`${summaries.length} summary lines for 500 refusals in ${elapsed.toFixed(0)} ms (period ${refusalsMs} ms)`);
    assert.ok(summaries.length <= 1 + Math.ceil(elapsed / refusalsMs), `${summaries.length} lines`);
    assert.deepEqual([summaries.at(-1)?.['total'], summaries.at(-1)?.['path'], summaries.at(-1)?.['remote']], [501, '/shutdown', '127.0.0.1']);
    assert.equal(server.counters.unauthorized, 501);

    // A quiet period ends the burst: the next refusal is logged at once again.
    const quietLines = lines().length;
    await new Promise((resolve) => setTimeout(resolve, 2 * refusalsMs + 50));
    assert.equal(lines().length, quietLines, 'nothing to report, no line');
    assert.equal((await httpRequest(`http://127.0.0.1:${server.port}/shutdown`)).status, 401);
    assert.deepEqual([lines().at(-1)?.['refused'], lines().at(-1)?.['total']], [1, 502]);
    assert.equal(server.counters.unauthorized, 502, 'cumulative, never reset by a line');
  });

  test('close() writes the refusals not yet reported', async (t) => {
    const { server, log } = await serve(t, {}, { reportPeriods: { refusalsMs: 60_000 } });
    await callsOverKeepAlive(server.port, { head: requestHead('/shutdown'), total: 20, connections: 1, depth: 4 });
    assert.equal(log.events('shutdown_refused').length, 1);
    await server.close();
    assert.deepEqual(log.events('shutdown_refused').map((line) => [line['refused'], line['total']]), [[1, 1], [19, 20]]);
  });
});

describe('drain server: GET /ready', () => {
  test("503 with the detail until the drain says ready, then 200 'ready: <detail>'; GET and HEAD, no token", async (t) => {
    const { drain, url } = await serve(t, {});
    const notReady = await httpRequest(url('/ready'));
    assert.deepEqual([notReady.status, notReady.body], [503, `${drain.ready.detail}\n`]);
    assert.match(String(notReady.headers['content-type']), /^text\/plain/);

    drain.ready = { ready: true, detail: "Envoy's admin API answered at 127.0.0.1:9901" };
    const ready = await httpRequest(url('/ready'));
    assert.deepEqual([ready.status, ready.body], [200, "ready: Envoy's admin API answered at 127.0.0.1:9901\n"]);
    const head = await httpRequest(url('/ready'), { method: 'HEAD' });
    assert.deepEqual([head.status, head.body, head.headers['content-length']], [200, '', String(Buffer.byteLength(ready.body))]);
    const post = await httpRequest(url('/ready'), { method: 'POST' });
    assert.deepEqual([post.status, post.headers['allow']], [405, 'GET, HEAD']);
    const missing = await httpRequest(url('/nope'));
    assert.equal(missing.status, 404);
    assert.ok(missing.body.includes(SIDECAR_PATHS.ready), missing.body);
  });
});

describe('drain server: closing', () => {
  test('close() leaves no connection open, even those the bounds hold', async (t) => {
    const { server } = await serve(t, {});
    const silent = await openTcpConnection(server.port);
    t.after(() => silent.close());
    const pipelined = await unreadConnection(t, server.port);
    pipelined.socket.write(requestHead('/healthz').repeat(3));
    await waitUntil(() => server.connections.waiting + server.connections.busy === 2, 5_000, 'both connections received');
    await within(server.close(), 5_000, 'close()');
    pipelined.socket.resume();
    await within(Promise.all([silent.closed, pipelined.closed]), 5_000, 'the connections to be closed');
    assert.deepEqual(server.connections, { waiting: 0, busy: 0 }, 'no connection is left open after close()');
  });
});
