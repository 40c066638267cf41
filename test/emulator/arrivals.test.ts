/**
 * The Envoy emulator's arrival counters, through real sockets: which counters one request, one health check
 * or one bare TCP connect moves, on HTTP/1.1, HTTP/2 and WebSocket; Envoy's HTTP health-check filter before
 * and after /healthcheck/fail; the counters as the sidecar reads them (`/stats?format=json&filter=`) and in
 * Prometheus form. Each test closes every connection and emulator it opened; waits are bounded.
 */
import assert from 'node:assert/strict';
import http2 from 'node:http2';
import net from 'node:net';
import { once } from 'node:events';
import { describe, test, type TestContext } from 'node:test';
import { WebSocket } from 'ws';
import { parseCliArgs } from '../../src/emulator/cli.js';
import { EnvoyEmulator, HEALTH_CHECK_FILTER_STATS_SINCE, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { httpRequest, openTcpConnection, requestOn, type HeldConnection } from '../support/connections.js';
import { waitUntil, within } from '../support/wait.js';

/** The first release with the health-check filter's stats, and the one before it. */
const WITH_HC_STATS = `${HEALTH_CHECK_FILTER_STATS_SINCE.major}.${HEALTH_CHECK_FILTER_STATS_SINCE.minor}.0`;
const WITHOUT_HC_STATS = `${HEALTH_CHECK_FILTER_STATS_SINCE.major}.${HEALTH_CHECK_FILTER_STATS_SINCE.minor - 1}.0`;

/** The sidecar's kind of filter: listener connection counters, per-listener responses, requests and health checks. */
const SIDECAR_FILTER =
  '^(listener\\..*\\.(downstream_cx_total|downstream_cx_active|http\\..*\\.downstream_rq_(completed|5xx))|http\\..*\\.(downstream_rq_total|health_check\\.request_total))$';

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  return emulator;
}

async function adminPost(emulator: EnvoyEmulator, path: string): Promise<void> {
  assert.equal((await httpRequest(`http://127.0.0.1:${emulator.ports.admin}${path}`, { method: 'POST' })).status, 200);
}

/** Every counter but the per-worker copies (which worker takes a connection is round robin), read in-process. */
function counters(emulator: EnvoyEmulator): Map<string, number> {
  return new Map(
    emulator
      .statValues()
      .filter((stat) => stat.type === 'counter' && !stat.name.includes('.worker_'))
      .map((stat) => [stat.name, stat.value]),
  );
}

/** The counters that `action` moved, by how much: nothing else may move. */
async function moved(emulator: EnvoyEmulator, action: () => Promise<void>): Promise<Record<string, number>> {
  const before = counters(emulator);
  await action();
  const after = counters(emulator);
  const changes: Record<string, number> = {};
  for (const [name, value] of after) {
    const delta = value - (before.get(name) ?? 0);
    if (delta !== 0) changes[name] = delta;
  }
  return changes;
}

/** The counters one completed response of status class `n` charges on the HTTP listener, in both scopes. */
function charged(emulator: EnvoyEmulator, n: number): Record<string, number> {
  const listener = `listener.${emulator.listenerNames.http}.http.ingress_http`;
  return {
    'http.ingress_http.downstream_rq_completed': 1,
    [`http.ingress_http.downstream_rq_${n}xx`]: 1,
    [`${listener}.downstream_rq_completed`]: 1,
    [`${listener}.downstream_rq_${n}xx`]: 1,
  };
}

/** What accepting one connection on the HTTP listener counts, before any byte. */
function accepted(emulator: EnvoyEmulator): Record<string, number> {
  return { [`listener.${emulator.listenerNames.http}.downstream_cx_total`]: 1, 'http.ingress_http.downstream_cx_total': 1 };
}

/** The HTTP listener's accepted connections so far. */
function acceptedSoFar(emulator: EnvoyEmulator): number {
  return counters(emulator).get(`listener.${emulator.listenerNames.http}.downstream_cx_total`) ?? 0;
}

/**
 * A connection to the HTTP listener that has sent nothing yet, closed when the test ends; returned once the
 * emulator has accepted it, so that a later `moved` does not see the accept.
 */
