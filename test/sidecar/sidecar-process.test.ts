/**
 * The built sidecar, spawned as `node dist/entry.cjs mode=sidecar …` (the image's entry point) against the Envoy emulator, with real
 * client connections held open. Run `npm run build` first (npm test does).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { closeAll, httpRequest, openHttpConnection, openTcpConnections, requestOn, type SimpleResponse } from '../support/connections.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { freePort } from '../support/ports.js';
import type { LogLine } from '../support/process.js';
import { runSidecarToExit, spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';
import { sampleOf } from '../support/prometheus.js';

const CHECK_INTERVAL_MS = 50;
/**
 * Wall-clock bounds only catch gross errors (waiting another check delay, a hung admin call): on a busy
 * 2-core CI machine scheduling noise reaches hundreds of ms. Precise timing is asserted on virtual time in
 * drain.test.ts, and by counting polls here; the bench reports the real figures.
 */
const NOISE_MS = 1_000;

async function setUp(
  t: TestContext,
  flags: readonly string[] = [],
  emulatorOptions: EnvoyEmulatorOptions = {},
): Promise<{ emulator: EnvoyEmulator; sidecar: SidecarProcess }> {
  const emulator = await EnvoyEmulator.start(emulatorOptions);
  t.after(() => emulator.close());
  const sidecar = await spawnSidecar([
    `--admin-port=${emulator.ports.admin}`,
    `--check-interval=${CHECK_INTERVAL_MS}ms`,
    '--check-delay=0',
    '--drain-timeout=20s',
    ...flags,
  ]);
  t.after(() => sidecar.kill());
  return { emulator, sidecar };
}

/** A /shutdown call whose settle time is recorded, so that a test can tell it is still blocked. */
function callShutdown(sidecar: SidecarProcess): { response: Promise<SimpleResponse>; settledAt: () => number | undefined } {
  let settledAt: number | undefined;
  const response = httpRequest(sidecar.url('/shutdown'), { timeoutMs: 30_000 });
  response.then(
    () => (settledAt = Date.now()),
    () => (settledAt = Date.now()),
  );
  return { response, settledAt: () => settledAt };
}

const pollsSeeing = (open: number) => (line: LogLine) => line['event'] === 'poll' && line['open_connections'] === open;

