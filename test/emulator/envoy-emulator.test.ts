import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { describe, test, type TestContext } from 'node:test';
import { countDownstreamConnections, parseJsonStats, type StatSample } from '../../src/envoy/stats.js';
import { closeAll, httpRequest, openHttpConnection, openTcpConnection, openTcpConnections, requestOn } from '../support/connections.js';
import { EnvoyEmulator, parseFault, type EnvoyEmulatorOptions, type TrafficDirection } from '../../src/emulator/envoy-emulator.js';
import { waitUntil } from '../support/wait.js';

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  return emulator;
}

function adminUrl(emulator: EnvoyEmulator, path: string): string {
  return `http://127.0.0.1:${emulator.ports.admin}${path}`;
}

/**
 * Either output format of the emulator's /stats. The sidecar reads only JSON; the text reader lives here
 * because only these tests of the emulator's text output need it. Text readouts and histograms are skipped.
 */
function samplesOf(body: string): StatSample[] {
  if (body.trimStart().startsWith('{')) return parseJsonStats(body);
  return body
    .split('\n')
    .map((line) => /^([^\s:]+): (-?\d+)$/.exec(line))
    .filter((match) => match !== null)
    .map(([, name = '', value]) => ({ name, value: Number(value) }));
}

/** ListenerManagerImpl::stopListeners counts stopped listeners here; they stay in total_listeners_active. */
function stoppedListeners(emulator: EnvoyEmulator): number | undefined {
  return emulator.statValues().find((stat) => stat.name === 'listener_manager.listener_stopped')?.value;
}

function statsOf(body: string): Map<string, number> {
  return new Map(samplesOf(body).map((sample) => [sample.name, sample.value]));
}

