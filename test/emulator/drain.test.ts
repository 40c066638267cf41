/**
 * Fidelity of the Envoy emulator's drain paths to real Envoy (docs/emulator.md names
 * the Envoy source each behaviour follows). Time-dependent decisions run on an injected clock and a
 * seeded random source, so that nothing here waits for real seconds or depends on luck.
 */
import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { once } from 'node:events';
import { createInterface } from 'node:readline';
import { describe, test, type TestContext } from 'node:test';
import { closeAll, httpRequest, openHttpConnection, openTcpConnection, requestOn, type HeldConnection } from '../support/connections.js';
import { parseCliArgs } from '../../src/emulator/cli.js';
import { EnvoyEmulator, gradualDrainClose, seededRandom, type EnvoyEmulatorOptions, type RandomSource } from '../../src/emulator/envoy-emulator.js';
import { freePorts } from '../support/ports.js';

const CLI = new URL('../../src/emulator/cli.ts', import.meta.url).pathname;
/** An arbitrary instant, away from a whole second, for the fake clocks. */
const T0 = 1_800_000_000_250;

async function startEmulator(t: TestContext, options: EnvoyEmulatorOptions = {}): Promise<EnvoyEmulator> {
  const emulator = await EnvoyEmulator.start(options);
  t.after(() => emulator.close());
  return emulator;
}

function admin(emulator: EnvoyEmulator, path: string, method = 'GET') {
  return httpRequest(`http://127.0.0.1:${emulator.ports.admin}${path}`, { method });
}

/** A clock the test moves by hand. */
function fakeClock(start = T0): { now: () => number; set: (ms: number) => void } {
  let current = start;
  return { now: () => current, set: (ms) => (current = ms) };
}

/** A random source answering `values` in turn, failing if asked once more (to prove a decision drew none). */
function scripted(...values: number[]): RandomSource {
  return () => {
    const value = values.shift();
    if (value === undefined) throw new Error('drew a random number it should not have');
    return value;
  };
}

/** One request on each connection; returns those whose response said `Connection: close`. */
async function requestAll(connections: readonly HeldConnection[]): Promise<HeldConnection[]> {
  const closing: HeldConnection[] = [];
  for (const connection of connections) {
    if ((await requestOn(connection.socket)).headers['connection'] === 'close') closing.push(connection);
  }
  await Promise.all(closing.map((connection) => connection.closed));
  return closing;
}

async function openHttpConnections(emulator: EnvoyEmulator, count: number): Promise<HeldConnection[]> {
  const connections: HeldConnection[] = [];
  for (let index = 0; index < count; index += 1) connections.push(await openHttpConnection(emulator.ports.http));
  return connections;
}

describe('gradualDrainClose: DrainManagerImpl::drainClose with --drain-strategy gradual', () => {
  test('elapsed seconds round up: none at the drain start, 1/D through the first second, all in the last one', () => {
    const D = 4_000;
    for (let r = 0; r < 8; r += 1) assert.equal(gradualDrainClose(0, D, scripted(r)), false, `start, random ${r}`);
    for (const elapsed of [1, 999, 1_000]) {
      assert.deepEqual([0, 1, 2, 3, 4].map((r) => gradualDrainClose(elapsed, D, scripted(r))), [true, false, false, false, true], `${elapsed} ms`);
    }
    assert.deepEqual([0, 1, 2, 3].map((r) => gradualDrainClose(1_001, D, scripted(r))), [true, true, false, false]);
    assert.deepEqual([0, 1, 2, 3].map((r) => gradualDrainClose(2_500, D, scripted(r))), [true, true, true, false]);
    for (const elapsed of [3_001, 3_999]) assert.equal(gradualDrainClose(elapsed, D, scripted(3)), true, `${elapsed} ms`);
    // At and past the deadline Envoy skips the random draw.
    for (const elapsed of [4_000, 60_000]) assert.equal(gradualDrainClose(elapsed, D, scripted()), true, `${elapsed} ms`);
  });

  test('a drain time under one second is 0 s to the formula: always close, as with --drain-time-s 0', () => {
    assert.equal(gradualDrainClose(0, 500, scripted()), true);
    assert.equal(gradualDrainClose(0, 0, scripted()), true);
  });

  test('with a seeded random the share of closes grows with each elapsed second', () => {
    const random = seededRandom(42);
    const share = (elapsedMs: number): number => {
      let closes = 0;
      for (let draw = 0; draw < 4_000; draw += 1) if (gradualDrainClose(elapsedMs, 4_000, random)) closes += 1;
      return closes / 4_000;
    };
    const shares = [0, 500, 1_500, 2_500, 3_500].map(share);
    assert.equal(shares[0], 0);
    [0.25, 0.5, 0.75].forEach((expected, index) => assert.ok(Math.abs((shares[index + 1] ?? 0) - expected) < 0.03, `${shares.join()}`));
    assert.equal(shares[4], 1);
  });
});

