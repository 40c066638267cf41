/**
 * The Envoy emulator's HTTP listener with every protocol it speaks, through real clients: h2c (node:http2),
 * HTTP/1.1 (raw sockets, node:http), WebSocket (ws). Each drain behaviour has its negative control. Drain
 * timeouts are a few hundred ms; every session, socket and emulator is closed by the test that opened it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test, type TestContext } from 'node:test';
import { WebSocket } from 'ws';
import { parseCliArgs } from '../../src/emulator/cli.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { closeAll, httpRequest, openHttpConnection, openTcpConnection, requestOn } from '../support/connections.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

const DRAIN_TIMEOUT_MS = 300;
const SHUTDOWN_NOTICE_ID = 2 ** 31 - 1;

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start({ httpDrainTimeoutMs: DRAIN_TIMEOUT_MS, ...options });
  t.after(() => emulator.close());
  return emulator;
}

async function admin(emulator: EnvoyEmulator, path: string): Promise<void> {
  assert.equal((await httpRequest(`http://127.0.0.1:${emulator.ports.admin}${path}`, { method: 'POST' })).status, 200);
}

function stat(emulator: EnvoyEmulator, name: string): number | undefined {
  return emulator.statValues().find((value) => value.name === `http.ingress_http.${name}`)?.value;
}

interface Goaway {
  readonly code: number;
  readonly lastStreamId: number;
  readonly at: number;
}

interface H2Response {
  readonly status: number;
  readonly body: string;
}

/** An h2c client session (prior knowledge) that records every GOAWAY it receives, with when. */
interface H2Client {
  readonly session: http2.ClientHttp2Session;
  readonly goaways: Goaway[];
  readonly closed: Promise<void>;
  get(path: string): Promise<H2Response>;
}

async function connectH2(t: TestContext, emulator: EnvoyEmulator): Promise<H2Client> {
  const session = http2.connect(`http://127.0.0.1:${emulator.ports.http}`);
  const goaways: Goaway[] = [];
  const closed = once(session, 'close').then(() => undefined);
  session.on('goaway', (code: number, lastStreamId: number) => goaways.push({ code, lastStreamId, at: Date.now() }));
  session.on('error', () => undefined); // a cut at Envoy's exit is expected in some tests
  t.after(() => session.destroy());
  await once(session, 'connect');
  const get = (path: string): Promise<H2Response> =>
    new Promise((resolve, reject) => {
      const stream = session.request({ ':path': path });
      let status = 0;
      let body = '';
      stream.setEncoding('utf8');
      stream.on('response', (headers) => (status = Number(headers[':status'])));
      stream.on('data', (chunk: string) => (body += chunk));
      stream.on('end', () => resolve({ status, body }));
      stream.on('error', reject);
      stream.end();
    });
  return { session, goaways, closed, get };
}

/** Waits until `condition` holds, polling, or fails after `timeoutMs`. */
async function until(condition: () => boolean, what: string, timeoutMs = 5_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) throw new Error(`not within ${timeoutMs} ms: ${what}`);
    await sleep(10);
  }
}