describe('Envoy emulator: stats', () => {
  test('listener, worker, http, admin and server counters follow real connections', async (t) => {
    const emulator = await startEmulator(t, { workers: 2 });
    const { http: httpName, tcp: tcpName } = emulator.listenerNames;
    assert.equal(httpName, `0.0.0.0_${emulator.ports.http}`);
    const held = [
      await openHttpConnection(emulator.ports.http),
      await openHttpConnection(emulator.ports.http),
      await openHttpConnection(emulator.ports.http),
      ...(await openTcpConnections(emulator.ports.tcp, 2)),
    ];
    t.after(() => closeAll(held));
    await waitUntil(() => emulator.openConnections.tcp === 2, 2_000, 'tcp connections counted');

    const stats = statsOf((await httpRequest(adminUrl(emulator, '/stats'))).body);
    assert.equal(stats.get(`listener.${httpName}.downstream_cx_active`), 3);
    assert.equal(stats.get(`listener.${httpName}.worker_0.downstream_cx_active`), 2);
    assert.equal(stats.get(`listener.${httpName}.worker_1.downstream_cx_active`), 1);
    assert.equal(stats.get(`listener.${tcpName}.downstream_cx_active`), 2);
    assert.equal(stats.get('http.ingress_http.downstream_cx_active'), 3, 'TCP proxy connections are not HTTP ones');
    assert.equal(stats.get('listener.admin.downstream_cx_active'), 1, 'the /stats request itself');
    assert.equal(stats.get('http.admin.downstream_cx_active'), 1);
    assert.equal(stats.get('server.total_connections'), 6);
    assert.equal(countDownstreamConnections(samplesOf((await httpRequest(adminUrl(emulator, '/stats'))).body)).total, 5);

    await held[0]?.close();
    await held[3]?.close();
    await waitUntil(() => emulator.openConnections.http === 2 && emulator.openConnections.tcp === 1, 2_000, 'closes counted');
    const after = statsOf((await httpRequest(adminUrl(emulator, '/stats?format=json'))).body);
    assert.equal(after.get(`listener.${httpName}.downstream_cx_active`), 2);
    assert.equal(after.get(`listener.${httpName}.downstream_cx_total`), 3);
    assert.equal(after.get(`listener.${tcpName}.downstream_cx_active`), 1);
  });

  test('filter is a partial-match regex, usedonly drops never-updated stats, bad regex is 400', async (t) => {
    const emulator = await startEmulator(t);
    const filtered = (await httpRequest(adminUrl(emulator, `/stats?filter=${encodeURIComponent('^listener\\..*\\.downstream_cx_active$')}`))).body;
    const names = [...statsOf(filtered).keys()];
    assert.ok(names.length > 0 && names.every((name) => /^listener\..*\.downstream_cx_active$/.test(name)), names.join());
    assert.ok(names.includes(`listener.${emulator.listenerNames.tcp}.downstream_cx_active`), 'unused gauges listed without usedonly');

    const used = statsOf((await httpRequest(adminUrl(emulator, '/stats?usedonly&format=json&filter=downstream_cx_active'))).body);
    assert.equal(used.has(`listener.${emulator.listenerNames.tcp}.downstream_cx_active`), false, 'no connection yet');
    assert.equal(used.get('listener.admin.downstream_cx_active'), 1);

    const partial = statsOf((await httpRequest(adminUrl(emulator, '/stats?filter=total_connections'))).body);
    assert.deepEqual([...partial.keys()], ['server.total_connections']);

    assert.equal((await httpRequest(adminUrl(emulator, '/stats?filter=('))).status, 400);
  });

  test('plain output lists text readouts, then counters and gauges by name, then histograms', async (t) => {
    const emulator = await startEmulator(t);
    const lines = (await httpRequest(adminUrl(emulator, '/stats'))).body.trimEnd().split('\n');
    assert.equal(lines[0], 'control_plane.identifier: ""');
    assert.match(lines.at(-1) ?? '', /downstream_cx_length_ms: No recorded values$/);
    const numeric = lines.filter((line) => /: \d+$/.test(line)).map((line) => line.split(':')[0] ?? '');
    assert.deepEqual(numeric, [...numeric].sort());
  });

  test('JSON output has the documented shape', async (t) => {
    const emulator = await startEmulator(t);
    const response = await httpRequest(adminUrl(emulator, '/stats?format=json'));
    assert.match(String(response.headers['content-type']), /application\/json/);
    const document = JSON.parse(response.body) as { stats: Record<string, unknown>[] };
    assert.deepEqual(document.stats[0], { name: 'control_plane.identifier', value: '' });
    const histograms = document.stats.at(-1)?.['histograms'] as { supported_quantiles: number[]; computed_quantiles: unknown[] };
    assert.equal(histograms.supported_quantiles.length, 10);
    assert.equal(histograms.computed_quantiles.length, 2);
  });

  test('Prometheus output turns prefixes into labels', async (t) => {
    const emulator = await startEmulator(t);
    const held = await openTcpConnection(emulator.ports.tcp);
    t.after(() => held.close());
    await waitUntil(() => emulator.openConnections.tcp === 1, 2_000, 'tcp connection counted');
    const { body } = await httpRequest(adminUrl(emulator, '/stats/prometheus'));
    const tcp = emulator.listenerNames.tcp;
    assert.match(body, /^# TYPE envoy_listener_downstream_cx_active gauge$/m);
    assert.ok(body.includes(`envoy_listener_downstream_cx_active{envoy_listener_address="${tcp}"} 1\n`), "the TCP listener's address became a label");
    assert.ok(body.includes(`envoy_listener_worker_downstream_cx_active{envoy_worker_id="0",envoy_listener_address="${tcp}"} 1\n`), 'the worker id and listener address became labels');
    assert.ok(body.includes('envoy_http_downstream_cx_active{envoy_http_conn_manager_prefix="ingress_http"} 0\n'), "the connection manager's prefix became a label");
    assert.ok(body.includes('envoy_listener_admin_downstream_cx_active{} 1\n'), "the admin listener's gauge has empty labels");
    assert.ok(body.includes('envoy_server_total_connections{} 2\n'), 'the server-wide total has empty labels');
    assert.match(body, /^# TYPE envoy_http_downstream_cx_length_ms histogram$/m);
  });

  test('extra gauges are reported as given (e.g. an internal listener)', async (t) => {
    const emulator = await startEmulator(t, { extraGauges: { 'listener.envoy_internal_x.downstream_cx_active': 4 } });
    const stats = statsOf((await httpRequest(adminUrl(emulator, '/stats?usedonly'))).body);
    assert.equal(stats.get('listener.envoy_internal_x.downstream_cx_active'), 4);
  });
});

describe('Envoy emulator: admin mutations and drain behaviour', () => {
  test('mutations are POST only: GET answers 400 and changes nothing', async (t) => {
    const emulator = await startEmulator(t);
    for (const path of ['/healthcheck/fail', '/drain_listeners?graceful']) {
      const response = await httpRequest(adminUrl(emulator, path));
      assert.equal(response.status, 400, path);
      assert.match(response.body, /POST required/);
    }
    assert.equal(emulator.state, 'LIVE');
    const strict = await startEmulator(t, { mutationOnGetStatus: 405 });
    assert.equal((await httpRequest(adminUrl(strict, '/healthcheck/fail'))).status, 405);
  });

  test('healthcheck/fail: /ready 503, server_info DRAINING, HTTP/1.1 responses close their connection', async (t) => {
    const emulator = await startEmulator(t);
    const connection = await openHttpConnection(emulator.ports.http);
    t.after(() => connection.close());
    assert.equal((await httpRequest(adminUrl(emulator, '/ready'))).body, 'LIVE\n');

    const fail = await httpRequest(adminUrl(emulator, '/healthcheck/fail'), { method: 'POST' });
    assert.deepEqual([fail.status, fail.body], [200, 'OK\n']);
    const ready = await httpRequest(adminUrl(emulator, '/ready'));
    assert.deepEqual([ready.status, ready.body], [503, 'DRAINING\n']);
    assert.equal((JSON.parse((await httpRequest(adminUrl(emulator, '/server_info'))).body) as { state: string }).state, 'DRAINING');

    const response = await requestOn(connection.socket);
    assert.equal(response.headers['connection'], 'close');
    await connection.closed; // the server closed it after the response
    await waitUntil(() => emulator.openConnections.http === 0, 2_000, 'drain-closed connection counted');

    await httpRequest(adminUrl(emulator, '/healthcheck/ok'), { method: 'POST' });
    assert.equal(emulator.state, 'LIVE');
    const again = await openHttpConnection(emulator.ports.http);
    t.after(() => again.close());
    assert.notEqual((await requestOn(again.socket)).headers['connection'], 'close');
  });

  test('drain_listeners?graceful&inboundonly drains, the server stays LIVE; TCP proxy connections stay open', async (t) => {
    const emulator = await startEmulator(t);
    const tcp = await openTcpConnection(emulator.ports.tcp);
    t.after(() => tcp.close());
    const response = await httpRequest(adminUrl(emulator, '/drain_listeners?graceful&inboundonly'), { method: 'POST' });
    assert.equal(response.status, 200);
    assert.equal(emulator.isDraining, true);
    assert.equal(emulator.state, 'LIVE', 'only a failed health check makes the server DRAINING');
    tcp.socket.write('ping');
    const [echo] = (await once(tcp.socket, 'data')) as [Buffer];
    assert.equal(echo.toString(), 'ping');
    assert.equal(emulator.openConnections.tcp, 1);
    assert.equal((await httpRequest(adminUrl(emulator, '/drain_listeners?skip_exit'), { method: 'POST' })).status, 400);
    assert.deepEqual(
      emulator.adminRequests.filter((request) => request.path === '/drain_listeners').map((request) => [request.method, request.query]),
      [['POST', 'graceful&inboundonly'], ['POST', 'skip_exit']],
    );
  });

  test('drain scope follows traffic_direction: inboundonly drains INBOUND listeners only, not UNSPECIFIED or OUTBOUND ones', async (t) => {
    // MODIFY_ONLY: health check failure alone drains nothing, so only drain_listeners decides.
    const drainCloses = async (direction: TrafficDirection, query: string): Promise<boolean> => {
      const emulator = await startEmulator(t, { drainStrategy: 'immediate', httpListener: { direction, drainType: 'modify_only' } });
      const connection = await openHttpConnection(emulator.ports.http);
      t.after(() => connection.close());
      await httpRequest(adminUrl(emulator, '/healthcheck/fail'), { method: 'POST' });
      if (query !== '') assert.equal((await httpRequest(adminUrl(emulator, `/drain_listeners?${query}`), { method: 'POST' })).status, 200);
      return (await requestOn(connection.socket)).headers['connection'] === 'close';
    };
    assert.equal(await drainCloses('inbound', ''), false, 'modify_only ignores /healthcheck/fail');
    assert.equal(await drainCloses('inbound', 'graceful&inboundonly'), true);
    assert.equal(await drainCloses('unspecified', 'graceful&inboundonly'), false, 'UNSPECIFIED is not inbound');
    assert.equal(await drainCloses('outbound', 'graceful&inboundonly'), false);
    for (const direction of ['inbound', 'outbound', 'unspecified'] as const) {
      assert.equal(await drainCloses(direction, 'graceful'), true, `a drain of all listeners covers ${direction}`);
    }
  });

  test('a DEFAULT drain type listener drain-closes on /healthcheck/fail whatever its direction', async (t) => {
    const emulator = await startEmulator(t, { httpListener: { direction: 'outbound' } });
    const connection = await openHttpConnection(emulator.ports.http);
    t.after(() => connection.close());
    await httpRequest(adminUrl(emulator, '/healthcheck/fail'), { method: 'POST' });
    assert.equal((await requestOn(connection.socket)).headers['connection'], 'close');
  });

  test('an inbound-only drain widens to all on a later drain without inboundonly', async (t) => {
    const emulator = await startEmulator(t, { httpListener: { drainType: 'modify_only' } });
    await httpRequest(adminUrl(emulator, '/drain_listeners?graceful&inboundonly'), { method: 'POST' });
    assert.equal(emulator.drainScope, 'inbound-only');
    await httpRequest(adminUrl(emulator, '/drain_listeners?graceful'), { method: 'POST' });
    assert.equal(emulator.drainScope, 'all');
    await httpRequest(adminUrl(emulator, '/drain_listeners?graceful&inboundonly'), { method: 'POST' });
    assert.equal(emulator.drainScope, 'all', 'never narrows');
  });

  test('at the end of an inbound-only drain period only INBOUND listeners stop accepting', async (t) => {
    const emulator = await startEmulator(t, { drainTimeMs: 50, tcpListener: { direction: 'inbound' } });
    await httpRequest(adminUrl(emulator, '/drain_listeners?graceful&inboundonly'), { method: 'POST' });
    await waitUntil(() => stoppedListeners(emulator) === 1, 2_000, 'inbound listener stopped');
    await assert.rejects(openTcpConnection(emulator.ports.tcp), /ECONNREFUSED/);
    const http = await openHttpConnection(emulator.ports.http);
    t.after(() => http.close());
  });

  test('graceful drain period over, or drain without graceful: listeners stop accepting, connections stay', async (t) => {
    const emulator = await startEmulator(t, { drainTimeMs: 50 });
    const tcp = await openTcpConnection(emulator.ports.tcp);
    t.after(() => tcp.close());
    await httpRequest(adminUrl(emulator, '/drain_listeners?graceful'), { method: 'POST' });
    await waitUntil(() => stoppedListeners(emulator) === 2, 2_000, 'listeners stopped');
    await assert.rejects(openTcpConnection(emulator.ports.tcp), /ECONNREFUSED/);
    assert.equal(emulator.openConnections.tcp, 1);
  });
});

describe('Envoy emulator: faults', () => {
  test('slow, status, garbage, and only on chosen paths', async (t) => {
    const emulator = await startEmulator(t, { fault: { kind: 'slow', delayMs: 150 } });
    const started = Date.now();
    assert.equal((await httpRequest(adminUrl(emulator, '/ready'))).status, 200);
    assert.ok(Date.now() - started >= 140, 'answer delayed');

    await emulator.setFault({ kind: 'status', status: 500 });
    assert.equal((await httpRequest(adminUrl(emulator, '/stats'))).status, 500);
    await emulator.setFault({ kind: 'garbage' });
    const garbage = await httpRequest(adminUrl(emulator, '/stats?format=json'));
    assert.equal(garbage.status, 200);
    assert.throws(() => parseJsonStats(garbage.body));
    await emulator.setFault({ kind: 'empty' });
    assert.deepEqual(await httpRequest(adminUrl(emulator, '/stats?format=json')).then((r) => [r.status, r.body]), [200, '']);

    await emulator.setFault({ kind: 'status', status: 503 }, ['/stats']);
    assert.equal((await httpRequest(adminUrl(emulator, '/stats'))).status, 503);
    assert.equal((await httpRequest(adminUrl(emulator, '/healthcheck/fail'), { method: 'POST' })).status, 200);
  });

  test('down refuses connections on the admin port, and lifting it reopens the same port', async (t) => {
    const emulator = await startEmulator(t);
    const port = emulator.ports.admin;
    await emulator.setFault({ kind: 'down' });
    await assert.rejects(httpRequest(adminUrl(emulator, '/ready')), /ECONNREFUSED/);
    await emulator.setFault({ kind: 'none' });
    assert.equal(emulator.ports.admin, port);
    assert.equal((await httpRequest(adminUrl(emulator, '/ready'))).status, 200);
  });

  test('fault specifications parse strictly', () => {
    assert.deepEqual(parseFault('slow:250'), { kind: 'slow', delayMs: 250 });
    assert.deepEqual(parseFault('status:500'), { kind: 'status', status: 500 });
    assert.deepEqual(parseFault('down'), { kind: 'down' });
    assert.deepEqual(parseFault('empty'), { kind: 'empty' });
    for (const bad of ['slow', 'slow:-1', 'status:99', 'down:1', 'broken']) assert.equal(parseFault(bad), undefined, bad);
  });

  test('close() cuts every connection, like Envoy on SIGTERM', async (t) => {
    const emulator = await startEmulator(t);
    const connections = [await openHttpConnection(emulator.ports.http), await openTcpConnection(emulator.ports.tcp)];
    t.after(() => closeAll(connections));
    await emulator.close();
    await Promise.all(connections.map((connection) => connection.closed));
    await assert.rejects(httpRequest(adminUrl(emulator, '/ready')), /ECONNREFUSED/);
  });
});

describe('Envoy emulator CLI', () => {
  test('prints its ports as one JSON line, obeys /emulator/fault, exits 0 on SIGTERM closing connections', async (t) => {
    const child = spawn(process.execPath, ['--import', 'tsx', new URL('../../src/emulator/cli.ts', import.meta.url).pathname, '--workers=3'], {
      stdio: ['ignore', 'pipe', 'inherit'],
    });
    t.after(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    const lines = createInterface({ input: child.stdout });
    const [first] = (await Promise.race([
      once(lines, 'line'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('emulator CLI printed nothing in 10 s')), 10_000).unref()),
    ])) as [string];
    const ports = JSON.parse(first) as { pid: number; admin: number; http: number; tcp: number; listeners: { tcp: string } };
    assert.equal(ports.pid, child.pid);
    assert.equal(ports.listeners.tcp, `0.0.0.0_${ports.tcp}`);

    const held = await openTcpConnection(ports.tcp);
    t.after(() => held.close());
    assert.equal((await httpRequest(`http://127.0.0.1:${ports.admin}/emulator/fault?fault=status:500&paths=/stats`, { method: 'POST' })).status, 200);
    assert.equal((await httpRequest(`http://127.0.0.1:${ports.admin}/stats`)).status, 500);
    const requests = JSON.parse((await httpRequest(`http://127.0.0.1:${ports.admin}/emulator/requests`)).body) as { path: string; status: number }[];
    assert.deepEqual(requests.at(-1), { ...requests.at(-1), path: '/stats', status: 500 });

    child.kill('SIGTERM');
    await held.closed;
    const [code, signal] = await exited;
    assert.deepEqual([code, signal], [0, null]);
  });
});

describe("Envoy emulator: output formats match Envoy's documented samples (test/fixtures/envoy)", () => {
  const fixture = (name: string): string => readFileSync(new URL(`../fixtures/envoy/${name}`, import.meta.url), 'utf8');
  /** One pattern per line shape Envoy writes; a line of the emulator's that fits none is a format error. */
  const TEXT_LINE = /^(?:[a-z0-9_.\-[\]]+: (?:-?\d+|"[^"]*"|P0\(.*\)|No recorded values))$/;
  const PROMETHEUS_LINE = /^(?:# TYPE envoy_\w+ (?:counter|gauge|histogram)|envoy_\w+\{(?:\w+="[^"]*"(?:,\w+="[^"]*")*)?\} -?[\d.e+]+)$/;
  const lines = (text: string): string[] => text.split('\n').filter((line) => line !== '');

  test('the patterns describe the documented samples', () => {
    assert.deepEqual(lines(fixture('stats.txt')).filter((line) => !TEXT_LINE.test(line)), []);
    assert.deepEqual(lines(fixture('stats-prometheus.txt')).filter((line) => !PROMETHEUS_LINE.test(line)), []);
  });

  test("the emulator's /stats and /stats/prometheus lines all have those shapes", async (t) => {
    const emulator = await startEmulator(t);
    const held = await openTcpConnections(emulator.ports.tcp, 2);
    t.after(() => closeAll(held));
    const text = (await httpRequest(adminUrl(emulator, '/stats'))).body;
    const prometheus = (await httpRequest(adminUrl(emulator, '/stats/prometheus'))).body;
    assert.deepEqual(lines(text).filter((line) => !TEXT_LINE.test(line)), []);
    assert.deepEqual(lines(prometheus).filter((line) => !PROMETHEUS_LINE.test(line)), []);
    assert.match(prometheus, new RegExp(`envoy_listener_downstream_cx_active\\{envoy_listener_address="${emulator.listenerNames.tcp}"\\} 2`));
  });
});

describe('Envoy emulator: an upstream behind the HTTP listener (a sidecar Envoy in front of its application)', () => {
  test("relays the upstream's answer, drain-closes as it would its own, and answers 503 once the upstream is gone", async (t) => {
    const { createServer } = await import('node:http');
    const app = createServer((request, response) => {
      response.writeHead(request.url === '/missing' ? 404 : 200, { 'content-type': 'text/plain' });
      response.end(`app saw ${request.url ?? ''}\n`);
    });
    await new Promise<void>((resolve) => app.listen(0, '127.0.0.1', resolve));
    const appClosed = new Promise((resolve) => app.once('close', resolve));
    t.after(() => {
      app.closeAllConnections();
      app.close();
    });
    const port = (app.address() as { port: number }).port;
    const emulator = await startEmulator(t, { upstreamPort: port });
    const url = (path: string) => `http://127.0.0.1:${emulator.ports.http}${path}`;

    const first = await httpRequest(url('/orders?id=1'));
    assert.deepEqual([first.status, first.body], [200, 'app saw /orders?id=1\n']);
    assert.equal((await httpRequest(url('/missing'))).status, 404);

    await httpRequest(adminUrl(emulator, '/healthcheck/fail'), { method: 'POST' });
    const draining = await httpRequest(url('/'));
    assert.equal(draining.status, 200);
    assert.equal(draining.headers['connection'], 'close', "the drain-close decision is the listener's, upstream or not");

    app.closeAllConnections();
    app.close();
    await appClosed;
    const gone = await httpRequest(url('/'));
    assert.equal(gone.status, 503);
    assert.match(gone.body, /^upstream connect error or disconnect\/reset before headers\. reset reason: remote connection failure$/);
  });
});