describe('sidecar process: the drain', () => {
  test('two concurrent /shutdown calls block while connections are open and return together once they close', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const http = [await openHttpConnection(emulator.ports.http), await openHttpConnection(emulator.ports.http)];
    const tcp = await openTcpConnections(emulator.ports.tcp, 3);
    t.after(() => closeAll([...http, ...tcp]));

    const first = callShutdown(sidecar);
    const second = callShutdown(sidecar);
    await emulator.waitForAdminRequest((request) => request.path === '/drain_listeners');
    // Several polls have seen all 5 connections: both calls must still be waiting.
    await sidecar.waitForLog(pollsSeeing(5));
    await sidecar.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 5 && Number(line['elapsed_ms']) >= 3 * CHECK_INTERVAL_MS);
    assert.equal(first.settledAt(), undefined, 'first /shutdown returned early');
    assert.equal(second.settledAt(), undefined, 'second /shutdown returned early');

    const mutations = emulator.adminRequests.filter((request) => request.method === 'POST');
    assert.deepEqual(
      mutations.map((request) => `${request.path}?${request.query}`),
      ['/healthcheck/fail?', '/drain_listeners?graceful&skip_exit'],
      'health checks failed first, every listener drained next, each once for both calls',
    );
    assert.ok(emulator.adminRequests.every((request) => request.method === 'POST' || ['/stats', '/ready', '/server_info'].includes(request.path)), 'only POST mutations and the reads the sidecar makes');

    const healthz = await httpRequest(sidecar.url('/healthz'));
    assert.equal(healthz.status, 200, '/healthz stays 200 during a drain');
    const state = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.equal(state['state'], 'draining');
    assert.equal(state['openConnections'], 5);
    assert.ok(typeof state['startedAt'] === 'string' && typeof state['deadline'] === 'string', 'the state file holds the start and the deadline');

    // An HTTP client's next request gets `Connection: close` from the draining Envoy, which closes it.
    const answer = await requestOn(http[0]!.socket);
    assert.equal(answer.headers['connection'], 'close');
    await http[0]!.closed;
    await sidecar.waitForLog(pollsSeeing(4));
    assert.equal(first.settledAt(), undefined);

    await closeAll([http[1]!, ...tcp.slice(0, 2)]);
    await sidecar.waitForLog(pollsSeeing(1));
    assert.equal(first.settledAt(), undefined, 'one TCP proxy connection is still open');
    await tcp[2]!.close();
    const lastClosedAt = Date.now();

    const [a, b] = await Promise.all([first.response, second.response]);
    assert.deepEqual([a.status, b.status], [200, 200]);
    assert.match(a.body, /^drained: 0 open connections/);
    // Returned at the first poll that could see the close: at most one poll (in flight as it closed) saw it open.
    const pollsAfterClose = sidecar.logs.filter((line) => line['event'] === 'poll' && Date.parse(String(line['time'])) >= lastClosedAt);
    assert.ok(pollsAfterClose.filter((line) => line['open_connections'] !== 0).length <= 1, JSON.stringify(pollsAfterClose));
    for (const call of [first, second]) {
      const overshoot = (call.settledAt() ?? Infinity) - lastClosedAt;
      assert.ok(overshoot <= CHECK_INTERVAL_MS + NOISE_MS, `returned ${overshoot} ms after the last connection closed`);
    }

    const polls = sidecar.logs.filter((line) => line['event'] === 'poll');
    assert.ok(polls.every((line) => ['open_connections', 'min_connections', 'elapsed_ms', 'remaining_ms'].every((key) => typeof line[key] === 'number')), 'each poll logs its numbers');
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.deepEqual([finished['state'], finished['reason']], ['drained', 'connections-closed']);
    assert.equal(typeof finished['duration_ms'], 'number');
    assert.equal(sidecar.logs.filter((line) => line['event'] === 'drain_started').length, 1);

    // kubelet hooks are delivered at least once: a later call returns the same outcome at once.
    const late = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 1_000 });
    assert.equal(late.status, 200);
    assert.equal(emulator.adminRequests.filter((request) => request.method === 'POST').length, 2);
  });

  test('min-open-connections: returns once the count is at or below it', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--min-open-connections=2']);
    const tcp = await openTcpConnections(emulator.ports.tcp, 3);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(3));
    assert.equal(shutdown.settledAt(), undefined);
    await tcp[0]!.close();
    const response = await shutdown.response;
    assert.equal(response.status, 200);
    assert.match(response.body, /drained: 2 open connections \(at most 2 allowed\)/);
    assert.equal(emulator.openConnections.tcp, 2);
  });

  test('deadline: answers 503 at --drain-timeout while connections stay open', async (t) => {
    // A slow /stats keeps a poll in flight most of the time: the deadline must not wait for it.
    const { emulator, sidecar } = await setUp(t, ['--drain-timeout=700ms', '--admin-timeout=5s'], { fault: { kind: 'slow', delayMs: 300 }, faultPaths: ['/stats'] });
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    const started = Date.now();
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 10_000 });
    const elapsed = Date.now() - started;
    assert.equal(response.status, 503);
    assert.match(response.body, /deadline reached .* with 1 connections still open/);
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.equal(finished['state'], 'timed-out');
    assert.ok(Number(finished['duration_ms']) >= 700, `the drain's own clock: ${String(finished['duration_ms'])} ms`);
    assert.ok(elapsed >= 690 && elapsed <= 700 + NOISE_MS, `answered after ${elapsed} ms`);
  });

  test('counts only the listeners named by --listeners', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const named = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=0', `--listeners=${emulator.listenerNames.http}`]);
    t.after(() => named.kill());
    const http = await openHttpConnection(emulator.ports.http);
    const tcp = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll([http, ...tcp]));
    const shutdown = callShutdown(named);
    // The named HTTP listener's connection holds the drain; several polls see exactly it.
    await named.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 1 && Number(line['elapsed_ms']) >= 3 * CHECK_INTERVAL_MS);
    assert.equal(shutdown.settledAt(), undefined, 'an open connection on the named listener blocks the drain');
    await http.close();
    const response = await shutdown.response;
    assert.equal(response.status, 200, 'the TCP listener is not among those counted');
    assert.equal(emulator.openConnections.tcp, 2);
  });

  test('drains every listener by default: an UNSPECIFIED-direction listener gets Connection: close', async (t) => {
    // MODIFY_ONLY: only drain_listeners drains it (not /healthcheck/fail), and inboundonly would not cover it (Envoy 1.34+).
    // Envoy started with --drain-strategy immediate, as the injector sets it: the gradual default closes almost nothing at first.
    const { emulator, sidecar } = await setUp(t, [], { httpListener: { direction: 'unspecified', drainType: 'modify_only' }, drainStrategy: 'immediate' });
    const http = await openHttpConnection(emulator.ports.http);
    t.after(() => http.close());
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog((line) => line['event'] === 'drain_step' && line['step'] === 'drain listeners');
    assert.equal((await requestOn(http.socket)).headers['connection'], 'close');
    await http.closed;
    assert.equal((await shutdown.response).status, 200);
    assert.deepEqual(
      emulator.adminRequests.filter((request) => request.path === '/drain_listeners').map((request) => request.query),
      ['graceful&skip_exit'],
    );
  });

  test('--drain-inbound-only asks for inboundonly: INBOUND listeners drain, UNSPECIFIED ones do not', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--drain-inbound-only', '--drain-timeout=1s'], {
      httpListener: { direction: 'unspecified', drainType: 'modify_only' },
      drainStrategy: 'immediate',
    });
    const http = await openHttpConnection(emulator.ports.http);
    t.after(() => http.close());
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog((line) => line['event'] === 'drain_step' && line['step'] === 'drain listeners');
    assert.equal(emulator.drainScope, 'inbound-only');
    assert.notEqual((await requestOn(http.socket)).headers['connection'], 'close', 'an UNSPECIFIED listener is not inbound');
    assert.equal((await shutdown.response).status, 503, 'its connection stays open to the deadline');

    const inbound = await EnvoyEmulator.start({ httpListener: { direction: 'inbound', drainType: 'modify_only' }, drainStrategy: 'immediate' });
    t.after(() => inbound.close());
    const other = await spawnSidecar([`--admin-port=${inbound.ports.admin}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=0', '--drain-inbound-only']);
    t.after(() => other.kill());
    const inboundHttp = await openHttpConnection(inbound.ports.http);
    t.after(() => inboundHttp.close());
    const drained = callShutdown(other);
    await other.waitForLog((line) => line['event'] === 'drain_step' && line['step'] === 'drain listeners');
    assert.equal((await requestOn(inboundHttp.socket)).headers['connection'], 'close');
    assert.equal((await drained.response).status, 200);
    assert.equal(inbound.adminRequests.find((request) => request.path === '/drain_listeners')?.query, 'graceful&skip_exit&inboundonly');
  });
});

describe('sidecar process: Envoy admin faults', () => {
  test('a wrong admin port is not an exited Envoy: /shutdown answers 503 after check-delay, not the whole deadline, naming the fix', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const wrongPort = await freePort(); // nothing listens there: every call is refused, as Envoy Gateway's 19000 would be
    const sidecar = await spawnSidecar([`--admin-port=${wrongPort}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=400ms', '--drain-timeout=20s']);
    t.after(() => sidecar.kill());
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));

    // Envoy usually starts after the sidecar: the first failures are news, not yet a warning (see admin-probe.test.ts).
    const waiting = await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_waiting');
    assert.equal(waiting['level'], 'info');
    assert.equal(waiting['envoy_admin'], `127.0.0.1:${wrongPort}`);
    assert.match(String(waiting['msg']), new RegExp(`not reachable yet at 127\\.0\\.0\\.1:${wrongPort}`));
    const idle = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.deepEqual([idle['envoyAdmin'], idle['envoyAdminEverReachable']], [`127.0.0.1:${wrongPort}`, false]);

    const started = performance.now();
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 10_000 });
    const elapsed = performance.now() - started;
    assert.equal(response.status, 503, 'refusals from an admin API that never answered are not "Envoy exited"');
    assert.match(response.body, new RegExp(`admin API was never reachable at 127\\.0\\.0\\.1:${wrongPort}: nothing listens there`));
    // Holding longer helps no one: Envoy was never told to drain. A `sleep` preStop would hold as long.
    assert.ok(elapsed >= 390 && elapsed < 5_000, `held for check-delay (400 ms), not the 20 s deadline: ${Math.round(elapsed)} ms`);
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.deepEqual([finished['state'], finished['reason'], finished['admin_failure']], ['timed-out', 'admin-unreachable', 'refused']);
    const refusals = sidecar.logs.filter((line) => line['event'] === 'admin_error' && line['error'] === 'AdminRefusedError');
    assert.equal(refusals.length, 1, 'one warning per drain, not one per interval');
    assert.match(String(refusals[0]?.['msg']), /never answered: is Envoy's admin API really at .*shutdown-manager\.io\/envoy-admin-port/);
    assert.ok(emulator.adminRequests.length === 0, 'the wrong port got no admin request');
    assert.equal(emulator.openConnections.tcp, 1);
  });

  test('an admin API that comes up late is probed until it answers; /drain says so', async (t) => {
    const { emulator, sidecar } = await setUp(t, [], { fault: { kind: 'down' } });
    await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_waiting');
    assert.equal(JSON.parse((await httpRequest(sidecar.url('/drain'))).body).envoyAdminEverReachable, false);
    await emulator.setFault({ kind: 'none' });
    const reachable = await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
    assert.equal(reachable['envoy_state'], 'LIVE');
    assert.equal(JSON.parse((await httpRequest(sidecar.url('/drain'))).body).envoyAdminEverReachable, true);
    assert.equal(emulator.adminRequests.filter((request) => request.path === '/ready').length, 1, 'the probe stops once answered');
    assert.equal(sidecar.logs.filter((line) => line['event'] === 'envoy_admin_waiting').length, 1, 'logged once, not at every attempt');
    // The usual start of every pod: a warning here would teach operators to ignore the real ones.
    assert.deepEqual(sidecar.logs.filter((line) => line['level'] !== 'info').map((line) => line['event']), []);
  });

  test("a wrong admin port on a data listener (200 \"ok\" to anything) drains nothing and is not taken for Envoy", async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.http}`, `--check-interval=${CHECK_INTERVAL_MS}ms`, '--check-delay=0', '--drain-timeout=1s']);
    t.after(() => sidecar.kill());
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 10_000 });
    assert.equal(response.status, 503);
    // It answered (HTTP 200 "ok"), so "never reachable" would send the operator looking at the network.
    assert.match(
      response.body,
      new RegExp(`admin API at 127\\.0\\.0\\.1:${emulator.ports.http} answered, but never as Envoy does \\(last: Envoy admin [\\s\\S]*(not understood|not Envoy's "OK")`),
    );
    assert.deepEqual(sidecar.logs.filter((line) => line['event'] === 'drain_step'), [], 'no step counted as done');
    const warned = sidecar.logs.filter((line) => line['event'] === 'admin_error');
    assert.deepEqual(warned.map((line) => [line['error'], line['kind']]), [['AdminResponseError', 'invalid-answer']], 'one warning per drain');
    const state = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.match(String(state['lastError']), /answered 200 with "ok\\n", not Envoy's "OK"|not understood/);
    assert.deepEqual([state['healthChecksFailed'], state['listenersDraining'], state['envoyAdminEverReachable']], [false, false, false]);
  });

  test('Envoy exiting in the middle of a drain (admin gone, connections still open) ends it as envoy-exited', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
    const tcp = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(2));
    await emulator.setFault({ kind: 'down' }); // the admin port only: the data connections stay open
    const response = await shutdown.response;
    assert.equal(response.status, 200);
    assert.match(response.body, /refuses connections, Envoy has exited/);
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.equal(finished['reason'], 'envoy-exited');
    assert.equal(emulator.openConnections.tcp, 2, 'ended by the refusals, not by a count of 0');
  });

  test('an empty 200 from /stats is logged and retried, never read as 0 connections', async (t) => {
    const { emulator, sidecar } = await setUp(t, [], { fault: { kind: 'empty' }, faultPaths: ['/stats'] });
    const shutdown = callShutdown(sidecar);
    const errors = () => sidecar.logs.filter((line) => line['event'] === 'admin_error' && line['error'] === 'AdminResponseError');
    const first = await sidecar.waitForLog((line) => line['event'] === 'admin_error' && line['error'] === 'AdminResponseError');
    assert.match(String(first['error_message']), /empty answer where JSON was asked for/);
    await emulator.waitForAdminRequest(() => emulator.adminRequests.filter((request) => request.path === '/stats').length >= 4);
    assert.equal(errors().length, 1, 'retried every interval, logged once');
    assert.equal(shutdown.settledAt(), undefined);
    await emulator.setFault({ kind: 'none' });
    assert.equal((await shutdown.response).status, 200);
  });

  test('slow admin: calls time out, are logged and retried; the drain ends once Envoy answers', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--admin-timeout=100ms'], { fault: { kind: 'slow', delayMs: 400 }, faultPaths: ['/stats'] });
    const shutdown = callShutdown(sidecar);
    const timeout = await sidecar.waitForLog((line) => line['event'] === 'admin_error' && line['error'] === 'AdminTimeoutError');
    assert.match(String(timeout['error_message']), /no complete answer within 100 ms/);
    assert.equal(shutdown.settledAt(), undefined);
    await emulator.setFault({ kind: 'none' });
    assert.equal((await shutdown.response).status, 200);
  });

  test('garbage and 500 answers are logged and retried, never crash the process', async (t) => {
    const { emulator, sidecar } = await setUp(t, [], { fault: { kind: 'garbage' }, faultPaths: ['/stats'] });
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog((line) => line['event'] === 'admin_error' && line['error'] === 'AdminResponseError');
    await emulator.setFault({ kind: 'status', status: 500 }, ['/stats']);
    const status = await sidecar.waitForLog((line) => line['event'] === 'admin_error' && line['error'] === 'AdminStatusError');
    assert.match(String(status['error_message']), /HTTP 500/);
    assert.equal(shutdown.settledAt(), undefined, 'unreadable answers are not "0 connections"');
    assert.equal((await httpRequest(sidecar.url('/healthz'))).status, 200);
    await emulator.setFault({ kind: 'none' });
    assert.equal((await shutdown.response).status, 200);
    assert.equal(sidecar.child.exitCode, null);
  });

  test('a health check failure answered 503 at first is retried until Envoy takes it', async (t) => {
    const { emulator, sidecar } = await setUp(t, [], { fault: { kind: 'status', status: 503 }, faultPaths: ['/healthcheck'] });
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(1));
    assert.equal(emulator.isHealthCheckFailed, false);
    await emulator.setFault({ kind: 'none' });
    await sidecar.waitForLog((line) => line['event'] === 'drain_step' && line['step'] === 'fail health checks');
    assert.equal(emulator.isHealthCheckFailed, true);
    await tcp[0]!.close();
    assert.equal((await shutdown.response).status, 200);
  });
});

