/**
 * The Envoy emulator as Contour runs Envoy, and across Envoy releases: the admin API on a Unix socket,
 * Contour's read-only `envoy-admin` listener, IPv6 loopback, and `drain_listeners` by `version`. The Envoy
 * and Contour source each behaviour follows is named in docs/emulator.md.
 */
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { mkdtemp, rm, stat, writeFile } from 'node:fs/promises';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import { setTimeout as sleep } from 'node:timers/promises';
import { describe, test, type TestContext } from 'node:test';
import { httpRequest, openHttpConnection, openTcpConnection, requestOn, type SimpleResponse } from '../support/connections.js';
import { parseCliArgs } from '../../src/emulator/cli.js';
import { EnvoyEmulator, listenerStatName, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { waitUntil } from '../support/wait.js';

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  return emulator;
}

async function tempDir(t: TestContext): Promise<string> {
  const dir = await mkdtemp(join(tmpdir(), 'emu-'));
  t.after(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

function admin(emulator: EnvoyEmulator, path: string, method = 'GET'): Promise<SimpleResponse> {
  return httpRequest(`http://127.0.0.1:${emulator.ports.admin}${path}`, { method });
}


function readonly(emulator: EnvoyEmulator, path: string, method = 'GET'): Promise<SimpleResponse> {
  return httpRequest(`http://127.0.0.1:${emulator.readonlyAdminPort ?? 0}${path}`, { method });
}

function stat_(emulator: EnvoyEmulator, name: string): number | undefined {
  return emulator.statValues().find((value) => value.name === name)?.value;
}

const stoppedListeners = (emulator: EnvoyEmulator): number | undefined => stat_(emulator, 'listener_manager.listener_stopped');

describe('Envoy emulator: --version', () => {
  test("/server_info version has Envoy's format, with the chosen release; a bad version is refused", async (t) => {
    const byDefault = await startEmulator(t);
    const chosen = await startEmulator(t, { version: '1.40.0' });
    const versionOf = async (emulator: EnvoyEmulator): Promise<string> => (JSON.parse((await admin(emulator, '/server_info')).body) as { version: string }).version;
    assert.match(await versionOf(byDefault), /^[0-9a-f]{40}\/1\.36\.2\/Clean\/RELEASE\/BoringSSL$/);
    assert.match(await versionOf(chosen), /^[0-9a-f]{40}\/1\.40\.0\/Clean\/RELEASE\/BoringSSL$/);
    await assert.rejects(EnvoyEmulator.start({ version: '1.40' }), /version: "1\.40" is not X\.Y\.Z/);
  });

  test('before 1.29 skip_exit is ignored: graceful&skip_exit stops the listeners at the end of the drain (1.29 on: never)', async (t) => {
    const old = await startEmulator(t, { version: '1.28.7', drainTimeMs: 30 });
    const current = await startEmulator(t, { version: '1.29.0', drainTimeMs: 30 });
    for (const emulator of [old, current]) assert.equal((await admin(emulator, '/drain_listeners?graceful&skip_exit', 'POST')).status, 200);
    await waitUntil(() => stoppedListeners(old) === 2, 2_000, 'the 1.28 listeners stopped');
    await sleep(100); // three drain times: the 1.29 drain would have stopped its listeners by now
    assert.equal(stoppedListeners(current), 0);
    const held = await openTcpConnection(current.ports.tcp);
    await held.close();
    // skip_exit alone is no 400 before 1.29: a plain non-graceful drain.
    const oldAlone = await startEmulator(t, { version: '1.28.7' });
    assert.equal((await admin(oldAlone, '/drain_listeners?skip_exit', 'POST')).status, 200);
    assert.equal(stoppedListeners(oldAlone), 2);
  });

  test('1.29 to 1.39: skip_exit alone is 400; a non-graceful drain stops the listeners and drains nothing', async (t) => {
    const emulator = await startEmulator(t, { version: '1.39.9', drainStrategy: 'immediate' });
    const held = await openHttpConnection(emulator.ports.http);
    t.after(() => held.close());
    const refused = await admin(emulator, '/drain_listeners?skip_exit', 'POST');
    assert.deepEqual([refused.status, refused.body], [400, 'skip_exit requires graceful\n']);
    assert.equal((await admin(emulator, '/drain_listeners', 'POST')).status, 200);
    assert.equal(emulator.isDraining, false);
    assert.equal(stoppedListeners(emulator), 2);
    assert.notEqual((await requestOn(held.socket)).headers['connection'], 'close', 'no drain-close');
  });

  test('1.40 (PR #47042): a non-graceful drain drains then stops; skip_exit alone drains and keeps accepting', async (t) => {
    const stopping = await startEmulator(t, { version: '1.40.0', drainStrategy: 'immediate' });
    const held = await openHttpConnection(stopping.ports.http);
    t.after(() => held.close());
    assert.equal((await admin(stopping, '/drain_listeners', 'POST')).status, 200);
    assert.equal(stopping.drainScope, 'all');
    assert.equal(stoppedListeners(stopping), 2);
    assert.equal((await requestOn(held.socket)).headers['connection'], 'close', 'drain-close on the next response');
    await assert.rejects(openTcpConnection(stopping.ports.tcp), /ECONNREFUSED/);

    const accepting = await startEmulator(t, { version: '1.40.0', drainStrategy: 'immediate', drainTimeMs: 30 });
    assert.equal((await admin(accepting, '/drain_listeners?skip_exit', 'POST')).status, 200);
    assert.equal(accepting.isDraining, true);
    await sleep(100); // three drain times: no completion stops them either
    assert.equal(stoppedListeners(accepting), 0);
    const fresh = await openTcpConnection(accepting.ports.http);
    t.after(() => fresh.close());
    assert.equal((await requestOn(fresh.socket)).headers['connection'], 'close', 'still accepting, and draining');
  });

  test('before 1.34 a drain has no direction: graceful&inboundonly drain-closes an UNSPECIFIED listener too', async (t) => {
    const closes = async (version: string): Promise<string | undefined> => {
      const emulator = await startEmulator(t, { version, drainStrategy: 'immediate' });
      const held = await openHttpConnection(emulator.ports.http);
      t.after(() => held.close());
      await admin(emulator, '/drain_listeners?graceful&inboundonly', 'POST');
      return (await requestOn(held.socket)).headers['connection'];
    };
    assert.equal(await closes('1.33.4'), 'close');
    assert.equal(await closes('1.34.0'), 'keep-alive', 'an inbound-only drain leaves UNSPECIFIED listeners alone');
  });
});

describe('Envoy emulator: admin on a Unix socket (Contour)', () => {
  test('serves the admin API only there, replacing a leftover file, with the socket mode; faults and quitquitquit work', async (t) => {
    const dir = await tempDir(t);
    const path = join(dir, 'admin.sock');
    await writeFile(path, 'left over by a previous container');
    // Negative control: a plain bind fails on the leftover file; Envoy (and the emulator) unlink it first.
    const plain = net.createServer();
    await assert.rejects(new Promise((resolve, reject) => plain.once('error', reject).listen(path, () => resolve(undefined))), /EADDRINUSE/);

    const emulator = await startEmulator(t, { adminSocketPath: path });
    assert.equal(emulator.ports.admin, 0);
    assert.equal((await stat(path)).isSocket(), true);
    assert.equal((await stat(path)).mode & 0o777, 0o644);
    assert.equal((await httpRequest('http://localhost/ready', { socketPath: path })).body, 'LIVE\n');
    const stats = (await httpRequest('http://localhost/stats?filter=^listener\\.admin\\.downstream_cx_total$', { socketPath: path })).body;
    assert.match(stats, /^listener\.admin\.downstream_cx_total: [1-9]\d*\n$/);

    assert.equal((await httpRequest('http://localhost/emulator/fault?fault=status:503&paths=/ready', { socketPath: path, method: 'POST' })).status, 200);
    assert.equal((await httpRequest('http://localhost/ready', { socketPath: path })).status, 503);
    await emulator.setFault({ kind: 'down' });
    await assert.rejects(httpRequest('http://localhost/ready', { socketPath: path }), /ENOENT|ECONNREFUSED/);
    await emulator.setFault({ kind: 'none' });
    assert.equal((await httpRequest('http://localhost/ready', { socketPath: path })).status, 200);
    const requests = JSON.parse((await httpRequest('http://localhost/emulator/requests', { socketPath: path })).body) as { path: string }[];
    assert.ok(requests.some((request) => request.path === '/ready'), "Envoy's readiness was asked on the socket");

    assert.equal((await httpRequest('http://localhost/quitquitquit', { socketPath: path, method: 'POST' })).body, 'OK\n');
    assert.equal(await emulator.exited, 'quitquitquit');
  });

  test('the mode is configurable; the socket and a TCP admin port exclude each other', async (t) => {
    const path = join(await tempDir(t), 'admin.sock');
    await startEmulator(t, { adminSocketPath: path, adminSocketMode: 0o600 });
    assert.equal((await stat(path)).mode & 0o777, 0o600);
    await assert.rejects(EnvoyEmulator.start({ adminSocketPath: `${path}2`, adminPort: 0 }), /exclude each other/);
  });
});

describe("Envoy emulator: Contour's envoy-admin read-only listener", () => {
  test('GET on the listed paths reaches the admin API with its query; anything else is an empty 404 and changes nothing', async (t) => {
    const path = join(await tempDir(t), 'admin.sock');
    const emulator = await startEmulator(t, { adminSocketPath: path, readonlyAdminPort: 0 });
    const filtered = await readonly(emulator, '/stats?filter=^server\\.live$');
    assert.deepEqual([filtered.status, filtered.body], [200, 'server.live: 1\n'], 'the query string is forwarded');
    assert.equal((await readonly(emulator, '/ready')).body, 'LIVE\n');

    for (const [method, route] of [['POST', '/healthcheck/fail'], ['POST', '/drain_listeners?graceful'], ['GET', '/healthcheck/fail'], ['POST', '/stats'], ['GET', '/stats/'], ['POST', '/quitquitquit']] as const) {
      const answer = await readonly(emulator, route, method);
      assert.deepEqual([answer.status, answer.body], [404, ''], `${method} ${route}`);
    }
    assert.equal(emulator.state, 'LIVE');
    assert.equal(emulator.isDraining, false);
    assert.equal(emulator.exitedWith, undefined);
    assert.deepEqual(emulator.adminRequests.map((request) => `${request.method} ${request.path}?${request.query}`), ['GET /stats?filter=^server\\.live$', 'GET /ready?']);
    // Positive control: the same mutation on the admin API itself works.
    assert.equal((await httpRequest('http://localhost/healthcheck/fail', { socketPath: path, method: 'POST' })).status, 200);
    assert.equal(emulator.state, 'DRAINING');
  });

  test('counted as a data listener named with its real address, drain-closes, and stops with the others', async (t) => {
    const emulator = await startEmulator(t, { readonlyAdminPort: 0, drainStrategy: 'immediate' });
    const port = emulator.readonlyAdminPort ?? 0;
    assert.equal(emulator.listenerNames.readonlyAdmin, `127.0.0.1_${port}`);
    const held = await openTcpConnection(port);
    t.after(() => held.close());
    assert.equal((await requestOn(held.socket, '/ready')).status, 200);
    assert.equal(stat_(emulator, `listener.127.0.0.1_${port}.downstream_cx_active`), 1);
    assert.equal(stat_(emulator, 'http.envoy-admin.downstream_rq_total'), 1);
    assert.equal(stat_(emulator, 'listener_manager.total_listeners_active'), 3);

    assert.equal((await admin(emulator, '/drain_listeners?graceful&skip_exit', 'POST')).status, 200);
    assert.equal((await requestOn(held.socket, '/ready')).headers['connection'], 'close');
    assert.equal(stat_(emulator, 'http.envoy-admin.downstream_cx_drain_close'), 1);
    assert.equal((await admin(emulator, '/drain_listeners', 'POST')).status, 200);
    assert.equal(stoppedListeners(emulator), 3);
    await assert.rejects(openTcpConnection(port), /ECONNREFUSED/);
  });
});

describe('Envoy emulator: IPv6', () => {
  test("listener stat names follow Envoy's address string with ':' sanitized", () => {
    assert.equal(listenerStatName('0.0.0.0', 8080), '0.0.0.0_8080');
    assert.equal(listenerStatName('::1', 10000), '[__1]_10000');
    assert.equal(listenerStatName('::', 443), '[__]_443');
    assert.equal(listenerStatName('2001:DB8:0:0:0:0:0:1', 80), '[2001_db8__1]_80', 'inet_ntop form: compressed, lower case');
  });

  test('--host=::1 binds every listener on ::1 only: reachable there, refused on 127.0.0.1', async (t) => {
    const emulator = await startEmulator(t, { host: '::1', statAddress: '::', readonlyAdminPort: 0 });
    const { admin: adminPort, http: httpPort, tcp: tcpPort } = emulator.ports;
    const readonlyPort = emulator.readonlyAdminPort ?? 0;
    for (const port of [adminPort, httpPort, tcpPort, readonlyPort]) {
      const held = await openTcpConnection(port, '::1');
      await held.close();
      await assert.rejects(openTcpConnection(port, '127.0.0.1'), /ECONNREFUSED/, `port ${port} on IPv4`);
    }
    assert.equal((await httpRequest(`http://[::1]:${readonlyPort}/ready`)).body, 'LIVE\n', 'the read-only route reaches the admin API on ::1');
    assert.deepEqual(emulator.listenerNames, { http: `[__]_${httpPort}`, tcp: `[__]_${tcpPort}`, readonlyAdmin: `[__1]_${readonlyPort}` });
    const held = await openHttpConnection(httpPort, '::1');
    t.after(() => held.close());
    const stats = (await httpRequest(`http://[::1]:${adminPort}/stats?usedonly`)).body;
    assert.ok(stats.includes(`listener.[__]_${httpPort}.downstream_cx_active: 1\n`), stats);
    const prometheus = (await httpRequest(`http://[::1]:${adminPort}/stats/prometheus`)).body;
    assert.ok(prometheus.includes(`envoy_listener_downstream_cx_active{envoy_listener_address="[__]_${httpPort}"} 1\n`), 'the HTTP listener on ::1 has one connection');
  });
});

describe('Envoy emulator CLI: versions, Unix socket, read-only listener', () => {
  test('parses --version, --admin-socket, --admin-socket-mode and --readonly-admin-port in both forms; bad values name the flag', () => {
    assert.equal(parseCliArgs(['--version=1.40.0']).options.version, '1.40.0');
    assert.equal(parseCliArgs(['--version', '1.28.1']).options.version, '1.28.1');
    assert.throws(() => parseCliArgs(['--version=latest']), /--version: "latest"/);
    const socket = parseCliArgs(['--admin-socket', '/tmp/a.sock', '--admin-socket-mode=0600', '--readonly-admin-port', '9001']).options;
    assert.deepEqual([socket.adminSocketPath, socket.adminSocketMode, socket.readonlyAdminPort], ['/tmp/a.sock', 0o600, 9001]);
    assert.equal(parseCliArgs(['--admin-socket-mode', '644']).options.adminSocketMode, 0o644);
    assert.throws(() => parseCliArgs(['--admin-socket-mode=0999']), /--admin-socket-mode/);
    assert.throws(() => parseCliArgs(['--readonly-admin-port=-1']), /--readonly-admin-port/);
  });

  test('prints adminSocket, a null admin and readonlyAdmin; the read-only port answers; SIGTERM exits 0', async (t) => {
    const path = join(await tempDir(t), 'admin.sock');
    const cli = new URL('../../src/emulator/cli.ts', import.meta.url).pathname;
    const child = spawn(process.execPath, ['--import', 'tsx', cli, `--admin-socket=${path}`, '--readonly-admin-port=0', '--version', '1.40.0'], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.after(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    const [first] = (await Promise.race([
      once(createInterface({ input: child.stdout }), 'line'),
      new Promise((_, reject) => setTimeout(() => reject(new Error('emulator CLI printed nothing in 15 s')), 15_000).unref()),
    ])) as [string];
    const line = JSON.parse(first) as { admin: number | null; adminSocket: string; readonlyAdmin: number; version: string; listeners: { readonlyAdmin: string } };
    assert.deepEqual([line.admin, line.adminSocket, line.version], [null, path, '1.40.0']);
    assert.equal(line.listeners.readonlyAdmin, `127.0.0.1_${line.readonlyAdmin}`);
    const info = await httpRequest(`http://127.0.0.1:${line.readonlyAdmin}/server_info`);
    assert.match((JSON.parse(info.body) as { version: string }).version, /\/1\.40\.0\//);
    assert.equal((await httpRequest('http://localhost/ready', { socketPath: path })).status, 200);
    child.kill('SIGTERM');
    assert.deepEqual(await exited, [0, null]);
  });
});