describe('Envoy emulator: HTTP/1.1, h2c and WebSocket on one listener (codec_type AUTO)', () => {
  test('both codecs answer the same routes on the same port, and the per-codec gauges follow connects and closes', async (t) => {
    const emulator = await startEmulator(t);
    const h1 = await openHttpConnection(emulator.ports.http);
    t.after(() => h1.close());
    assert.equal((await requestOn(h1.socket, '/delay/20')).body, 'ok\n');
    const h2 = await connectH2(t, emulator);
    assert.deepEqual(await h2.get('/'), { status: 200, body: 'ok\n' });
    assert.deepEqual(await h2.get('/delay/20'), { status: 200, body: 'ok\n' });
    assert.deepEqual(await h2.get('/stream?interval_ms=5&count=3'), { status: 200, body: '1\n2\n3\n' });
    const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/chat`);
    await once(ws, 'open');
    ws.send('hello');
    const [echoed] = (await once(ws, 'message')) as [Buffer];
    assert.equal(echoed.toString(), 'hello');

    assert.deepEqual(emulator.httpConnections, { active: 3, http1: 2, http2: 1, upgrades: 1 });
    assert.equal(emulator.openConnections.http, 3, 'the listener counts every connection, whatever its codec');
    assert.deepEqual(
      [stat(emulator, 'downstream_cx_http1_total'), stat(emulator, 'downstream_cx_http2_total'), stat(emulator, 'downstream_cx_upgrades_total')],
      [2, 1, 1],
    );

    ws.close();
    await once(ws, 'close');
    await until(() => emulator.httpConnections.upgrades === 0, 'the WebSocket uncounted');
    h2.session.close();
    await h2.closed;
    await h1.close();
    await until(() => emulator.httpConnections.active === 0, 'every connection uncounted');
    assert.deepEqual(emulator.httpConnections, { active: 0, http1: 0, http2: 0, upgrades: 0 });
    assert.equal(stat(emulator, 'downstream_cx_http2_active'), 0);
    assert.equal(stat(emulator, 'downstream_cx_http1_total'), 2, 'totals stay');
  });

  test('a connection that has sent nothing yet counts on the listener but in no codec gauge', async (t) => {
    const emulator = await startEmulator(t);
    const silent = await openTcpConnection(emulator.ports.http);
    t.after(() => silent.close());
    await until(() => emulator.httpConnections.active === 1, 'the connection accepted');
    assert.deepEqual(emulator.httpConnections, { active: 1, http1: 0, http2: 0, upgrades: 0 });
    silent.socket.write('PRI * HT'); // a prefix of the preface: still undecided
    await sleep(30);
    assert.equal(emulator.httpConnections.http2, 0);
  });

  test('the CLI reads --http-drain-timeout', () => {
    assert.equal(parseCliArgs(['--http-drain-timeout=250']).options.httpDrainTimeoutMs, 250);
    assert.equal(parseCliArgs(['--http-drain-timeout', '0']).options.httpDrainTimeoutMs, 0);
    assert.throws(() => parseCliArgs(['--http-drain-timeout=soon']), /http-drain-timeout/);
  });
});

describe("Envoy emulator: HTTP/2 drain (ConnectionManagerImpl's startDrainSequence and onDrainTimeout)", () => {
  test('no GOAWAY before the drain; then the shutdown notice with the next response, the final GOAWAY a drain timeout later, counted once', async (t) => {
    const emulator = await startEmulator(t);
    const client = await connectH2(t, emulator);
    await client.get('/');
    await sleep(50);
    assert.equal(client.goaways.length, 0, 'no drain yet: no GOAWAY');

    // A long stream keeps the session open past the final GOAWAY (a Node client closes once it has one).
    const long = client.get(`/stream?interval_ms=50&count=${Math.ceil((DRAIN_TIMEOUT_MS * 2) / 50)}`);
    await admin(emulator, '/healthcheck/fail');
    const before = Date.now();
    assert.deepEqual(await client.get('/'), { status: 200, body: 'ok\n' }, 'the stream that carried the notice is answered');
    const [notice] = client.goaways;
    assert.deepEqual([notice?.code, notice?.lastStreamId], [0, SHUTDOWN_NOTICE_ID], 'the shutdown notice refuses no stream');
    assert.ok((notice?.at ?? 0) >= before, 'the shutdown notice came after the drain began');
    assert.equal(stat(emulator, 'downstream_cx_drain_close'), 1);

    await sleep(DRAIN_TIMEOUT_MS / 2);
    // Under CPU load the sleep may outlast the drain timeout: only a GOAWAY that came before it is wrong. Measured
    // from `before`, which precedes the server's notice: the client may see the notice late (a busy event loop)
    // and the final GOAWAY at once, so the gap between the two as the client sees them can be short of it.
    const early = client.goaways.slice(1).filter((goaway) => goaway.at - before < DRAIN_TIMEOUT_MS - 5);
    assert.deepEqual(early, [], 'no final GOAWAY before the drain timeout');
    await until(() => client.goaways.length >= 2, 'the final GOAWAY');
    const final = client.goaways[1];
    assert.deepEqual([final?.code, final?.lastStreamId], [0, 5], 'the final GOAWAY names the last stream processed (1, 3, 5)');
    assert.ok((final?.at ?? 0) - before >= DRAIN_TIMEOUT_MS - 5, `final ${(final?.at ?? 0) - before} ms after the request that carried the notice`);
    assert.equal(client.session.destroyed, false, 'the long stream is still running: the connection stays');
    assert.equal(emulator.httpConnections.http2, 1);

    const streamed = await long;
    assert.equal(streamed.body.split('\n').length - 1, Math.ceil((DRAIN_TIMEOUT_MS * 2) / 50), 'the long stream finished whole');
    await client.closed;
    await until(() => emulator.httpConnections.http2 === 0, 'the connection closed once its streams ended');
    assert.equal(stat(emulator, 'downstream_cx_drain_close'), 1, 'one connection, counted once');
  });

  test('an idle HTTP/2 connection gets nothing until Envoy exits, while a busy one is drained', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate' });
    const idle = await connectH2(t, emulator);
    const busy = await connectH2(t, emulator);
    await idle.get('/');
    await busy.get('/');
    await admin(emulator, '/drain_listeners?graceful');
    await busy.get('/');
    await until(() => busy.goaways.length === 1, 'the busy connection gets the notice');
    await busy.closed; // a Node client closes after a GOAWAY once its streams are done
    await sleep(DRAIN_TIMEOUT_MS + 100);
    assert.deepEqual(idle.goaways, [], 'no response encoded on it: no drain signal (envoyproxy/envoy#42305)');
    assert.equal(emulator.httpConnections.http2, 1);

    await emulator.close();
    await idle.closed;
    assert.deepEqual(idle.goaways, [], 'cut at exit without a GOAWAY');
  });

  test('a long stream whose headers went out before the drain gets nothing until a new response on its connection', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate' });
    const client = await connectH2(t, emulator);
    const long = client.get('/stream?interval_ms=20');
    await until(() => emulator.httpConnections.http2 === 1, 'connected');
    await sleep(40);
    await admin(emulator, '/healthcheck/fail');
    await sleep(DRAIN_TIMEOUT_MS + 100);
    assert.equal(client.goaways.length, 0, 'the stream runs on, unsignalled (envoyproxy/envoy#14350)');
    await client.get('/');
    assert.equal(client.goaways[0]?.lastStreamId, SHUTDOWN_NOTICE_ID, 'a new response carries the notice');
    await emulator.close();
    await long; // an endless stream: only the cut ends it
    await client.closed;
    assert.equal(client.goaways.length, 1, 'no final GOAWAY at the cut');
  });
});

describe('Envoy emulator: HTTP/1.1 long streams', () => {
  test('a chunked /stream started before the drain ends whole and keeps its connection; the next response says close', async (t) => {
    const emulator = await startEmulator(t);
    const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
    t.after(() => agent.destroy());
    const get = (path: string): Promise<{ headers: http.IncomingHttpHeaders; body: string }> =>
      new Promise((resolve, reject) => {
        const request = http.get(`http://127.0.0.1:${emulator.ports.http}${path}`, { agent }, (response) => {
          let body = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (body += chunk));
          response.on('end', () => resolve({ headers: response.headers, body }));
        });
        request.on('error', reject);
      });
    const long = get('/stream?interval_ms=30&count=6');
    await until(() => emulator.httpConnections.http1 === 1, 'connected');
    await admin(emulator, '/healthcheck/fail');
    const streamed = await long;
    assert.equal(streamed.body, '1\n2\n3\n4\n5\n6\n');
    assert.equal(streamed.headers['transfer-encoding'], 'chunked');
    assert.equal(streamed.headers['connection'], 'keep-alive', 'its headers were encoded before the drain');
    assert.equal(emulator.httpConnections.http1, 1, 'the connection stays');
    assert.equal((await get('/')).headers['connection'], 'close', 'the next response on it closes it');
    await until(() => emulator.httpConnections.http1 === 0, 'closed after that response');
  });
});

