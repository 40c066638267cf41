/**
 * The built sidecar, spawned as `node dist/main.js mode=sidecar …` against the Envoy emulator, with real
 * client connections held open. Run `npm run build` first (npm test does).
 */
import assert from 'node:assert/strict';
import { once } from 'node:events';
import net from 'node:net';
import { describe, test, type TestContext } from 'node:test';
import { closeAll, httpRequest, openHttpConnection, openTcpConnections, requestOn, type SimpleResponse } from '../support/connections.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../support/envoy-emulator.js';
import { runSidecarToExit, spawnSidecar, type LogLine, type SidecarProcess } from '../support/sidecar-process.js';

const CHECK_INTERVAL_MS = 50;
/** Scheduling noise allowed on top of one check interval on a busy 2-core machine (the bench reports the real figure). */
const SLACK_MS = 150;

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
      ['/healthcheck/fail?', '/drain_listeners?graceful&inboundonly'],
      'health checks failed first, listeners drained next, each once for both calls',
    );
    assert.ok(emulator.adminRequests.every((request) => request.method === 'POST' || request.path === '/stats'));

    const healthz = await httpRequest(sidecar.url('/healthz'));
    assert.equal(healthz.status, 200, '/healthz stays 200 during a drain');
    const state = JSON.parse((await httpRequest(sidecar.url('/drain'))).body) as Record<string, unknown>;
    assert.equal(state['state'], 'draining');
    assert.equal(state['openConnections'], 5);
    assert.ok(typeof state['startedAt'] === 'string' && typeof state['deadline'] === 'string');

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
    for (const call of [first, second]) {
      const overshoot = (call.settledAt() ?? Infinity) - lastClosedAt;
      assert.ok(overshoot <= CHECK_INTERVAL_MS + SLACK_MS, `returned ${overshoot} ms after the last connection closed`);
    }

    const polls = sidecar.logs.filter((line) => line['event'] === 'poll');
    assert.ok(polls.every((line) => ['open_connections', 'min_connections', 'elapsed_ms', 'remaining_ms'].every((key) => typeof line[key] === 'number')));
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

  test('deadline: answers 503 near --drain-timeout while connections stay open', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--drain-timeout=700ms']);
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    const started = Date.now();
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 5_000 });
    const elapsed = Date.now() - started;
    assert.equal(response.status, 503);
    assert.match(response.body, /deadline reached .* with 1 connections still open/);
    assert.ok(elapsed >= 690 && elapsed <= 700 + SLACK_MS, `answered after ${elapsed} ms`);
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.equal(finished['state'], 'timed-out');
  });

  test('counts only the listeners named by --listeners', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const sidecar = await spawnSidecar([
      `--admin-port=${emulator.ports.admin}`,
      '--check-interval=50ms',
      '--check-delay=0',
      `--listeners=${emulator.listenerNames.http}`,
    ]);
    t.after(() => sidecar.kill());
    const tcp = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(tcp));
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 5_000 });
    assert.equal(response.status, 200, 'the TCP listener is not among those counted');
  });
});