describe('Envoy emulator: drain strategies on real connections', () => {
  test('gradual: a seeded drain closes no connection at its start, a growing share later, all past the deadline', async (t) => {
    const clock = fakeClock();
    const emulator = await startEmulator(t, { drainTimeMs: 4_000, clock: clock.now, random: seededRandom(7) });
    let open = await openHttpConnections(emulator, 24);
    t.after(() => closeAll(open));
    assert.equal((await requestAll(open)).length, 0, 'no drain yet');
    await admin(emulator, '/drain_listeners?graceful', 'POST');

    // The same seed replayed: each phase's requests draw the next block of numbers, whatever their order.
    const replay = seededRandom(7);
    const expectedCloses = (elapsedSeconds: number, requests: number): number =>
      Array.from({ length: requests }, () => replay()).filter((r) => elapsedSeconds > r % 4).length;
    const closedPerPhase: number[] = [];
    for (const [atMs, elapsedSeconds] of [[0, 0], [500, 1], [1_500, 2], [2_999, 3]] as const) {
      clock.set(T0 + atMs);
      const expected = expectedCloses(elapsedSeconds, open.length);
      const closing = await requestAll(open);
      assert.equal(closing.length, expected, `${atMs} ms into the drain`);
      closedPerPhase.push(closing.length);
      open = open.filter((connection) => !closing.includes(connection));
    }
    assert.equal(closedPerPhase[0], 0);
    assert.ok(closedPerPhase.slice(1).every((count) => count > 0), closedPerPhase.join());
    clock.set(T0 + 4_000);
    assert.equal((await requestAll(open)).length, open.length, 'past the deadline every response closes');
    assert.equal(emulator.openConnections.http, 0);
    const drainCloses = emulator.statValues().find((stat) => stat.name === 'http.ingress_http.downstream_cx_drain_close')?.value;
    assert.equal(drainCloses, 24);
  });

  test('immediate: every response after drain_listeners?graceful closes its connection, none before', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate', random: scripted() });
    const connections = await openHttpConnections(emulator, 5);
    t.after(() => closeAll(connections));
    assert.equal((await requestAll(connections)).length, 0);
    await admin(emulator, '/drain_listeners?graceful', 'POST');
    assert.equal((await requestAll(connections)).length, 5);
  });

  test('health-check failure closes a DEFAULT listener at once whatever the strategy; MODIFY_ONLY ignores it', async (t) => {
    const gradual = await startEmulator(t, { random: scripted() });
    const modifyOnly = await startEmulator(t, { drainStrategy: 'immediate', httpListener: { drainType: 'modify_only' } });
    const connections = [await openHttpConnection(gradual.ports.http), await openHttpConnection(modifyOnly.ports.http)];
    t.after(() => closeAll(connections));
    for (const emulator of [gradual, modifyOnly]) await admin(emulator, '/healthcheck/fail', 'POST');
    const [onDefault, onModifyOnly] = connections as [HeldConnection, HeldConnection];
    assert.equal((await requestOn(onDefault.socket)).headers['connection'], 'close', 'no drain running, no random drawn');
    assert.notEqual((await requestOn(onModifyOnly.socket)).headers['connection'], 'close');
    await admin(modifyOnly, '/drain_listeners?graceful', 'POST');
    assert.equal((await requestOn(onModifyOnly.socket)).headers['connection'], 'close', 'a drain covers MODIFY_ONLY listeners');
  });

  test('no proactive drain: an idle keep-alive connection stays open after the drain starts, until its next response', async (t) => {
    const emulator = await startEmulator(t, { drainStrategy: 'immediate' });
    const idle = await openHttpConnection(emulator.ports.http);
    t.after(() => idle.close());
    let closed = false;
    void idle.closed.then(() => (closed = true));
    await admin(emulator, '/drain_listeners?graceful', 'POST');
    await admin(emulator, '/healthcheck/fail', 'POST');
    await admin(emulator, '/ready');
    assert.deepEqual([closed, emulator.openConnections.http], [false, 1]);
    assert.equal((await requestOn(idle.socket)).headers['connection'], 'close');
    await idle.closed;
  });

  test('widening an inbound-only drain to all: each direction counts from the drain that covers it first', async (t) => {
    const clock = fakeClock();
    const options = { drainTimeMs: 4_000, clock: clock.now, random: () => 3 };
    const inbound = await startEmulator(t, { ...options, httpListener: { direction: 'inbound' } });
    const unspecified = await startEmulator(t, { ...options, httpListener: { direction: 'unspecified' } });
    const [toInbound, toUnspecified] = [await openHttpConnection(inbound.ports.http), await openHttpConnection(unspecified.ports.http)];
    t.after(() => closeAll([toInbound, toUnspecified]));
    for (const emulator of [inbound, unspecified]) await admin(emulator, '/drain_listeners?graceful&inboundonly', 'POST');
    clock.set(T0 + 3_000);
    for (const emulator of [inbound, unspecified]) await admin(emulator, '/drain_listeners?graceful', 'POST');
    assert.deepEqual([inbound.drainScope, unspecified.drainScope], ['all', 'all']);
    clock.set(T0 + 3_500);
    // 3.5 s into the inbound drain (4 whole seconds > 3), 0.5 s into the drain of all (1 > 3 is false).
    assert.equal((await requestOn(toInbound.socket)).headers['connection'], 'close');
    assert.notEqual((await requestOn(toUnspecified.socket)).headers['connection'], 'close');
  });
});