describe('sidecar process: lifecycle and flags', () => {
  test('SIGTERM during a drain is held until the drain ends, further signals are absorbed, then it exits 0', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(1));
    sidecar.child.kill('SIGTERM');
    await sidecar.waitForLog((line) => line['event'] === 'signal' && line['held'] === true);
    // Two more, 5 ms apart: once was enough to kill it with process.once.
    sidecar.child.kill('SIGTERM');
    await new Promise((resolve) => setTimeout(resolve, 5));
    sidecar.child.kill('SIGINT');
    await sidecar.waitForLog((line) => line['event'] === 'signal' && line['repeated'] === true && line['signal'] === 'SIGINT');
    const pollsBefore = sidecar.logs.filter(pollsSeeing(1)).length;
    await sidecar.waitForLog((line) => pollsSeeing(1)(line) && sidecar.logs.filter(pollsSeeing(1)).length > pollsBefore + 2);
    assert.equal(shutdown.settledAt(), undefined, 'the drain goes on after SIGTERM: the connection is still open');
    assert.equal(sidecar.child.exitCode, null, 'still running');

    await tcp[0]!.close();
    const closedAt = Date.now();
    const response = await shutdown.response;
    assert.equal(response.status, 200);
    assert.match(response.body, /^drained: 0 open connections/);
    assert.deepEqual(await sidecar.exited, { code: 0, signal: null });
    // The 3 s fallback exits 0 too: only the `stopped` line tells a clean stop from it.
    assert.ok(sidecar.logs.some((line) => line['event'] === 'stopped'), 'stopped cleanly, not by the exit fallback');
    assert.ok(Date.now() - closedAt < 2_500, `exited ${Date.now() - closedAt} ms after the drain ended`);
  });

  test('SIGTERM while idle exits 0 at once', async (t) => {
    const { sidecar } = await setUp(t);
    sidecar.child.kill('SIGTERM');
    assert.deepEqual(await sidecar.exited, { code: 0, signal: null });
  });

  test('routes: /drain is idle JSON before a drain, unknown paths 404, other methods 405', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const drain = await httpRequest(sidecar.url('/drain'));
    assert.equal(drain.status, 200);
    assert.match(String(drain.headers['content-type']), /application\/json/);
    assert.equal((JSON.parse(drain.body) as { state: string }).state, 'idle');
    assert.equal((await httpRequest(sidecar.url('/nope'))).status, 404);
    assert.equal((await httpRequest(sidecar.url('/shutdown'), { method: 'POST' })).status, 405);
    // Only the kubelet's GET may start a drain; reads still answer HEAD.
    const head = await httpRequest(sidecar.url('/shutdown'), { method: 'HEAD' });
    assert.deepEqual([head.status, head.headers['allow']], [405, 'GET']);
    assert.equal((await httpRequest(sidecar.url('/healthz'), { method: 'HEAD' })).status, 200);
    assert.equal((JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as { state: string }).state, 'idle', 'HEAD /shutdown started nothing');
    await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
    assert.deepEqual(
      emulator.adminRequests.map((request) => `${request.method} ${request.path}`),
      ['GET /ready', 'GET /server_info'],
      'nothing was sent to Envoy but the start-up probe and the check for an Envoy left draining',
    );
  });

  test('by default it serves on every interface: /healthz answers on 127.0.0.1 and [::1]', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`], { serveAddress: null });
    t.after(() => sidecar.kill());
    const listening = await sidecar.waitForLog((line) => line['event'] === 'listening');
    assert.ok(['::', '0.0.0.0'].includes(String(listening['address'])), `bound ${String(listening['address'])}`);
    assert.equal((await httpRequest(`http://127.0.0.1:${sidecar.port}/healthz`)).status, 200);
    if (!(await hasIpv6Loopback())) {
      t.skip('no IPv6 loopback on this machine');
      return;
    }
    assert.equal(listening['address'], '::');
    assert.equal((await httpRequest(`http://[::1]:${sidecar.port}/healthz`)).status, 200);
  });

  test('--help prints every flag with its default and exits 0', async () => {
    const result = await runSidecarToExit(['--help']);
    assert.equal(result.code, 0);
    for (const flag of ['check-interval', 'check-delay', 'min-open-connections', 'serve-port', 'admin-address', 'admin-port', 'drain-timeout', 'drain-inbound-only']) {
      assert.match(result.stdout, new RegExp(`--${flag}\\n`), flag);
    }
    assert.match(result.stdout, /default 5s/);
    assert.match(result.stdout, /default 8090/);
  });

  test('a bad flag value exits 2 with a message naming the flag', async () => {
    for (const [flag, name] of [
      ['--check-interval=soon', 'check-interval'],
      ['--min-open-connections=-1', 'min-open-connections'],
      ['--admin-port=70000', 'admin-port'],
      ['--drain-timeout=0', 'drain-timeout'],
      ['--wait-window=0s', 'wait-window'],
      ['--state-dir=relative/dir', 'state-dir'],
      ['--drain-delay=forever', 'drain-delay'],
      ['--recover-envoy=maybe', 'recover-envoy'],
    ] as const) {
      const result = await runSidecarToExit([flag]);
      assert.equal(result.code, 2, flag);
      assert.match(result.stderr, new RegExp(`flag --${name}`), flag);
    }
    const lateChecks = await runSidecarToExit(['--check-delay=1m', '--drain-timeout=30s']);
    assert.equal(lateChecks.code, 2);
    assert.match(lateChecks.stderr, /flag --check-delay: "1m" is not valid; expected a check delay shorter than the drain deadline of 30s/);
    const lateDrain = await runSidecarToExit(['--check-delay=20s', '--drain-delay=15s', '--drain-timeout=30s']);
    assert.equal(lateDrain.code, 2);
    assert.match(lateDrain.stderr, /flag --drain-delay: "15s" is not valid; expected a drain delay that, added to the check delay of 20s, stays below the drain deadline of 30s/);
    const samePort = await runSidecarToExit(['--serve-port=9001', '--admin-port=9001']);
    assert.equal(samePort.code, 2);
    assert.match(samePort.stderr, /flag --serve-port: "9001" is not valid; expected a port other than Envoy's admin port/);
  });

  test('a serve port already taken fails at start with a message saying so', async (t) => {
    const taken = net.createServer().listen(0, '127.0.0.1');
    t.after(() => taken.close());
    await once(taken, 'listening');
    const { port } = taken.address() as net.AddressInfo;
    const result = await runSidecarToExit(['--serve-address=127.0.0.1', `--serve-port=${port}`]);
    assert.equal(result.code, 1);
    assert.match(result.stderr, new RegExp(`cannot serve on 127\\.0\\.0\\.1:${port}: the port is taken`));
  });
});

