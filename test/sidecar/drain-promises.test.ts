/**
 * One regression test per way the drain's promises were found broken (issue 18), each through the real
 * interface: the built sidecar as the image runs it (`node dist/entry.cjs mode=sidecar`), against the fault admin
 * server on a real loopback socket, which logs every call it received and which Envoy process received it.
 * Items tested elsewhere: strangers on the serve port and aggregate logs (server-abuse.test.ts), each admin fault
 * of the client (test/envoy/admin-call.test.ts), an unusable --state-dir (state-dir.test.ts), a clock step
 * (drain.test.ts on virtual time, and the model search, drain-model.test.ts). `npm run build` first.
 */
import assert from 'node:assert/strict';
import { mkdtemp, readFile, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, test, type TestContext } from 'node:test';
import { httpRequest } from '../support/connections.js';
import { FaultAdmin, type FaultAdminOptions } from '../support/fault-admin.js';
import { freePort } from '../support/ports.js';
import { sampleOf } from '../support/prometheus.js';
import { spawnSidecar, type SidecarProcess } from '../support/sidecar-process.js';

const INTERVAL_MS = 50;

async function admin(t: TestContext, options: FaultAdminOptions = {}): Promise<FaultAdmin> {
  const server = await FaultAdmin.start({ listeners: { ingress: 0 }, ...options });
  t.after(() => server.close());
  return server;
}

async function sidecar(t: TestContext, adminPort: number, flags: readonly string[] = []): Promise<SidecarProcess> {
  const process = await spawnSidecar([`--admin-port=${adminPort}`, `--check-interval=${INTERVAL_MS}ms`, '--check-delay=0', '--admin-timeout=300ms', ...flags]);
  t.after(() => process.kill());
  return process;
}

const answered = (process: SidecarProcess): Promise<unknown> => process.waitForLog((line) => line['event'] === 'envoy_admin_reachable');

function shutdown(process: SidecarProcess, timeoutMs = 20_000): Promise<{ status: number; body: string; ms: number }> {
  const started = performance.now();
  return httpRequest(process.url('/shutdown'), { timeoutMs }).then(({ status, body }) => ({ status, body, ms: performance.now() - started }));
}

async function drainState(process: SidecarProcess): Promise<Record<string, unknown>> {
  return JSON.parse((await httpRequest(process.url('/drain'))).body) as Record<string, unknown>;
}

async function metrics(process: SidecarProcess): Promise<string> {
  return (await httpRequest(process.url('/metrics'))).body;
}

describe('issue 18: the drain drains the Envoy process that is running', () => {
  test('1. Envoy replaced mid-drain: the drain ends as envoy-replaced at once, and the next /shutdown drains the new process', async (t) => {
    const envoy = await admin(t, { listeners: { ingress: 5 } });
    const manager = await sidecar(t, envoy.port, ['--drain-timeout=20s']);
    await answered(manager);
    const held = shutdown(manager);
    await manager.waitForLog((line) => line['event'] === 'drain_step' && line['step'] === 'drain listeners');
    await manager.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 5 && line['check_delay_pending'] === undefined);
    envoy.replaceProcess(); // process 2, with no connections: its 0 must not end the drain of process 1
    const first = await held;
    assert.equal(first.status, 200);
    assert.match(first.body, /another Envoy process answers on the admin port/);
    assert.ok(first.ms < 5_000, `answered at once, not at the deadline (${Math.round(first.ms)} ms)`);
    const finished = await manager.waitForLog((line) => line['event'] === 'drain_finished');
    assert.deepEqual([finished['reason'], finished['open_connections']], ['envoy-replaced', 5]);

    const second = await shutdown(manager);
    assert.equal(second.status, 200);
    assert.match(second.body, /drained: 0 open connections/);
    const failedOn = envoy.calls.filter((call) => call.path === '/healthcheck/fail' && call.effect === 'applied').map((call) => call.processId);
    assert.deepEqual(failedOn, [1, 2], `each process was told to drain: ${JSON.stringify(envoy.calls.map((c) => [c.path, c.processId, c.effect, c.behaviour.kind]))}`);
    assert.equal((await drainState(manager))['rearms'], 1);
  });

  test('2. after a drain, an Envoy that cannot say which process it is, is drained again; watch failures are logged at a bounded rate', async (t) => {
    const envoy = await admin(t);
    const stateDir = await mkdtemp(join(tmpdir(), 'esm-promises-'));
    t.after(() => rm(stateDir, { recursive: true, force: true }));
    const manager = await sidecar(t, envoy.port, ['--drain-timeout=20s', `--state-dir=${stateDir}`]);
    await answered(manager);
    assert.equal((await shutdown(manager)).status, 200);
    envoy.replaceProcess();
    envoy.stepWallClock(-3_600_000); // and a clock step back: the new process reports a negative uptime
    // Every read of the new process is slower than the admin timeout, until the /shutdown has decided.
    let slow = true;
    envoy.chooseWith((call) => (slow && call.path === '/stats' ? 'delay:400' : undefined));
    await manager.waitForLog((line) => line['event'] === 'envoy_admin_watch_failed');
    const pending = shutdown(manager);
    const rearmed = await manager.waitForLog((line) => line['event'] === 'drain_rearmed');
    slow = false;
    const again = await pending;
    assert.equal(again.status, 200);
    assert.match(String(rearmed['msg']), /did not say which process runs \(timeout\): it may be a new one/);
    assert.ok(envoy.calls.some((call) => call.path === '/healthcheck/fail' && call.processId === 2 && call.effect === 'applied'), 'the new process was drained');
    assert.equal(manager.logs.filter((line) => line['event'] === 'envoy_admin_watch_failed').length, 1, 'one line, not one per failure');
    // Its /server_info, with an uptime below zero, still named the process in the journal.
    assert.ok(envoy.calls.some((call) => call.path === '/server_info' && call.processId === 2), 'the new Envoy process was asked who it is');
    const journal = JSON.parse(await readFile(join(stateDir, 'drain.json'), 'utf8')) as Record<string, unknown>;
    assert.equal(typeof journal['envoyStartedAtMs'], 'number');
    assert.equal(journal['healthChecks'], 'accepted');
  });
});