describe('Envoy emulator: server state and /server_info', () => {
  test('drain_listeners alone leaves the server LIVE; healthcheck/fail makes it DRAINING, healthcheck/ok LIVE again', async (t) => {
    const emulator = await startEmulator(t);
    const observe = async () => {
      const ready = await admin(emulator, '/ready');
      const info = JSON.parse((await admin(emulator, '/server_info')).body) as { state: string };
      const gauges = Object.fromEntries(emulator.statValues().filter((stat) => /^server\.(live|state)$/.test(stat.name)).map((stat) => [stat.name, stat.value]));
      return { ready: `${ready.status} ${ready.body.trim()}`, state: info.state, gauges };
    };
    const live = { ready: '200 LIVE', state: 'LIVE', gauges: { 'server.live': 1, 'server.state': 0 } };
    const draining = { ready: '503 DRAINING', state: 'DRAINING', gauges: { 'server.live': 0, 'server.state': 1 } };
    await admin(emulator, '/drain_listeners?graceful', 'POST');
    assert.deepEqual(await observe(), live);
    await admin(emulator, '/healthcheck/fail', 'POST');
    assert.deepEqual(await observe(), draining);
    await admin(emulator, '/healthcheck/ok', 'POST');
    assert.deepEqual(await observe(), live);
    assert.equal(emulator.drainScope, 'all', 'the drain itself cannot be undone');
  });

  test('uptimes are whole seconds of system time since the start; drain options, hot restart version and epoch', async (t) => {
    const clock = fakeClock(1_800_000_012_100);
    // 11.2 s after a start at …000.900: to_time_t(now) - to_time_t(start) is 12.
    const emulator = await startEmulator(t, { clock: clock.now, startedAt: 1_800_000_000_900 });
    type Info = { state: string; uptime_current_epoch: string; uptime_all_epochs: string; hot_restart_version: string; command_line_options: Record<string, unknown> };
    const info = JSON.parse((await admin(emulator, '/server_info')).body) as Info;
    assert.deepEqual([info.state, info.uptime_current_epoch, info.uptime_all_epochs, info.hot_restart_version], ['LIVE', '12s', '12s', '11.104']);
    const { drain_strategy, drain_time, restart_epoch, concurrency } = info.command_line_options;
    assert.deepEqual({ drain_strategy, drain_time, restart_epoch, concurrency }, { drain_strategy: 'Gradual', drain_time: '600s', restart_epoch: 0, concurrency: 2 });

    const other = await startEmulator(t, { drainStrategy: 'immediate', drainTimeMs: 45_000, commandLine: { disableHotRestart: true, serviceCluster: 'eg' } });
    const otherInfo = JSON.parse((await admin(other, '/server_info')).body) as Info;
    assert.deepEqual(
      [otherInfo.command_line_options['drain_strategy'], otherInfo.command_line_options['drain_time'], otherInfo.command_line_options['service_cluster'], otherInfo.hot_restart_version],
      ['Immediate', '45s', 'eg', 'disabled'],
    );
  });

  test('a new instance counts its uptime from its own start', async (t) => {
    const old = await startEmulator(t, { startedAt: Date.now() - 3_600_000 });
    const fresh = await startEmulator(t);
    const uptime = async (emulator: EnvoyEmulator) => (JSON.parse((await admin(emulator, '/server_info')).body) as { uptime_current_epoch: string }).uptime_current_epoch;
    assert.match(await uptime(old), /^360[01]s$/);
    assert.match(await uptime(fresh), /^[01]s$/);
  });
});