async function h1(t: TestContext, emulator: EnvoyEmulator): Promise<HeldConnection> {
  const before = acceptedSoFar(emulator);
  const held = await openTcpConnection(emulator.ports.http);
  t.after(() => held.close());
  await waitUntil(() => acceptedSoFar(emulator) > before, 5_000, 'the connection accepted');
  return held;
}

interface H2Answer {
  readonly status: number;
  readonly headers: http2.IncomingHttpHeaders;
  readonly body: string;
}

/** An h2c session, returned once the emulator has counted it as HTTP/2 (its preface read). */
async function h2(t: TestContext, emulator: EnvoyEmulator): Promise<http2.ClientHttp2Session> {
  const before = counters(emulator).get('http.ingress_http.downstream_cx_http2_total') ?? 0;
  const session = http2.connect(`http://127.0.0.1:${emulator.ports.http}`);
  session.on('error', () => undefined);
  t.after(() => session.destroy());
  await within(once(session, 'connect'), 5_000, 'h2c connect');
  await waitUntil(() => (counters(emulator).get('http.ingress_http.downstream_cx_http2_total') ?? 0) > before, 5_000, 'the h2c preface read');
  return session;
}

function h2Get(session: http2.ClientHttp2Session, path: string): Promise<H2Answer> {
  return within(
    new Promise((resolve, reject) => {
      const stream = session.request({ ':path': path });
      let headers: http2.IncomingHttpHeaders = {};
      let body = '';
      stream.setEncoding('utf8');
      stream.on('response', (received) => (headers = received));
      stream.on('data', (chunk: string) => (body += chunk));
      stream.on('end', () => resolve({ status: Number(headers[':status']), headers, body }));
      stream.on('error', reject);
      stream.end();
    }),
    5_000,
    `h2 GET ${path}`,
  );
}

/** A free loopback port with nothing listening on it (an upstream that refuses). */
async function closedPort(): Promise<number> {
  const server = net.createServer();
  server.listen(0, '127.0.0.1');
  await once(server, 'listening');
  const { port } = server.address() as net.AddressInfo;
  server.close();
  await once(server, 'close');
  return port;
}