describe('sidecar process: a protected /shutdown', () => {
  test('without the pod\'s token it answers 401 and drains nothing; with it, it drains', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--shutdown-token=s3cr3t-token']);
    const attempts: Record<string, string>[] = [{}, { authorization: 'Bearer wrong' }, { authorization: 's3cr3t-token' }, { authorization: 'Bearer s3cr3t-token2' }];
    for (const headers of attempts) {
      const refused = await httpRequest(sidecar.url('/shutdown'), { headers });
      assert.equal(refused.status, 401, JSON.stringify(headers));
      assert.match(String(refused.headers['www-authenticate']), /^Bearer /);
    }
    assert.deepEqual(emulator.adminRequests.filter((request) => request.method === 'POST'), [], 'Envoy was not touched');
    assert.equal((await httpRequest(sidecar.url('/healthz'))).status, 200, '/healthz stays open');
    assert.equal(JSON.parse((await httpRequest(sidecar.url('/drain'))).body).state, 'idle');

    const accepted = await httpRequest(sidecar.url('/shutdown'), { headers: { authorization: 'Bearer s3cr3t-token' } });
    assert.equal(accepted.status, 200, accepted.body);
    assert.ok(emulator.isHealthCheckFailed, "the authorized /shutdown failed Envoy's health check");
  });
});