describe('Envoy emulator: /quitquitquit', () => {
  test('answers OK, then cuts every connection without draining and settles `exited`', async (t) => {
    const emulator = await startEmulator(t);
    const held = [await openHttpConnection(emulator.ports.http), await openTcpConnection(emulator.ports.tcp)];
    t.after(() => closeAll(held));
    const quit = await admin(emulator, '/quitquitquit', 'POST');
    assert.deepEqual([quit.status, quit.body], [200, 'OK\n']);
    assert.equal(await emulator.exited, 'quitquitquit');
    assert.equal(emulator.exitedWith, 'quitquitquit');
    await Promise.all(held.map((connection) => connection.closed));
    await assert.rejects(admin(emulator, '/ready'), /ECONNREFUSED/);
  });

  test('a GET changes nothing', async (t) => {
    const emulator = await startEmulator(t);
    assert.equal((await admin(emulator, '/quitquitquit')).status, 400);
    assert.equal(emulator.exitedWith, undefined);
  });
});

describe('Envoy emulator CLI: Envoy container args', () => {
  test("takes Envoy's own flags in each spelling and ignores the others", () => {
    // Envoy Gateway's args (one argument per flag and value), then the two-argument and `=` forms.
    const gateway = parseCliArgs([
      '--service-cluster default-eg',
      '--service-node $(ENVOY_POD_NAME)',
      '--config-yaml admin:\n  address: {}',
      '--log-level warn',
      '--cpuset-threads',
      '--drain-strategy immediate',
      '--drain-time-s 60',
    ]);
    assert.deepEqual(gateway, {
      options: {
        drainStrategy: 'immediate',
        drainTimeMs: 60_000,
        commandLine: { serviceCluster: 'default-eg', serviceNode: '$(ENVOY_POD_NAME)', configYaml: 'admin:\n  address: {}', logLevel: 'warn' },
      },
    });
    const plain = parseCliArgs(['-c', '/etc/envoy/envoy.yaml', '--drain-strategy', 'gradual', '--drain-time-s', '30', '-l', 'info', '--base-id', '1', '--disable-hot-restart', '--unknown', 'x', '--allow-unknown-static-fields']);
    assert.deepEqual(plain.options, {
      drainStrategy: 'gradual',
      drainTimeMs: 30_000,
      commandLine: { configPath: '/etc/envoy/envoy.yaml', logLevel: 'info', baseId: 1, disableHotRestart: true },
    });
    assert.deepEqual(parseCliArgs(['--drain-strategy=immediate', '--drain-time-s=5', '--config-path=/x.yaml']).options, {
      drainStrategy: 'immediate',
      drainTimeMs: 5_000,
      commandLine: { configPath: '/x.yaml' },
    });
  });

  test('emulator flags: listener drain types and directions, ports, seed, start instant; bad values fail', () => {
    const parsed = parseCliArgs(['--http-drain-type', 'modify_only', '--tcp-drain-type=MODIFY_ONLY', '--http-direction=inbound', '--admin-port', '9901', '--drain-time=250', '--random-seed=3', '--started-at=5']);
    assert.deepEqual(parsed, {
      options: {
        adminPort: 9901,
        drainTimeMs: 250,
        startedAt: 5,
        httpListener: { drainType: 'modify_only', direction: 'inbound' },
        tcpListener: { drainType: 'modify_only' },
      },
      randomSeed: 3,
    });
    for (const [argv, error] of [
      [['--drain-strategy', 'fast'], /drain-strategy/],
      [['--drain-time-s', '1.5'], /drain-time-s/],
      [['--drain-time-s'], /needs a value/],
      [['--http-drain-type=sometimes'], /http-drain-type/],
      [['--fault=broken'], /fault/],
    ] as const) {
      assert.throws(() => parseCliArgs(argv), error, argv.join(' '));
    }
  });
});