describe('issue 18: never "drained" with connections it could not count', () => {
  test('3. a typo in --listeners: never counted as 0; logged with the names Envoy has, shown in /drain, and the answer says why', async (t) => {
    const envoy = await admin(t, { listeners: { ingress: 5 } });
    const manager = await sidecar(t, envoy.port, ['--listeners=ingres', '--drain-timeout=1500ms']);
    await answered(manager);
    const held = shutdown(manager);
    const missing = await manager.waitForLog((line) => line['event'] === 'listeners_missing');
    assert.equal(missing['level'], 'error');
    assert.deepEqual([missing['missing_listeners'], missing['available_listeners']], [['ingres'], ['ingress']]);
    const state = await drainState(manager);
    assert.deepEqual([state['state'], state['missingListeners'], state['availableListeners']], ['draining', ['ingres'], ['ingress']]);
    const answer = await held;
    assert.equal(answer.status, 503);
    assert.match(answer.body, /the listeners ingres named by --listeners do not exist \(Envoy has: ingress\)/);
    assert.equal(manager.logs.filter((line) => line['event'] === 'listeners_missing').length, 1);
  });
});

describe('issue 18: a drain ends by its deadline, whatever the admin API does', () => {
  test('5. an admin port that answers 101 Switching Protocols and holds the socket: /shutdown and SIGTERM are answered by the deadline', async (t) => {
    const envoy = await admin(t, { listeners: { ingress: 1 } });
    const manager = await sidecar(t, envoy.port, ['--drain-timeout=1s', '--admin-timeout=30s']);
    await answered(manager);
    envoy.chooseWith(() => 'upgrade'); // every call from now on: 101, then nothing, forever
    const held = shutdown(manager);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const sigtermAt = performance.now();
    manager.child.kill('SIGTERM');
    const answer = await held;
    assert.equal(answer.status, 503);
    assert.ok(answer.ms >= 990 && answer.ms < 2_500, `answered at the deadline: ${Math.round(answer.ms)} ms`);
    const exit = await manager.exited;
    assert.deepEqual([exit.code, exit.signal], [0, null]);
    assert.ok(performance.now() - sigtermAt < 3_000, 'SIGTERM held until the deadline, not longer');
    assert.ok(envoy.calls.some((call) => call.behaviour.kind === 'upgrade'), 'the admin server did answer with upgrades');
  });
});

