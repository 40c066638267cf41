/**
 * Every way the sidecar reaches Envoy's admin API, through the built sidecar (`node dist/entry.cjs
 * mode=sidecar`) against the Envoy emulator: a Unix socket (Contour's), an admin API on ::1 only (Envoy
 * Gateway on IPv6 clusters), a name that resolves to both families, and Envoy's release deciding how
 * `drain_listeners` is spelled. Each with the control that shows what goes wrong without it.
 */
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { httpRequest, openHttpConnection, closeAll } from '../support/connections.js';
import { EnvoyEmulator, type EnvoyEmulatorOptions } from '../../src/emulator/envoy-emulator.js';
import { mountNamespaceLauncher, mountNamespaceProblem, runAsProblem } from '../support/mount-namespace.js';
import { spawnSidecar, type SidecarProcess, type SpawnOptions } from '../support/sidecar-process.js';

const FLAGS = ['--check-interval=50ms', '--check-delay=0', '--drain-timeout=10s', '--admin-timeout=500ms'];

async function emulator(t: TestContext, options: EnvoyEmulatorOptions): Promise<EnvoyEmulator> {
  const started = await EnvoyEmulator.start(options);
  t.after(() => started.close());
  return started;
}

async function sidecar(t: TestContext, flags: readonly string[], options: SpawnOptions = {}): Promise<SidecarProcess> {
  const started = await spawnSidecar([...FLAGS, ...flags], options);
  t.after(() => started.kill());
  return started;
}

function temporaryDirectory(t: TestContext): string {
  const directory = mkdtempSync(join(tmpdir(), 'esm-admin-'));
  t.after(() => rmSync(directory, { recursive: true, force: true }));
  return directory;
}

const answered = (line: Record<string, unknown>): boolean => line['event'] === 'envoy_admin_reachable';

/** /shutdown, then what /drain says about it. */
async function drainOnce(process: SidecarProcess): Promise<{ status: number; drain: Record<string, unknown> }> {
  const shutdown = await httpRequest(process.url('/shutdown'), { timeoutMs: 15_000 });
  const drain = JSON.parse((await httpRequest(process.url('/drain'))).body) as Record<string, unknown>;
  return { status: shutdown.status, drain };
}