describe('sidecar process: Envoy admin faults', () => {
  test('admin down from the start: drained after a few refused checks', async (t) => {
    const { sidecar } = await setUp(t, [], { fault: { kind: 'down' } });
    const started = Date.now();
    const response = await httpRequest(sidecar.url('/shutdown'), { timeoutMs: 5_000 });
    const elapsed = Date.now() - started;
    assert.equal(response.status, 200);
    assert.match(response.body, /refuses connections, Envoy has exited/);
    assert.ok(elapsed >= 2 * CHECK_INTERVAL_MS - 10 && elapsed < 2_000, `took ${elapsed} ms for 3 refusals`);
  });

  test('Envoy exiting in the middle of a drain ends it as drained', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const tcp = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(2));
    await emulator.close();
    const response = await shutdown.response;
    assert.equal(response.status, 200);
    const finished = await sidecar.waitForLog((line) => line['event'] === 'drain_finished');
    assert.ok(['envoy-exited', 'connections-closed'].includes(String(finished['reason'])));
  });

  test('slow admin: calls time out, are logged and retried; the drain ends once Envoy answers', async (t) => {
    const { emulator, sidecar } = await setUp(t, ['--admin-timeout=100ms'], { fault: { kind: 'slow', delayMs: 400 }, faultPaths: ['/stats'] });
    const shutdown = callShutdown(sidecar);
    const timeout = await sidecar.waitForLog((line) => line['event'] === 'admin_error' && line['error'] === 'AdminTimeoutError');
    assert.match(String(timeout['error_message']), /no answer within 100 ms/);
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
  test('SIGTERM during a drain: held /shutdown calls are answered, then the process exits 0 promptly', async (t) => {
    const { emulator, sidecar } = await setUp(t);
    const tcp = await openTcpConnections(emulator.ports.tcp, 1);
    t.after(() => closeAll(tcp));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(1));
    const signalledAt = Date.now();
    sidecar.child.kill('SIGTERM');
    const response = await shutdown.response;
    assert.equal(response.status, 503);
    assert.match(response.body, /interrupted/);
    const exit = await sidecar.exited;
    assert.deepEqual(exit, { code: 0, signal: null });
    assert.ok(Date.now() - signalledAt < 1_500, `exited ${Date.now() - signalledAt} ms after SIGTERM`);
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
    assert.equal(emulator.adminRequests.length, 0, 'nothing was sent to Envoy');
  });

  test('--help prints every flag with its default and exits 0', async () => {
    const result = await runSidecarToExit(['--help']);
    assert.equal(result.code, 0);
    for (const flag of ['check-interval', 'check-delay', 'min-open-connections', 'serve-port', 'admin-address', 'admin-port', 'drain-timeout']) {
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
    ] as const) {
      const result = await runSidecarToExit([flag]);
      assert.equal(result.code, 2, flag);
      assert.match(result.stderr, new RegExp(`flag --${name}`), flag);
    }
    const inconsistent = await runSidecarToExit(['--check-delay=1m', '--drain-timeout=30s', '--serve-port=9001', '--admin-port=9001']);
    assert.equal(inconsistent.code, 2);
    assert.match(inconsistent.stderr, /flag --check-delay: "1m" is not valid; expected a delay shorter than --drain-timeout/);
    assert.match(inconsistent.stderr, /flag --serve-port: "9001" is not valid; expected a port other than Envoy's admin port/);
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
    assert.deepEqual(emulator.adminRequests, [], 'Envoy was not touched');
    assert.equal((await httpRequest(sidecar.url('/healthz'))).status, 200, '/healthz stays open');
    assert.equal(JSON.parse((await httpRequest(sidecar.url('/drain'))).body).state, 'idle');

    const accepted = await httpRequest(sidecar.url('/shutdown'), { headers: { authorization: 'Bearer s3cr3t-token' } });
    assert.equal(accepted.status, 200, accepted.body);
    assert.ok(emulator.isHealthCheckFailed);
  });
});

describe('sidecar process: /metrics', () => {
  const sample = (text: string, series: string): number | undefined => {
    const line = text.split('\n').find((l) => l.startsWith(`${series} `));
    return line === undefined ? undefined : Number(line.slice(series.length + 1));
  };

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
    assert.equal(sample(idle.body, 'shutdown_manager_drain_state{state="idle"}'), 1);
    assert.equal(openConnections(idle.body), undefined, 'unknown before the first poll');

    const held = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(held));
    const shutdown = callShutdown(sidecar);
    await sidecar.waitForLog(pollsSeeing(2));
    const draining = (await httpRequest(sidecar.url('/metrics'))).body;
    assert.equal(sample(draining, 'shutdown_manager_drain_state{state="draining"}'), 1);
    assert.equal(sample(draining, 'shutdown_manager_drain_state{state="idle"}'), 0);
    assert.equal(openConnections(draining), 2);
    assert.equal(sample(draining, `shutdown_manager_open_connections{listener="${emulator.listenerNames.tcp}"}`), 2);

    await closeAll(held);
    assert.equal((await shutdown.response).status, 200);
    const drained = (await httpRequest(sidecar.url('/metrics'))).body;
    assert.equal(sample(drained, 'shutdown_manager_drain_state{state="drained"}'), 1);
    assert.equal(openConnections(drained), 0);
    assert.ok((sample(drained, 'shutdown_manager_drain_polls_total') ?? 0) >= 2);
    assert.ok((sample(drained, 'shutdown_manager_drain_duration_seconds') ?? 0) > 0);
  });
});