describe('Envoy emulator: response counters (chargeStats), HCM-wide and per listener', () => {
  test('HTTP/1.1, HTTP/2 and WebSocket: downstream_rq_total when a request starts, completed and its class when its headers are encoded', async (t) => {
    const emulator = await startEmulator(t);

    let held: HeldConnection | undefined;
    assert.deepEqual(
      await moved(emulator, async () => {
        held = await h1(t, emulator);
        assert.equal((await requestOn(held.socket, '/')).status, 200);
      }),
      { ...accepted(emulator), 'http.ingress_http.downstream_cx_http1_total': 1, 'http.ingress_http.downstream_rq_total': 1, ...charged(emulator, 2) },
      'a new HTTP/1.1 connection and its first request',
    );
    assert.deepEqual(
      await moved(emulator, async () => void assert.equal((await requestOn(held!.socket, '/')).status, 200)),
      { 'http.ingress_http.downstream_rq_total': 1, ...charged(emulator, 2) },
      'a second request on the same keep-alive connection: no connection counter',
    );

    // A slow request counts at its start; completed only once its response headers go out.
    const slow = await h1(t, emulator);
    const slowAnswer = requestOn(slow.socket, '/delay/200', 5_000);
    await waitUntil(() => counters(emulator).get('http.ingress_http.downstream_rq_total') === 3, 5_000, 'the slow request counted');
    assert.equal(counters(emulator).get('http.ingress_http.downstream_rq_completed'), 2, 'not completed while the upstream is slow');
    assert.equal((await slowAnswer).status, 200);
    assert.equal(counters(emulator).get('http.ingress_http.downstream_rq_completed'), 3);

    let session: http2.ClientHttp2Session | undefined;
    assert.deepEqual(
      await moved(emulator, async () => {
        session = await h2(t, emulator);
        assert.equal((await h2Get(session, '/')).status, 200);
        assert.equal((await h2Get(session, '/stream?interval_ms=5&count=2')).body, '1\n2\n');
      }),
      { ...accepted(emulator), 'http.ingress_http.downstream_cx_http2_total': 1, 'http.ingress_http.downstream_rq_total': 2, ...doubled(charged(emulator, 2)) },
      'an h2c connection and two streams',
    );

    const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/chat`);
    t.after(() => ws.terminate());
    assert.deepEqual(
      await moved(emulator, async () => {
        await within(once(ws, 'open'), 5_000, 'WebSocket open');
      }),
      {
        ...accepted(emulator),
        'http.ingress_http.downstream_cx_http1_total': 1,
        'http.ingress_http.downstream_cx_upgrades_total': 1,
        'http.ingress_http.downstream_rq_total': 1,
        ...charged(emulator, 1),
      },
      'a WebSocket upgrade: its 101 is a 1xx response',
    );

    const other = await h1(t, emulator);
    assert.deepEqual(
      await moved(emulator, async () => {
        let answer = '';
        other.socket.on('data', (chunk: Buffer) => (answer += chunk.toString('latin1')));
        other.socket.write('GET /x HTTP/1.1\r\nHost: test\r\nConnection: upgrade\r\nUpgrade: h2c-nope\r\n\r\n');
        await within(other.closed, 5_000, 'the refused upgrade closed');
        assert.match(answer, /^HTTP\/1\.1 403 /);
      }),
      { 'http.ingress_http.downstream_cx_http1_total': 1, 'http.ingress_http.downstream_rq_total': 1, ...charged(emulator, 4) },
      'an upgrade the HCM does not allow: a 403 local reply, 4xx',
    );
    ws.close();
    session?.close();
  });

  test('a 503 local reply from the router (upstream refused) is a 5xx', async (t) => {
    const emulator = await startEmulator(t, { upstreamPort: await closedPort() });
    const held = await h1(t, emulator);
    assert.deepEqual(
      await moved(emulator, async () => void assert.equal((await requestOn(held.socket, '/')).status, 503)),
      { 'http.ingress_http.downstream_cx_http1_total': 1, 'http.ingress_http.downstream_rq_total': 1, ...charged(emulator, 5) },
    );
  });

  test('a bare TCP connect (an L4 health check: connect, close, no byte) counts a connection and no request', async (t) => {
    const emulator = await startEmulator(t);
    const { http: httpName, tcp: tcpName } = emulator.listenerNames;
    const connectAndClose = async (port: number, total: () => number): Promise<void> => {
      const before = total();
      const held = await openTcpConnection(port);
      await waitUntil(() => total() === before + 1, 5_000, 'the connection accepted');
      await held.close();
      await waitUntil(() => emulator.openConnections.http === 0 && emulator.openConnections.tcp === 0, 5_000, 'the connection uncounted');
    };
    const httpTotal = (): number => counters(emulator).get(`listener.${httpName}.downstream_cx_total`) ?? 0;
    const tcpTotal = (): number => counters(emulator).get(`listener.${tcpName}.downstream_cx_total`) ?? 0;
    assert.deepEqual(await moved(emulator, () => connectAndClose(emulator.ports.http, httpTotal)), accepted(emulator), 'the HTTP listener');
    assert.deepEqual(
      await moved(emulator, () => connectAndClose(emulator.ports.tcp, tcpTotal)),
      { [`listener.${tcpName}.downstream_cx_total`]: 1, 'tcp.ingress_tcp.downstream_cx_total': 1 },
      'the TCP proxy listener',
    );
  });

  test("the envoy-admin listener's and the admin's connection managers charge their own responses", async (t) => {
    const emulator = await startEmulator(t, { readonlyAdminPort: 0 });
    const readonly = emulator.listenerNames.readonlyAdmin ?? '';
    const scope = `listener.${readonly}.http.envoy-admin`;
    assert.deepEqual(
      await moved(emulator, async () => {
        assert.equal((await httpRequest(`http://127.0.0.1:${emulator.readonlyAdminPort}/ready`)).status, 200);
        assert.equal((await httpRequest(`http://127.0.0.1:${emulator.readonlyAdminPort}/healthcheck/fail`)).status, 404);
      }),
      {
        [`listener.${readonly}.downstream_cx_total`]: 2,
        'http.envoy-admin.downstream_cx_total': 2,
        'http.envoy-admin.downstream_rq_total': 2,
        'http.envoy-admin.downstream_rq_completed': 2,
        'http.envoy-admin.downstream_rq_2xx': 1,
        'http.envoy-admin.downstream_rq_4xx': 1,
        [`${scope}.downstream_rq_completed`]: 2,
        [`${scope}.downstream_rq_2xx`]: 1,
        [`${scope}.downstream_rq_4xx`]: 1,
        // The forwarded /ready reached the admin API: one admin connection and request.
        'listener.admin.downstream_cx_total': 1,
        'listener.admin.main_thread.downstream_cx_total': 1,
        'http.admin.downstream_cx_total': 1,
        'http.admin.downstream_rq_total': 1,
        'http.admin.downstream_rq_completed': 1,
        'http.admin.downstream_rq_2xx': 1,
        'listener.admin.http.admin.downstream_rq_completed': 1,
        'listener.admin.http.admin.downstream_rq_2xx': 1,
      },
    );
    assert.equal(emulator.isHealthCheckFailed, false, 'the read-only listener let no mutation through');
  });
});