describe('sidecar process: GET /wait, the hook of the sidecar container itself', () => {
  test('never starts a drain: with none under way it answers 200 after --wait-window and Envoy is untouched', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--wait-window=200ms', '--shutdown-token=s3cr3t-token']);
    const auth = { authorization: 'Bearer s3cr3t-token' };
    assert.equal((await httpRequest(sidecar.url('/wait'))).status, 401, 'token-protected like /shutdown');
    assert.equal((await httpRequest(sidecar.url('/wait'), { method: 'HEAD', headers: auth })).status, 405);
    const started = Date.now();
    const waited = await httpRequest(sidecar.url('/wait'), { headers: auth });
    assert.equal(waited.status, 200);
    assert.match(waited.body, /no drain started within 200 ms: nothing to wait for, Envoy left serving/);
    assert.ok(Date.now() - started >= 190, 'it waited the window for a drain to start');
    assert.deepEqual(emulator.adminRequests.filter((request) => request.method === 'POST'), [], 'Envoy was not touched');
    assert.equal(JSON.parse((await httpRequest(sidecar.url('/drain'))).body).state, 'idle');
  });

  test('joins a drain that starts within the window and answers when it ends, with its outcome', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--wait-window=5s']);
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    let waitedAt: number | undefined;
    const waiting = httpRequest(sidecar.url('/wait'), { timeoutMs: 20_000 });
    void waiting.then(() => (waitedAt = Date.now()));
    await new Promise((resolve) => setTimeout(resolve, 100));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(1));
    assert.equal(waitedAt, undefined, '/wait is held while the drain runs');
    await tcp[0]!.close();
    const [waited, drained] = await Promise.all([waiting, shutdown.response]);
    assert.deepEqual([waited.status, drained.status], [200, 200]);
    assert.equal(waited.body, drained.body, 'the same drain, the same answer');
  });
});