describe('issue 18: the sidecar reports what happened', () => {
  test('8. an admin API that answers just over --admin-timeout is reported as slow (it got the calls), and the metrics say so', async (t) => {
    const envoy = await admin(t, { listeners: { ingress: 1 } });
    envoy.chooseWith(() => 'delay:450');
    const manager = await sidecar(t, envoy.port, ['--check-delay=200ms', '--drain-timeout=1500ms']);
    await manager.waitForLog((line) => line['event'] === 'envoy_admin_waiting');
    const answer = await shutdown(manager);
    assert.equal(answer.status, 503);
    assert.match(answer.body, /took connections but never answered in time/);
    assert.doesNotMatch(answer.body, /never reachable/);
    assert.ok(envoy.calls.some((call) => call.path === '/healthcheck/fail' && call.effect === 'applied'), 'Envoy did act on the late POST');
    const text = await metrics(manager);
    assert.equal(sampleOf(text, 'shutdown_manager_envoy_admin_up'), 0);
    assert.ok((sampleOf(text, 'shutdown_manager_envoy_admin_failures_total{kind="timeout"}') ?? 0) > 0, 'the timeouts are counted');
    assert.equal(sampleOf(text, 'shutdown_manager_envoy_admin_failures_total{kind="refused"}'), 0);
  });

  test('8. a wrong admin port exports its reachability: up 0, refusals counted, answered 0', async (t) => {
    const manager = await sidecar(t, await freePort());
    await manager.waitForLog((line) => line['event'] === 'envoy_admin_waiting');
    const text = await metrics(manager);
    assert.equal(sampleOf(text, 'shutdown_manager_envoy_admin_up'), 0);
    assert.equal(sampleOf(text, 'shutdown_manager_envoy_admin_answered'), 0);
    assert.ok((sampleOf(text, 'shutdown_manager_envoy_admin_failures_total{kind="refused"}') ?? 0) > 0, 'the refusals are counted');
  });

  test('9. an admin port that never answered: /ready fails until it does, then stays ready; the journal never says accepted', async (t) => {
    const port = await freePort();
    const stateDir = await mkdtemp(join(tmpdir(), 'esm-promises-'));
    t.after(() => rm(stateDir, { recursive: true, force: true }));
    const manager = await sidecar(t, port, ['--check-delay=300ms', '--drain-timeout=20s', `--state-dir=${stateDir}`]);
    const notReady = await httpRequest(manager.url('/ready'));
    assert.equal(notReady.status, 503);
    assert.match(notReady.body, new RegExp(`127\\.0\\.0\\.1:${port}`));
    const answer = await shutdown(manager);
    assert.equal(answer.status, 503);
    assert.ok(answer.ms < 5_000, `held as long as a sleep preStop (check-delay), not the deadline: ${Math.round(answer.ms)} ms`);
    // Refused reads end each round: nothing was sent, so the journal claims nothing.
    assert.equal(await readFile(join(stateDir, 'drain.json'), 'utf8').catch(() => 'none'), 'none');

    // Envoy comes up late: ready from then on, even while its admin API is busy.
    const envoy = await FaultAdmin.start({ port, listeners: { ingress: 0 } });
    t.after(() => envoy.close());
    await answered(manager);
    envoy.chooseWith(() => 'silent');
    assert.equal((await httpRequest(manager.url('/ready'))).status, 200);
    await new Promise((resolve) => setTimeout(resolve, 400));
    assert.equal((await httpRequest(manager.url('/ready'))).status, 200, 'latched: a busy admin never takes the pod out of service');
  });

  test('9. an admin that takes the calls and never answers: the journal names them intended, never accepted', async (t) => {
    const envoy = await admin(t, { listeners: { ingress: 1 } });
    const stateDir = await mkdtemp(join(tmpdir(), 'esm-promises-'));
    t.after(() => rm(stateDir, { recursive: true, force: true }));
    const manager = await sidecar(t, envoy.port, ['--drain-timeout=1200ms', '--admin-timeout=200ms', `--state-dir=${stateDir}`]);
    await answered(manager);
    envoy.chooseWith((call) => (call.method === 'POST' ? 'silent' : undefined));
    const answer = await shutdown(manager);
    assert.equal(answer.status, 503);
    assert.match(answer.body, /Envoy never confirmed POST \/healthcheck\/fail \(the call timed out: it may have taken it/);
    const journal = JSON.parse(await readFile(join(stateDir, 'drain.json'), 'utf8')) as Record<string, unknown>;
    assert.deepEqual([journal['healthChecks'], journal['listenersDrain']], ['intended', 'intended'], 'calls sent, never taken: not "failed"');
    assert.ok(envoy.calls.some((call) => call.path === '/healthcheck/fail' && call.effect === 'withheld'), 'the withheld health-check failure is recorded');
  });

  test('12. a /wait after the drain ended answers at once with its outcome; counters do not go down when the drain is re-armed', async (t) => {
    const envoy = await admin(t);
    const manager = await sidecar(t, envoy.port, ['--wait-window=10s']);
    await answered(manager);
    assert.equal((await shutdown(manager)).status, 200);
    await new Promise((resolve) => setTimeout(resolve, 200));
    const started = performance.now();
    const waited = await httpRequest(manager.url('/wait'), { timeoutMs: 15_000 });
    assert.equal(waited.status, 200);
    assert.match(waited.body, /drained/);
    assert.ok(performance.now() - started < 2_000, 'not after the 10 s window');
    const pollsBefore = sampleOf(await metrics(manager), 'shutdown_manager_drain_polls_total') ?? 0;
    assert.ok(pollsBefore > 0, 'the drain polled before it ended');
    envoy.replaceProcess();
    await manager.waitForLog((line) => line['event'] === 'drain_rearmed');
    const after = await metrics(manager);
    assert.equal(sampleOf(after, 'shutdown_manager_drain_rearms_total'), 1);
    assert.ok((sampleOf(after, 'shutdown_manager_drain_polls_total') ?? 0) >= pollsBefore, 'a counter never goes down');
  });
});