/** Every count of `counts` twice. */
function doubled(counts: Record<string, number>): Record<string, number> {
  return Object.fromEntries(Object.entries(counts).map(([name, value]) => [name, value * 2]));
}

describe("Envoy emulator: Envoy's HTTP health-check filter (healthCheckPath)", () => {
  test('answers the path itself, 200 then 503 after /healthcheck/fail then 200 after /healthcheck/ok; a request, never charged as a response', async (t) => {
    const emulator = await startEmulator(t, { healthCheckPath: '/healthz', version: WITH_HC_STATS, upstreamPort: await closedPort(), commandLine: { serviceCluster: 'envoy-ingress' } });
    const checks = {
      'http.ingress_http.downstream_rq_total': 1,
      'http.ingress_http.health_check.request_total': 1,
    };
    const conn = await h1(t, emulator);
    assert.deepEqual(
      await moved(emulator, async () => {
        const answer = await requestOn(conn.socket, '/healthz');
        assert.equal(answer.status, 200);
        assert.equal(answer.body, '');
        assert.equal(answer.headers['x-envoy-upstream-healthchecked-cluster'], 'envoy-ingress');
        assert.equal(answer.headers['x-envoy-immediate-health-check-fail'], undefined);
        assert.notEqual(answer.headers['connection'], 'close', 'no drain: keep-alive');
      }),
      { 'http.ingress_http.downstream_cx_http1_total': 1, ...checks, 'http.ingress_http.health_check.ok': 1 },
      'HTTP/1.1 health check while live: answered by the filter (the upstream refuses, so a routed request would be 503)',
    );
    const session = await h2(t, emulator);
    assert.deepEqual(
      await moved(emulator, async () => assert.equal((await h2Get(session, '/healthz')).status, 200)),
      { ...checks, 'http.ingress_http.health_check.ok': 1 },
      'HTTP/2 health check while live',
    );
    assert.deepEqual(
      await moved(emulator, async () => assert.equal((await h2Get(session, '/healthz?full=1')).status, 503)),
      { 'http.ingress_http.downstream_rq_total': 1, ...charged(emulator, 5) },
      'the :path must match exactly: with a query it is routed (to the refusing upstream) and charged',
    );

    await adminPost(emulator, '/healthcheck/fail');
    assert.deepEqual(
      await moved(emulator, async () => {
        const answer = await requestOn(conn.socket, '/healthz');
        assert.equal(answer.status, 503);
        assert.equal(answer.headers['x-envoy-immediate-health-check-fail'], 'true');
        assert.equal(answer.headers['connection'], 'close', 'health checks failed: a DEFAULT listener drain-closes every response');
        await within(conn.closed, 5_000, 'the drain-closed connection');
      }),
      { ...checks, 'http.ingress_http.health_check.failed': 1, 'http.ingress_http.downstream_cx_drain_close': 1 },
      'HTTP/1.1 health check once failed: 503, still no 5xx',
    );
    const failedH2 = await h2Get(session, '/healthz');
    assert.equal(failedH2.status, 503);
    assert.equal(failedH2.headers['x-envoy-immediate-health-check-fail'], 'true');
    const normal = await requestOn((await h1(t, emulator)).socket, '/');
    assert.equal(normal.status, 503, 'routed to the refusing upstream');
    assert.equal(normal.headers['x-envoy-immediate-health-check-fail'], 'true', 'on every response while failed, not only health checks');

    await adminPost(emulator, '/healthcheck/ok');
    const again = await h1(t, emulator);
    const ok = await requestOn(again.socket, '/healthz');
    assert.equal(ok.status, 200);
    assert.equal(ok.headers['x-envoy-immediate-health-check-fail'], undefined);
    const stats = counters(emulator);
    assert.deepEqual(
      ['request_total', 'ok', 'failed'].map((name) => stats.get(`http.ingress_http.health_check.${name}`)),
      [5, 3, 2],
    );
    session.close();
  });

  test('a WebSocket 101 carries x-envoy-immediate-health-check-fail while failed; without the filter nothing does', async (t) => {
    const withFilter = await startEmulator(t, { healthCheckPath: '/healthz' });
    const without = await startEmulator(t);
    for (const emulator of [withFilter, without]) await adminPost(emulator, '/healthcheck/fail');
    const upgradeHeader = async (emulator: EnvoyEmulator): Promise<string | undefined> => {
      const ws = new WebSocket(`ws://127.0.0.1:${emulator.ports.http}/chat`);
      t.after(() => ws.terminate());
      const [response] = (await within(once(ws, 'upgrade'), 5_000, 'the 101')) as [{ headers: Record<string, string | undefined> }];
      ws.close();
      return response.headers['x-envoy-immediate-health-check-fail'];
    };
    assert.equal(await upgradeHeader(withFilter), 'true');
    assert.equal(await upgradeHeader(without), undefined);
    const held = await h1(t, without);
    const routed = await requestOn(held.socket, '/healthz');
    assert.deepEqual([routed.status, routed.body, routed.headers['x-envoy-immediate-health-check-fail']], [200, 'ok\n', undefined], 'no filter: /healthz is an ordinary route');
  });

  test(`its stats exist from ${WITH_HC_STATS} (HEALTH_CHECK_FILTER_STATS_SINCE) and only with the filter; the behaviour is the same before`, async (t) => {
    const before = await startEmulator(t, { healthCheckPath: '/healthz', version: WITHOUT_HC_STATS });
    const since = await startEmulator(t, { healthCheckPath: '/healthz', version: WITH_HC_STATS });
    const noFilter = await startEmulator(t, { version: WITH_HC_STATS });
    const names = (emulator: EnvoyEmulator): string[] => emulator.statValues().map((stat) => stat.name).filter((name) => name.includes('.health_check.'));
    for (const emulator of [before, since]) {
      const held = await h1(t, emulator);
      assert.equal((await requestOn(held.socket, '/healthz')).status, 200);
      assert.equal(counters(emulator).get('http.ingress_http.downstream_rq_completed'), 0);
    }
    assert.deepEqual(names(before), []);
    assert.deepEqual(names(since), ['http.ingress_http.health_check.failed', 'http.ingress_http.health_check.ok', 'http.ingress_http.health_check.request_total']);
    assert.deepEqual(names(noFilter), []);
    await assert.rejects(EnvoyEmulator.start({ healthCheckPath: 'healthz' }), /healthCheckPath: "healthz" is not a path/);
  });

  test('the CLI reads --health-check-path in both forms and refuses a path without "/"', () => {
    assert.equal(parseCliArgs(['--health-check-path=/healthz']).options.healthCheckPath, '/healthz');
    assert.equal(parseCliArgs(['--health-check-path', '/ready']).options.healthCheckPath, '/ready');
    assert.equal(parseCliArgs([]).options.healthCheckPath, undefined);
    assert.throws(() => parseCliArgs(['--health-check-path=healthz']), /--health-check-path: "healthz" is not a path/);
  });
});