describe('Envoy emulator: WebSocket upgrades (no drain signal, envoyproxy/envoy#45250)', () => {
  test('a drain sends no close frame, messages still echo, HTTP/1.1 keep-alive is closed meanwhile; exit cuts it (1006)', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate' });
    const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/`);
    ws.on('error', () => undefined);
    const closed = once(ws, 'close') as Promise<[number, Buffer]>;
    t.after(() => ws.terminate());
    await once(ws, 'open');
    const keepAlive = await openHttpConnection(emulator.ports.http);
    t.after(() => closeAll([keepAlive]));
    await admin(emulator, '/healthcheck/fail');
    await admin(emulator, '/drain_listeners?graceful&skip_exit');

    assert.equal((await requestOn(keepAlive.socket)).headers['connection'], 'close', 'control: the drain is on');
    await sleep(DRAIN_TIMEOUT_MS + 100);
    ws.send('still here');
    const [echoed] = (await once(ws, 'message')) as [Buffer];
    assert.equal(echoed.toString(), 'still here');
    assert.equal(ws.readyState, WebSocket.OPEN, 'no close frame on drain');
    assert.equal(emulator.httpConnections.upgrades, 1);

    await emulator.close();
    const [code] = await closed;
    assert.equal(code, 1006, 'cut without a close frame at exit');
  });

  test('an upgrade during a drain still gets its 101 and counts one drain close; other upgrades are refused', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate' });
    await admin(emulator, '/healthcheck/fail');
    const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/`);
    t.after(() => ws.terminate());
    await once(ws, 'open');
    assert.equal(stat(emulator, 'downstream_cx_drain_close'), 1);
    ws.close();
    await once(ws, 'close');

    const refused = await new Promise<number>((resolve, reject) => {
      const request = http.get(`http://127.0.0.1:${emulator.ports.http}/`, { agent: false, headers: { connection: 'upgrade', upgrade: 'h2c-not-really' } }, (response) => {
        response.resume();
        resolve(response.statusCode ?? 0);
      });
      request.on('upgrade', () => reject(new Error('upgraded')));
      request.on('error', reject);
    });
    assert.equal(refused, 403);
  });
});
