/**
 * Envoy main's proactive connection drain (runtime guard envoy.reloadable_features.use_connection_event_drain,
 * emulated from CONNECTION_EVENT_DRAIN_SINCE, i.e. ENVOY_MAIN_VERSION, after main's changelog: idle
 * connections drained when the drain sequence starts, connections with active streams in the last third of
 * the drain time, nothing when the drain time leaves no room for the HCM drain_timeout), each behaviour
 * against its negative control: the same connections on the default release (1.36.2), which nothing reaches
 * before Envoy exits, or on main with a drain time too short. Drain times are a few hundred ms; every
 * connection, session and emulator is closed by the test that opened it.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import http2 from 'node:http2';
import { once } from 'node:events';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test, type TestContext } from 'node:test';
import { WebSocket } from 'ws';
import { parseCliArgs } from '../../src/emulator/cli.js';
import { ENVOY_MAIN_VERSION, EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { httpRequest, openHttpConnection, openTcpConnection, type HeldConnection } from '../support/connections.js';
import { waitUntil, within } from '../support/wait.js';

const DRAIN_TIME_MS = 600;
const HTTP_DRAIN_TIMEOUT_MS = 150;
/** Where the last third of the drain time starts, after the drain's start. */
const LAST_THIRD_MS = (DRAIN_TIME_MS * 2) / 3;
/** Timer slack for a loaded machine, on the late side only (timers never fire early). */
const LATE_MS = 300;
const SHUTDOWN_NOTICE_ID = 2 ** 31 - 1;
const DEFAULT_VERSION = '1.36.2';

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start({ drainTimeMs: DRAIN_TIME_MS, httpDrainTimeoutMs: HTTP_DRAIN_TIMEOUT_MS, ...options });
  t.after(() => emulator.close());
  return emulator;
}

async function admin(emulator: EnvoyEmulator, path: string): Promise<void> {
  assert.equal((await httpRequest(`http://127.0.0.1:${emulator.ports.admin}${path}`, { method: 'POST' })).status, 200);
}

function drainCloses(emulator: EnvoyEmulator, prefix = 'ingress_http'): number | undefined {
  return emulator.statValues().find((stat) => stat.name === `http.${prefix}.downstream_cx_drain_close`)?.value;
}

/** When a promise settled (Date.now()), to compare with the drain's start. */
function settledAt(promise: Promise<unknown>): Promise<number> {
  return promise.then(() => Date.now());
}

interface Clients {
  readonly h1: HeldConnection;
  readonly readonly: HeldConnection;
  readonly ws: WebSocket;
  readonly wsClosed: Promise<number>;
  readonly h2: http2.ClientHttp2Session;
  readonly h2Closed: Promise<void>;
  readonly goaways: number[];
  readonly tcp: HeldConnection;
}

/**
 * One of each: an idle HTTP/1.1 keep-alive connection (one request done) on the HTTP listener and on the
 * `envoy-admin` listener, a WebSocket, an idle h2c connection (one stream done), a TCP proxy connection.
 */
async function openClients(t: TestContext, emulator: EnvoyEmulator): Promise<Clients> {
  const h1 = await openHttpConnection(emulator.ports.http);
  t.after(() => h1.close());
  const readonly = await openHttpConnection(emulator.readonlyAdminPort ?? 0);
  t.after(() => readonly.close());
  const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/chat`);
  ws.on('error', () => undefined);
  t.after(() => ws.terminate());
  const wsClosed = new Promise<number>((resolve) => ws.once('close', (code: number) => resolve(code)));
  await within(once(ws, 'open'), 5_000, 'WebSocket open');
  const h2 = http2.connect(`http://127.0.0.1:${emulator.ports.http}`);
  h2.on('error', () => undefined);
  t.after(() => h2.destroy());
  const goaways: number[] = [];
  h2.on('goaway', (_code: number, lastStreamId: number) => goaways.push(lastStreamId));
  const h2Closed = once(h2, 'close').then(() => undefined);
  const stream = h2.request({ ':path': '/' });
  stream.resume();
  await within(once(stream, 'end'), 5_000, 'h2 stream');
  const tcp = await openTcpConnection(emulator.ports.tcp);
  t.after(() => tcp.close());
  await waitUntil(() => emulator.openConnections.http === 3 && emulator.openConnections.tcp === 1 && emulator.openConnections.readonlyAdmin === 1, 5_000, 'every connection accepted');
  return { h1, readonly, ws, wsClosed, h2, h2Closed, goaways, tcp };
}