describe('Envoy emulator: arrival counters as the sidecar reads them', () => {
  test("/stats?format=json with the sidecar's filter: exactly these names and values", async (t) => {
    const emulator = await startEmulator(t, { healthCheckPath: '/healthz', version: WITH_HC_STATS, workers: 1 });
    const { http: httpName, tcp: tcpName } = emulator.listenerNames;
    const held = await h1(t, emulator);
    await requestOn(held.socket, '/');
    await requestOn(held.socket, '/healthz');
    const probe = await openTcpConnection(emulator.ports.http);
    await waitUntil(() => emulator.openConnections.http === 2, 5_000, 'the bare connect accepted');
    await probe.close();
    await waitUntil(() => emulator.openConnections.http === 1, 5_000, 'the bare connect closed');

    const url = `http://127.0.0.1:${emulator.ports.admin}/stats?format=json&filter=${encodeURIComponent(SIDECAR_FILTER)}`;
    const document = JSON.parse((await httpRequest(url)).body) as { stats: { name: string; value: number }[] };
    const stats = Object.fromEntries(document.stats.map(({ name, value }) => [name, value]));
    assert.deepEqual(stats, {
      'http.admin.downstream_rq_total': 1,
      'http.ingress_http.downstream_rq_total': 2,
      'http.ingress_http.health_check.request_total': 1,
      'listener.admin.downstream_cx_active': 1,
      'listener.admin.downstream_cx_total': 1,
      'listener.admin.http.admin.downstream_rq_5xx': 0,
      'listener.admin.http.admin.downstream_rq_completed': 0,
      'listener.admin.main_thread.downstream_cx_active': 1,
      'listener.admin.main_thread.downstream_cx_total': 1,
      [`listener.${httpName}.downstream_cx_active`]: 1,
      [`listener.${httpName}.downstream_cx_total`]: 2,
      [`listener.${httpName}.http.ingress_http.downstream_rq_5xx`]: 0,
      [`listener.${httpName}.http.ingress_http.downstream_rq_completed`]: 1,
      [`listener.${httpName}.worker_0.downstream_cx_active`]: 1,
      [`listener.${httpName}.worker_0.downstream_cx_total`]: 2,
      [`listener.${tcpName}.downstream_cx_active`]: 0,
      [`listener.${tcpName}.downstream_cx_total`]: 0,
      [`listener.${tcpName}.worker_0.downstream_cx_active`]: 0,
      [`listener.${tcpName}.worker_0.downstream_cx_total`]: 0,
    });
    assert.deepEqual(
      document.stats.map(({ name }) => name),
      Object.keys(stats).sort(),
      'sorted by name, as Envoy lists them',
    );
  });

  test("/stats/prometheus: listener.<L>.http.<prefix>. and _rq_<N>xx become labels, as Envoy's tag extractors make them", async (t) => {
    const emulator = await startEmulator(t, { healthCheckPath: '/healthz', version: WITH_HC_STATS });
    const httpName = emulator.listenerNames.http;
    const held = await h1(t, emulator);
    await requestOn(held.socket, '/');
    await requestOn(held.socket, '/healthz');
    const body = (await httpRequest(`http://127.0.0.1:${emulator.ports.admin}/stats/prometheus`)).body;
    const lines = body.split('\n');
    const expected = [
      '# TYPE envoy_listener_http_downstream_rq_completed counter',
      `envoy_listener_http_downstream_rq_completed{envoy_http_conn_manager_prefix="ingress_http",envoy_listener_address="${httpName}"} 1`,
      '# TYPE envoy_listener_http_downstream_rq_xx counter',
      `envoy_listener_http_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="ingress_http",envoy_listener_address="${httpName}"} 1`,
      `envoy_listener_http_downstream_rq_xx{envoy_response_code_class="5",envoy_http_conn_manager_prefix="ingress_http",envoy_listener_address="${httpName}"} 0`,
      'envoy_http_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="ingress_http"} 1',
      'envoy_http_downstream_rq_completed{envoy_http_conn_manager_prefix="ingress_http"} 1',
      'envoy_http_downstream_rq_total{envoy_http_conn_manager_prefix="ingress_http"} 2',
      'envoy_http_health_check_request_total{envoy_http_conn_manager_prefix="ingress_http"} 1',
      'envoy_http_health_check_ok{envoy_http_conn_manager_prefix="ingress_http"} 1',
      'envoy_listener_admin_http_downstream_rq_completed{envoy_http_conn_manager_prefix="admin"} 0',
      'envoy_listener_admin_http_downstream_rq_xx{envoy_response_code_class="2",envoy_http_conn_manager_prefix="admin"} 0',
    ];
    assert.deepEqual(expected.filter((line) => !lines.includes(line)), []);
    assert.equal(lines.filter((line) => line === '# TYPE envoy_listener_http_downstream_rq_xx counter').length, 1, 'one family for every class');
    assert.ok(!body.includes(`envoy_listener_address="${httpName}.http`), 'the address tag stops at the listener address');
  });
});