describe('Envoy emulator CLI: the Envoy container restarted', () => {
  interface Spawned {
    readonly child: ChildProcess;
    readonly line: { pid: number; admin: number; http: number; tcp: number; startedAt: number };
    readonly exited: Promise<[number | null, NodeJS.Signals | null]>;
  }

  async function spawnCli(t: TestContext, args: readonly string[]): Promise<Spawned> {
    const child = spawn(process.execPath, ['--import', 'tsx', CLI, ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    t.after(() => {
      if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
    });
    const exited = once(child, 'exit') as Promise<[number | null, NodeJS.Signals | null]>;
    const lines = createInterface({ input: child.stdout as NodeJS.ReadableStream });
    const first = await Promise.race([
      once(lines, 'line').then(([line]) => line as string),
      exited.then(([code]) => Promise.reject(new Error(`emulator CLI exited with ${code} before listening`))),
      new Promise<never>((_, reject) => setTimeout(() => reject(new Error('emulator CLI printed nothing in 15 s')), 15_000).unref()),
    ]);
    return { child, line: JSON.parse(first) as Spawned['line'], exited };
  }

  test('pod-spec args pass straight through; quitquitquit exits 0; a new process rebinds the same ports at once', async (t) => {
    const [adminPort, httpPort, tcpPort] = await freePorts(3);
    const envoyArgs = ['-c', '/etc/envoy/envoy.yaml', '--drain-strategy immediate', '--drain-time-s', '3', '--log-level=info', '--service-cluster', 'ingress', '--base-id', '1'];
    const portArgs = [`--admin-port=${adminPort}`, `--http-port=${httpPort}`, `--tcp-port=${tcpPort}`];
    const url = (path: string) => `http://127.0.0.1:${adminPort}${path}`;
    type Info = { state: string; uptime_current_epoch: string; command_line_options: { drain_strategy: string; drain_time: string; config_path: string } };

    const first = await spawnCli(t, [...envoyArgs, ...portArgs]);
    assert.deepEqual([first.line.admin, first.line.http, first.line.tcp], [adminPort, httpPort, tcpPort]);
    const info = JSON.parse((await httpRequest(url('/server_info'))).body) as Info;
    assert.deepEqual(info.command_line_options, { ...info.command_line_options, drain_strategy: 'Immediate', drain_time: '3s', config_path: '/etc/envoy/envoy.yaml' });
    // Connections the emulator will close itself: their TIME_WAIT must not stop the next process binding.
    const held = [await openHttpConnection(httpPort ?? 0), await openTcpConnection(tcpPort ?? 0)];
    t.after(() => closeAll(held));
    assert.equal((await httpRequest(url('/quitquitquit'), { method: 'POST' })).body, 'OK\n');
    await Promise.all(held.map((connection) => connection.closed));
    assert.deepEqual(await first.exited, [0, null]);

    const second = await spawnCli(t, [...envoyArgs, ...portArgs]);
    assert.deepEqual([second.line.admin, second.line.http, second.line.tcp], [adminPort, httpPort, tcpPort]);
    assert.ok(second.line.startedAt >= first.line.startedAt, 'the second process starts after the first');
    const restarted = JSON.parse((await httpRequest(url('/server_info'))).body) as Info;
    assert.equal(restarted.state, 'LIVE');
    assert.match(restarted.uptime_current_epoch, /^[0-2]s$/);
    const again = await openHttpConnection(httpPort ?? 0);
    await again.close();
    second.child.kill('SIGTERM');
    assert.deepEqual(await second.exited, [0, null]);
  });
});