describe("the admin API on a Unix socket (Contour's)", () => {
  test('every call goes over the socket: the sidecar becomes ready, drains, and /drain names the release', async (t) => {
    const socket = join(temporaryDirectory(t), 'admin.sock');
    const envoy = await emulator(t, { adminSocketPath: socket, version: '1.39.0' });
    const process = await sidecar(t, [`--admin-address=unix:${socket}`]);
    const reachable = await process.waitForLog(answered);
    assert.equal(reachable['envoy_admin'], `unix:${socket}`);
    const version = await process.waitForLog((line) => line['event'] === 'envoy_version');
    assert.equal(version['envoy_version'], '1.39.0');
    assert.equal(version['drain_call'], 'POST /drain_listeners?graceful&skip_exit');
    assert.equal((await httpRequest(process.url('/ready'))).status, 200);

    const { status, drain } = await drainOnce(process);
    assert.equal(status, 200);
    assert.equal(drain['reason'], 'connections-closed');
    assert.equal((drain['envoyProcess'] as Record<string, unknown>)['version'], '1.39.0');
    const posts = envoy.adminRequests.filter((request) => request.method === 'POST').map((request) => `${request.path}?${request.query}`);
    assert.deepEqual(posts, ['/healthcheck/fail?', '/drain_listeners?graceful&skip_exit']);
  });

  test('control: no socket at the path: never ready, the log says where it looked, the drain ends unreached', async (t) => {
    const directory = temporaryDirectory(t);
    await emulator(t, { adminSocketPath: join(directory, 'admin.sock') });
    const process = await sidecar(t, [`--admin-address=unix:${join(directory, 'elsewhere.sock')}`, '--drain-timeout=3s']);
    const waiting = await process.waitForLog((line) => line['event'] === 'envoy_admin_waiting', 8_000);
    assert.equal(waiting['kind'], 'refused');
    assert.match(String(waiting['error']), /no socket at .*elsewhere\.sock \(Envoy not started yet, or the directory is not the volume/);
    assert.equal((await httpRequest(process.url('/ready'))).status, 503);
    const { status, drain } = await drainOnce(process);
    assert.equal(status, 503);
    assert.equal(drain['reason'], 'admin-unreachable');
  });

  test("a socket this user may not connect to (mode 0644, another owner) is said to be a permission problem, naming the uid and runAsUser", async (t) => {
    const problem = runAsProblem(65534);
    if (problem !== undefined) return t.skip(problem);
    const directory = temporaryDirectory(t);
    chmodSync(directory, 0o755);
    const socket = join(directory, 'admin.sock');
    await emulator(t, { adminSocketPath: socket, adminSocketMode: 0o644 });
    const nobody = 65534;
    const started = await sidecar(t, [`--admin-address=unix:${socket}`], { uid: nobody, gid: nobody });
    const waiting = await started.waitForLog((line) => line['event'] === 'envoy_admin_waiting', 8_000);
    assert.equal(waiting['kind'], 'transport');
    assert.match(String(waiting['error']), new RegExp(`permission denied connecting to ${socket} as uid ${nobody}.*runAsUser`));
    assert.equal((await httpRequest(started.url('/ready'))).status, 503);
  });
});

describe('address families', () => {
  test('admin API on [::1] only: --admin-address=::1 drains it; control: the default 127.0.0.1 never reaches it', async (t) => {
    const envoy = await emulator(t, { host: '::1' });
    const good = await sidecar(t, ['--admin-address=::1', `--admin-port=${envoy.ports.admin}`]);
    await good.waitForLog(answered);
    const { status, drain } = await drainOnce(good);
    assert.equal(status, 200);
    assert.equal(drain['reason'], 'connections-closed');

    const wrong = await sidecar(t, [`--admin-port=${envoy.ports.admin}`, '--drain-timeout=3s']);
    assert.equal((await wrong.waitForLog((line) => line['event'] === 'envoy_admin_waiting', 8_000))['kind'], 'refused');
    assert.equal((await httpRequest(wrong.url('/ready'))).status, 503);
  });

  test('a name that resolves to both families reaches Envoy on the one it listens on; control: a client that dials the first address only is refused', async (t) => {
    const problem = mountNamespaceProblem();
    if (problem !== undefined) return t.skip(problem);
    const hosts = join(temporaryDirectory(t), 'hosts');
    writeFileSync(hosts, '127.0.0.1 localhost\n::1 localhost\n');
    const launcher = mountNamespaceLauncher([{ source: hosts, target: '/etc/hosts' }]);
    // Envoy listens on the family the resolver lists second (glibc sorts ::1 first, RFC 6724).
    const addresses = resolveInNamespace(launcher, 'localhost');
    assert.equal(addresses.length, 2, JSON.stringify(addresses));
    const envoy = await emulator(t, { host: addresses[1] });

    const control = dialFirstAddressOnly(launcher, 'localhost', envoy.ports.admin);
    assert.equal(control, 'ECONNREFUSED', `a client taking ${addresses[0]} alone is refused`);

    const process = await sidecar(t, ['--admin-address=localhost', `--admin-port=${envoy.ports.admin}`], { launcher });
    const reachable = await process.waitForLog(answered);
    assert.equal(reachable['envoy_admin'], `localhost:${envoy.ports.admin}`);
    assert.equal(reachable['failed_attempts'], 0, 'reached at the first call, not after retries');
  });
});

/** What `name` resolves to inside the namespace, in the resolver's order. */
function resolveInNamespace(launcher: readonly string[], name: string): string[] {
  const script = `require('node:dns').lookup(${JSON.stringify(name)}, { all: true }, (error, found) => console.log(JSON.stringify(error ? [] : found.map((entry) => entry.address))))`;
  return JSON.parse(runInNamespace(launcher, script)) as string[];
}

/** The error code (or "connected") of an HTTP GET that dials only the first address of `name`, as many clients do. */
function dialFirstAddressOnly(launcher: readonly string[], name: string, port: number): string {
  const script = `const request = require('node:http').get({ host: ${JSON.stringify(name)}, port: ${port}, path: '/ready', autoSelectFamily: false, timeout: 2000 });
request.on('response', () => { console.log('connected'); process.exit(0); });
request.on('error', (error) => { console.log(error.code); process.exit(0); });`;
  return runInNamespace(launcher, script).trim();
}

function runInNamespace(launcher: readonly string[], script: string): string {
  const [file, ...args] = [...launcher, process.execPath, '-e', script];
  const result = spawnSync(file ?? 'unshare', args, { encoding: 'utf8', timeout: 10_000 });
  assert.equal(result.status, 0, result.stderr);
  return result.stdout;
}

describe("Envoy's release decides how drain_listeners is spelled", () => {
  /** Envoy's drain time is short here, so that "keeps accepting past it" can be seen within the test. */
  const DRAIN_TIME_MS = 300;

  async function drainAndTryANewConnection(t: TestContext, version: string): Promise<{ posts: string[]; accepted: boolean }> {
    const envoy = await emulator(t, { version, drainTimeMs: DRAIN_TIME_MS });
    const held = await openHttpConnection(envoy.ports.http);
    t.after(() => closeAll([held]));
    const process = await sidecar(t, [`--admin-port=${envoy.ports.admin}`, '--drain-timeout=3s']);
    await process.waitForLog((line) => line['event'] === 'envoy_version');
    const shutdown = httpRequest(process.url('/shutdown'), { timeoutMs: 10_000 });
    await envoy.waitForAdminRequest((request) => request.path === '/drain_listeners');
    await new Promise((resolve) => setTimeout(resolve, DRAIN_TIME_MS * 3));
    const accepted = await connects(envoy.ports.http);
    held.socket.destroy();
    await shutdown;
    const posts = envoy.adminRequests.filter((request) => request.method === 'POST').map((request) => `${request.path}?${request.query}`);
    return { posts, accepted };
  }

  test('1.29 and later (both sides of envoy PR #47042): graceful&skip_exit, and Envoy keeps accepting past its drain time', async (t) => {
    for (const version of ['1.29.0', '1.39.2', '1.40.0']) {
      const { posts, accepted } = await drainAndTryANewConnection(t, version);
      assert.deepEqual(posts, ['/healthcheck/fail?', '/drain_listeners?graceful&skip_exit'], version);
      assert.equal(accepted, true, `${version}: a late client is still served`);
    }
  });

  test('before 1.29: graceful alone, with a warning; the listeners then stop at the end of the drain time (the control: what skip_exit prevents)', async (t) => {
    const envoy = await emulator(t, { version: '1.28.7' });
    const process = await sidecar(t, [`--admin-port=${envoy.ports.admin}`]);
    const line = await process.waitForLog((entry) => entry['event'] === 'envoy_version');
    assert.equal(line['level'], 'warn');
    assert.match(String(line['msg']), /Envoy 1\.28\.7 predates drain_listeners\?skip_exit/);

    const { posts, accepted } = await drainAndTryANewConnection(t, '1.28.7');
    assert.deepEqual(posts, ['/healthcheck/fail?', '/drain_listeners?graceful']);
    assert.equal(accepted, false, 'a late client is refused once the drain time is over');
  });
});

/** Whether a new TCP connection to `port` on loopback is accepted (within a second). */
function connects(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const socket = net.connect({ host: '127.0.0.1', port });
    const done = (result: boolean): void => {
      socket.destroy();
      resolve(result);
    };
    socket.setTimeout(1_000, () => done(false));
    socket.once('connect', () => done(true));
    socket.once('error', () => done(false));
  });
}