/** Idle, upgraded and HTTP/2 connections all open past the drain time and its drain_timeout, then cut at exit. */
async function assertNothingProactive(t: TestContext, emulator: EnvoyEmulator, drainTimeMs: number): Promise<void> {
  const clients = await openClients(t, emulator);
  let closedEarly = '';
  void clients.h1.closed.then(() => (closedEarly ||= 'HTTP/1.1'));
  void clients.readonly.closed.then(() => (closedEarly ||= 'envoy-admin HTTP/1.1'));
  void clients.wsClosed.then(() => (closedEarly ||= 'WebSocket'));
  void clients.h2Closed.then(() => (closedEarly ||= 'HTTP/2'));
  await admin(emulator, '/drain_listeners?graceful&skip_exit');
  await sleep(drainTimeMs + HTTP_DRAIN_TIMEOUT_MS + 300);
  assert.equal(closedEarly, '', 'nothing closed before exit');
  assert.deepEqual(clients.goaways, []);
  assert.equal(drainCloses(emulator), 0);
  assert.equal(emulator.openConnections.http, 3);
  await admin(emulator, '/quitquitquit');
  await within(Promise.all([clients.h1.closed, clients.readonly.closed, clients.wsClosed, clients.h2Closed, clients.tcp.closed]), 5_000, 'every connection cut at exit');
}

