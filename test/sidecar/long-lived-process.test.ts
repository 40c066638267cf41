/**
 * long-lived-grace end to end: the built sidecar (`npm run build` first) against the Envoy emulator, with real
 * TCP-proxy connections held open. Envoy's tcp_proxy gives such connections no drain signal, so without the
 * setting they hold the pod to the deadline; with it, /shutdown returns after the grace, counting them.
 * Exact timings are asserted on virtual time in drain.test.ts; wall-clock bounds here only catch gross errors.
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import http2 from 'node:http2';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import WebSocket from 'ws';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { closeAll, httpRequest, openTcpConnections } from '../support/connections.js';
import { sampleOf } from '../support/prometheus.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';

const GRACE_MS = 500;
/** Scheduling noise on a busy 2-core machine: far below the deadline the control waits for. */
const NOISE_MS = 1_500;
const HELD = 3;

async function setUp(t: TestContext, flags: readonly string[]): Promise<{ emulator: EnvoyEmulator; sidecar: SidecarProcess }> {
  const emulator = await EnvoyEmulator.start();
  t.after(() => emulator.close());
  const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, '--check-interval=50ms', '--check-delay=0', ...flags]);
  t.after(() => sidecar.kill());
  const held = await openTcpConnections(emulator.ports.tcp, HELD);
  t.after(() => closeAll(held));
  return { emulator, sidecar };
}

/** GET /shutdown, timed from the call to its answer. */
async function timedShutdown(sidecar: SidecarProcess): Promise<{ status: number; body: string; elapsedMs: number }> {
  const started = performance.now();
  const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 30_000 });
  return { status: response.status, body: response.body, elapsedMs: performance.now() - started };
}

describe('sidecar process: long-lived-grace with TCP-proxy connections held open', () => {
  test(`--long-lived-grace=${GRACE_MS}ms: /shutdown returns after the grace, and /shutdown, /drain, the log and /metrics count the ${HELD} left`, async (t) => {
    const { sidecar } = await setUp(t, [`--long-lived-grace=${GRACE_MS}ms`, '--drain-timeout=20s']);
    const shutdown = await timedShutdown(sidecar);
    assert.equal(shutdown.status, 200, shutdown.body);
    assert.match(shutdown.body, new RegExp(`^drained: 0 drainable connections open \\(at most 0 allowed\\) after [\\d.]+s; ${HELD} long-lived connections \\(upgraded such as WebSocket, or TCP proxy`));
    assert.ok(shutdown.elapsedMs >= GRACE_MS, `returned after ${shutdown.elapsedMs} ms, before the grace`);
    assert.ok(shutdown.elapsedMs < GRACE_MS + NOISE_MS, `returned after ${shutdown.elapsedMs} ms, long after the grace`);

    const drain = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.deepEqual(
      [drain['state'], drain['reason'], drain['openConnections'], drain['drainableConnections'], drain['longLivedConnections'], drain['longLivedGraceMs']],
      ['drained', 'long-lived-left', HELD, 0, HELD, GRACE_MS],
    );
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.deepEqual([finished['reason'], finished['long_lived_connections']], ['long-lived-left', HELD]);
    const metrics = (await httpRequest(sidecar.url('/metrics'))).body;
    assert.equal(sampleOf(metrics, 'shutdown_manager_long_lived_connections'), HELD);
    assert.equal(sampleOf(metrics, 'shutdown_manager_drain_state{state="drained"}'), 1);
  });

  test('control: without it, the same connections hold /shutdown to --drain-timeout, which names them as long-lived', async (t) => {
    const { sidecar } = await setUp(t, ['--drain-timeout=2s']);
    const shutdown = await timedShutdown(sidecar);
    assert.equal(shutdown.status, 503, shutdown.body);
    assert.match(shutdown.body, new RegExp(`with ${HELD} connections still open \\(at most 0 wanted\\), ${HELD} of them long-lived .*long-lived-grace`));
    assert.ok(shutdown.elapsedMs >= 2_000, `returned after ${shutdown.elapsedMs} ms, before the deadline`);
    const drain = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.deepEqual([drain['reason'], drain['longLivedConnections'], drain['longLivedGraceMs']], ['deadline', HELD, null]);
  });
});