describe('sidecar process: --drain-delay', () => {
  test('Envoy keeps serving untouched for the delay (no Connection: close), then the drain begins', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--drain-delay=600ms']);
    const http = await openHttpConnection(emulator.ports.http);
    t.after(() => http.close());
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog((line) => line['event'] === 'drain_started');
    assert.notEqual((await requestOn(http.socket)).headers['connection'], 'close', 'served as usual during the delay');
    assert.equal(emulator.isHealthCheckFailed, false);
    const failed = await emulator.waitForAdminRequest((request) => request.path === '/healthcheck/fail', 5_000);
    const started = Date.parse(String((await sidecar.waitForLog((line) => line['event'] === 'drain_started'))['time']));
    assert.ok(failed.at - started >= 590, `health checks failed ${failed.at - started} ms after the drain started`);
    assert.equal((await requestOn(http.socket)).headers['connection'], 'close');
    assert.equal((await shutdown.response).status, 200);
  });
});

describe('sidecar process: /metrics', () => {
  /** Summed over listeners, as `sum(shutdown_manager_open_connections)` would. */
  const openConnections = (text: string): number | undefined => {
    const lines = text.split('\n').filter((l) => l.startsWith('shutdown_manager_open_connections{'));
    return lines.length === 0 ? undefined : lines.reduce((sum, l) => sum + Number(l.split(' ')[1]), 0);
  };

  test('report the drain state, the open connections, the polls and the duration', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const idle = await httpRequest(sidecar.url('/metrics'));
    assert.equal(idle.status, 200);
    assert.match(String(idle.headers['content-type']), /^text\/plain; version=0\.0\.4/);
    assert.equal(sampleOf(idle.body, 'shutdown_manager_drain_state{state="idle"}'), 1);
    assert.equal(openConnections(idle.body), undefined, 'unknown before the first poll');

    const held = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(held));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(2));
    const draining = (await httpRequest(sidecar.url('/metrics'))).body;
    assert.equal(sampleOf(draining, 'shutdown_manager_drain_state{state="draining"}'), 1);
    assert.equal(sampleOf(draining, 'shutdown_manager_drain_state{state="idle"}'), 0);
    assert.equal(openConnections(draining), 2);
    assert.equal(sampleOf(draining, `shutdown_manager_open_connections{listener="${emulator.listenerNames.tcp}"}`), 2);

    await closeAll(held);
    assert.equal((await shutdown.response).status, 200);
    const drained = (await httpRequest(sidecar.url('/metrics'))).body;
    assert.equal(sampleOf(drained, 'shutdown_manager_drain_state{state="drained"}'), 1);
    assert.equal(openConnections(drained), 0);
    assert.ok((sampleOf(drained, 'shutdown_manager_drain_polls_total') ?? 0) >= 2, 'the drain polled at least twice');
    assert.ok((sampleOf(drained, 'shutdown_manager_drain_duration_seconds') ?? 0) > 0, "the drain's duration is recorded");
  });
});

/** Whether this machine can listen on ::1 (containers and CI runners sometimes have IPv6 off). */
async function hasIpv6Loopback(): Promise<boolean> {
  const probe = net.createServer();
  try {
    await new Promise<void>((resolve, reject) => {
      probe.once('error', reject);
      probe.listen(0, '::1', resolve);
    });
    return true;
  } catch {
    return false;
  } finally {
    if (probe.listening) await new Promise<void>((resolve) => probe.close(() => resolve()));
  }
}