describe("Envoy emulator: Envoy main's connection-level proactive drain", () => {
  test(`${ENVOY_MAIN_VERSION}: idle HTTP/1.1 and HTTP/2 drained at the drain start, the WebSocket closed only in the last third; TCP proxy untouched`, async (t) => {
    const emulator = await startEmulator(t, { version: ENVOY_MAIN_VERSION, readonlyAdminPort: 0 });
    const clients = await openClients(t, emulator);
    let wsClosedAt: number | undefined;
    void clients.wsClosed.then(() => (wsClosedAt = Date.now()));
    const drainStart = Date.now();
    await admin(emulator, '/drain_listeners?graceful&skip_exit');
    const [h1At, readonlyAt, h2At] = await within(
      Promise.all([settledAt(clients.h1.closed), settledAt(clients.readonly.closed), settledAt(clients.h2Closed)]),
      5_000,
      'the idle HTTP/1.1 and h2 connections closed',
    );
    for (const [what, at] of [['HTTP/1.1', h1At], ['envoy-admin HTTP/1.1', readonlyAt], ['HTTP/2', h2At]] as const) {
      assert.ok(at - drainStart < LAST_THIRD_MS, `idle ${what} closed ${at - drainStart} ms after the drain start: before the last third`);
    }
    assert.equal(wsClosedAt, undefined, 'the WebSocket (an active upgraded stream) is still open when the idle ones have closed');
    // Node's client answers the notice with its own GOAWAY and, having no stream, is done: the emulator then
    // closes the connection (see the emulator's file comment), before the drain timeout's final GOAWAY.
    assert.deepEqual(clients.goaways.slice(0, 1), [SHUTDOWN_NOTICE_ID], 'the shutdown notice, as a per-response drain sends it');
    const wsAt = await within(settledAt(clients.wsClosed), 5_000, 'the WebSocket closed');
    assert.ok(wsAt - drainStart >= LAST_THIRD_MS - 5, `WebSocket closed ${wsAt - drainStart} ms after the drain start: not before the last third`);
    assert.ok(wsAt - drainStart <= DRAIN_TIME_MS + LATE_MS, `WebSocket closed ${wsAt - drainStart} ms after the drain start: within the drain time`);
    assert.equal(await clients.wsClosed, 1006, 'no close frame: the socket is closed under the upgraded stream');
    assert.equal(drainCloses(emulator), 3, 'one drain close each for the HTTP/1.1, WebSocket and HTTP/2 connections');
    assert.equal(drainCloses(emulator, 'envoy-admin'), 1);
    assert.equal(emulator.openConnections.tcp, 1, 'the TCP proxy connection stays: tcp_proxy is no HTTP connection manager');
    assert.equal(emulator.exitedWith, undefined, 'closed before Envoy exits');
    await admin(emulator, '/quitquitquit');
    await within(clients.tcp.closed, 5_000, 'the TCP proxy connection cut at exit');
  });

  test(`${ENVOY_MAIN_VERSION}: a long HTTP/2 stream gets the GOAWAY only in the last third and ends whole (default release: no GOAWAY)`, async (t) => {
    const count = 24;
    const expected = Array.from({ length: count }, (_, index) => `${index + 1}\n`).join('');
    /** A /stream on h2c started before the drain: its text, the GOAWAYs (ms after the drain start) and the session's close. */
    const streamThroughDrain = async (emulator: EnvoyEmulator): Promise<{ text: string; goawaysAt: number[]; closed: Promise<void> }> => {
      const session = http2.connect(`http://127.0.0.1:${emulator.ports.http}`);
      session.on('error', () => undefined);
      t.after(() => session.destroy());
      const goawaysAt: number[] = [];
      let drainStart = 0;
      session.on('goaway', () => goawaysAt.push(Date.now() - drainStart));
      const closed = once(session, 'close').then(() => undefined);
      const stream = session.request({ ':path': `/stream?interval_ms=50&count=${count}` });
      stream.setEncoding('utf8');
      let text = '';
      stream.on('data', (chunk: string) => (text += chunk));
      stream.on('error', () => undefined);
      await within(once(stream, 'response'), 5_000, 'the stream\'s headers');
      drainStart = Date.now();
      await admin(emulator, '/drain_listeners?graceful&skip_exit');
      await within(once(stream, 'end'), 5_000, 'the stream');
      return { text, goawaysAt, closed };
    };
    const main = await startEmulator(t, { version: ENVOY_MAIN_VERSION });
    const released = await startEmulator(t, {});
    const [onMain, onReleased] = await Promise.all([streamThroughDrain(main), streamThroughDrain(released)]);
    assert.equal(onMain.text, expected, 'every chunk: the stream was not cut');
    assert.equal(onReleased.text, expected);
    const [noticeAt] = onMain.goawaysAt;
    assert.ok(noticeAt !== undefined, 'main sent a GOAWAY');
    assert.ok(noticeAt >= LAST_THIRD_MS - 5 && noticeAt <= DRAIN_TIME_MS + LATE_MS, `the GOAWAY came ${noticeAt} ms after the drain start: in the last third`);
    await within(onMain.closed, 5_000, 'main closed the connection once its stream ended and the drain timeout passed');
    assert.equal(drainCloses(main), 1);
    assert.deepEqual(onReleased.goawaysAt, [], 'the default release sends nothing on a connection whose only stream started before the drain');
    assert.deepEqual([released.openConnections.http, drainCloses(released)], [1, 0]);
  });

  test(`negative control, ${DEFAULT_VERSION}: the same connections stay open past the drain time, until Envoy exits`, async (t) => {
    const emulator = await startEmulator(t, { readonlyAdminPort: 0 });
    assert.equal(emulator.envoyVersion, DEFAULT_VERSION);
    await assertNothingProactive(t, emulator, DRAIN_TIME_MS);
  });

  for (const drainTimeMs of [HTTP_DRAIN_TIMEOUT_MS, HTTP_DRAIN_TIMEOUT_MS - 50]) {
    test(`${ENVOY_MAIN_VERSION}, drain time ${drainTimeMs} ms, not longer than the HCM drain_timeout (${HTTP_DRAIN_TIMEOUT_MS} ms): nothing proactive`, async (t) => {
      const emulator = await startEmulator(t, { version: ENVOY_MAIN_VERSION, readonlyAdminPort: 0, drainTimeMs });
      await assertNothingProactive(t, emulator, drainTimeMs);
    });
  }

  test('immediate: an idle connection is drained at the drain start, as with gradual (negative control: the default release)', async (t) => {
    const main = await startEmulator(t, { version: ENVOY_MAIN_VERSION, drainStrategy: 'immediate', drainTimeMs: 60_000 });
    const released = await startEmulator(t, { drainStrategy: 'immediate', drainTimeMs: 60_000 });
    const mainIdle = await openHttpConnection(main.ports.http);
    t.after(() => mainIdle.close());
    const releasedIdle = await openHttpConnection(released.ports.http);
    t.after(() => releasedIdle.close());
    await admin(main, '/drain_listeners?graceful&skip_exit');
    await admin(released, '/drain_listeners?graceful&skip_exit');
    await within(mainIdle.closed, 5_000, 'the idle connection closed at the drain start');
    await sleep(200);
    assert.equal(released.openConnections.http, 1, 'the default release leaves it until its next response');
  });

  test('no drain sequence, no connection drain: /healthcheck/fail alone, or an inbound-only drain of an UNSPECIFIED listener', async (t) => {
    const failed = await startEmulator(t, { version: ENVOY_MAIN_VERSION, drainStrategy: 'immediate' });
    const inboundOnly = await startEmulator(t, { version: ENVOY_MAIN_VERSION, drainStrategy: 'immediate' });
    const inbound = await startEmulator(t, { version: ENVOY_MAIN_VERSION, drainStrategy: 'immediate', httpListener: { direction: 'inbound' } });
    const held = await Promise.all([failed, inboundOnly, inbound].map((emulator) => openHttpConnection(emulator.ports.http)));
    t.after(() => Promise.all(held.map((connection) => connection.close())));
    await admin(failed, '/healthcheck/fail');
    await admin(inboundOnly, '/drain_listeners?graceful&skip_exit&inboundonly');
    await admin(inbound, '/drain_listeners?graceful&skip_exit&inboundonly');
    await within(held[2]!.closed, 5_000, 'the INBOUND listener\'s idle connection closed');
    await sleep(200);
    assert.deepEqual([failed.openConnections.http, inboundOnly.openConnections.http], [1, 1]);
  });

  test('a busy HTTP/1.1 connection (a long stream) is not cut: the stream ends whole, then the connection closes (default release: stays)', async (t) => {
    const main = await startEmulator(t, { version: ENVOY_MAIN_VERSION });
    const released = await startEmulator(t, {});
    const count = 12;
    const expected = Array.from({ length: count }, (_, index) => `${index + 1}\n`).join('');
    /** A chunked /stream started before the drain, on a keep-alive connection; its body and its socket's close. */
    const streamThroughDrain = async (emulator: EnvoyEmulator): Promise<{ text: string; socketClosed: Promise<void> }> => {
      const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
      t.after(() => agent.destroy());
      const started = await new Promise<{ body: Promise<string>; socketClosed: Promise<void>; headers: http.IncomingHttpHeaders }>((resolve, reject) => {
        const request = http.get(`http://127.0.0.1:${emulator.ports.http}/stream?interval_ms=50&count=${count}`, { agent }, (response) => {
          let text = '';
          response.setEncoding('utf8');
          response.on('data', (chunk: string) => (text += chunk));
          const socketClosed = once(request.socket!, 'close').then(() => undefined);
          resolve({ body: once(response, 'end').then(() => text), socketClosed, headers: response.headers });
        });
        request.on('error', reject);
      });
      assert.notEqual(started.headers['connection'], 'close', 'its headers went out before the drain');
      await admin(emulator, '/drain_listeners?graceful&skip_exit');
      return { text: await within(started.body, 5_000, 'the stream'), socketClosed: started.socketClosed };
    };
    const [onMain, onReleased] = await Promise.all([streamThroughDrain(main), streamThroughDrain(released)]);
    assert.equal(onMain.text, expected, 'every chunk: the stream was not cut');
    assert.equal(onReleased.text, expected);
    await within(onMain.socketClosed, 5_000, 'the connection closed once the stream ended and the drain timeout passed');
    assert.equal(drainCloses(main), 1);
    let releasedClosed = false;
    void onReleased.socketClosed.then(() => (releasedClosed = true));
    await sleep(HTTP_DRAIN_TIMEOUT_MS + 300);
    assert.equal(releasedClosed, false, 'the default release leaves the idle keep-alive connection open');
    assert.deepEqual([released.openConnections.http, drainCloses(released)], [1, 0]);
  });

  test(`${ENVOY_MAIN_VERSION} is a version: options, /server_info and the CLI take it; other suffixes are refused`, async (t) => {
    const emulator = await startEmulator(t, { version: ENVOY_MAIN_VERSION });
    const info = JSON.parse((await httpRequest(`http://127.0.0.1:${emulator.ports.admin}/server_info`)).body) as { version: string };
    assert.match(info.version, /^[0-9a-f]{40}\/1\.41\.0-dev\/Clean\/RELEASE\/BoringSSL$/);
    assert.equal(parseCliArgs([`--version=${ENVOY_MAIN_VERSION}`]).options.version, ENVOY_MAIN_VERSION);
    assert.throws(() => parseCliArgs(['--version=1.41.0-rc1']), /--version: "1\.41\.0-rc1" is not a version/);
    await assert.rejects(EnvoyEmulator.start({ version: '1.41.0-rc1' }), /version: "1\.41\.0-rc1" is not X\.Y\.Z/);
  });
});