// Issue 33, case 4: NLB-style TCP checks (connect, close) on a TCP-proxy listener, with the observed rule on. Each is a
// new connection on a listener without an HTTP connection manager, which Envoy's stats cannot tell from a client: they
// hold the silence the rule waits for. long-lived-grace, which promises to let long-lived connections go after the
// grace, waited for that silence too, so such a drain ran to its deadline whatever the grace.
describe('sidecar process: long-lived-grace ends a TCP-proxy drain that a load balancer\'s TCP checks keep busy', () => {
  for (const grace of [true, false]) {
    test(grace ? 'with --long-lived-grace=1s: drained after the grace, the held TCP connections left to be cut' : 'control: without it, the TCP checks hold the drain to its deadline', async (t) => {
      const { emulator, sidecar } = await setUp(t, ['--quiet-period=1s', '--drain-timeout=5s', ...(grace ? ['--long-lived-grace=1s'] : [])]);
      let stopped = false;
      const checks = (async () => {
        // A TCP health check every 200 ms, until the drain is answered (at most 10 s of them).
        for (let i = 0; i < 50 && !stopped; i += 1) {
          await new Promise<void>((resolve) => {
            const socket = net.connect({ host: '127.0.0.1', port: emulator.ports.tcp }, () => socket.destroy());
            socket.on('close', () => resolve());
            socket.on('error', () => resolve());
          });
          await new Promise((resolve) => setTimeout(resolve, 200));
        }
      })();
      const shutdown = await timedShutdown(sidecar);
      stopped = true;
      await checks;
      const drain = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
      if (grace) {
        assert.equal(shutdown.status, 200, shutdown.body);
        assert.deepEqual([drain['reason'], drain['longLivedConnections']], ['long-lived-left', HELD], 'drained, the held connections counted as left');
        assert.ok(shutdown.elapsedMs < 4_000, `returned after ${Math.round(shutdown.elapsedMs)} ms: the TCP checks held it past the grace`);
      } else {
        assert.equal(shutdown.status, 503, shutdown.body);
        assert.equal(drain['reason'], 'deadline', 'the TCP checks pass for clients, and hold the silence');
      }
    });
  }
});

describe('sidecar process: long-lived-grace with WebSockets and HTTP/2 connections', () => {
  test('an open WebSocket is long-lived (http.<prefix>.downstream_cx_upgrades_active); an HTTP/2 connection that streams is not, and holds the drain past the grace', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const socket = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/`);
    t.after(() => socket.terminate());
    await once(socket, 'open');
    const session = http2.connect(`http://127.0.0.1:${emulator.ports.http}`);
    t.after(() => session.destroy());
    session.on('error', () => undefined);
    // A long server stream, opened before the drain: Envoy sends its connection nothing until a new response.
    const stream = session.request({ ':path': '/stream?interval_ms=100&count=30' });
    stream.on('error', () => undefined);
    stream.resume();
    await once(stream, 'response');

    const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, '--check-interval=50ms', '--check-delay=0', `--long-lived-grace=${GRACE_MS}ms`, '--drain-timeout=20s']);
    t.after(() => sidecar.kill());
    const shutdown = timedShutdown(sidecar);
    let answeredAt = Infinity;
    void shutdown.then(() => (answeredAt = performance.now()));
    const during = await sidecar.waitForLog((line) => line['event'] === 'poll' && Number(line['elapsed_ms']) > GRACE_MS + 200, 10_000);
    assert.deepEqual([during['drainable_connections'], during['long_lived_connections']], [1, 1], 'the WebSocket is long-lived, the streaming HTTP/2 connection drainable');
    // The stream ends by itself after 3 s, and the client closes its connection: only then may the drain end.
    await once(stream, 'close');
    const streamEndedAt = performance.now();
    assert.equal(answeredAt, Infinity, '/shutdown returned while the HTTP/2 stream still ran');
    session.close();
    const answer = await shutdown;
    assert.equal(answer.status, 200, answer.body);
    assert.ok(answeredAt >= streamEndedAt, 'the drain answered only after the stream ended');
    const drain = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.deepEqual([drain['reason'], drain['longLivedConnections']], ['long-lived-left', 1]);
  });
});
