/**
 * Issue 28, item 2: Envoy hot-restarts during a drain. The emulator's hot restart (src/emulator/hot-restart.ts)
 * forks a child with the next restart epoch, which takes the listen sockets and the admin address while the parent
 * keeps its connections, and its admin connections (the sidecar's witness among them), until the child terminates
 * it; the child's stats merge the parent's. Through the built sidecar (`npm run build` first) on real sockets, with
 * the control: a drain that cannot see the restart epoch (a stats_matcher trimming `server.*`), which never tells
 * the new epoch to drain.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { systemClock } from '../../src/clock.js';
import { EnvoyEmulator, type HotRestartedChild } from '../../src/emulator/envoy-emulator.js';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { Drain } from '../../src/sidecar/drain.js';
import type { DrainLoopSettings } from '../../src/sidecar/drain-settings.js';
import { closeAll, httpRequest, openTcpConnections } from '../support/connections.js';
import { changedTarget } from '../support/drain-target.js';
import { hotRestarted } from '../support/hot-restart.js';
import { MemoryLog } from '../support/memory-log.js';
import { spawnSidecar } from '../support/sidecar-process.js';

const INTERVAL_MS = 50;
/** How long after the hot restart the child terminates the parent (Envoy's --parent-shutdown-time-s). */
const PARENT_SHUTDOWN_MS = 2_500;
const EMULATOR = { statsFlushIntervalMs: 100, parentShutdownTimeMs: PARENT_SHUTDOWN_MS } as const;

async function parentEnvoy(t: TestContext): Promise<EnvoyEmulator> {
  const envoy = await EnvoyEmulator.start(EMULATOR);
  t.after(() => envoy.close());
  return envoy;
}

/** What the child's admin API received: it has its own record (GET /emulator/requests). */
async function childMutations(child: HotRestartedChild): Promise<string[]> {
  const answer = await httpRequest(`http://127.0.0.1:${child.ports.admin}/emulator/requests`);
  return (JSON.parse(answer.body) as Array<{ method: string; path: string }>).filter((r) => r.method === 'POST').map((r) => r.path);
}

async function childState(child: HotRestartedChild): Promise<string> {
  return (JSON.parse((await httpRequest(`http://127.0.0.1:${child.ports.admin}/server_info`)).body) as { state: string }).state;
}

describe('issue 28, item 2: a hot restart during a drain', () => {
  test('the drain follows the new epoch (its health checks fail, its listeners drain) and says "drained" only once the parent has exited with its connections', async (t) => {
    const parent = await parentEnvoy(t);
    const held = await openTcpConnections(parent.ports.tcp, 2);
    t.after(() => closeAll(held));
    const manager = await spawnSidecar([`--admin-port=${parent.ports.admin}`, `--check-interval=${INTERVAL_MS}ms`, '--check-delay=0', '--admin-timeout=1s', '--drain-timeout=15s']);
    t.after(() => manager.kill());
    await manager.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 6)); // the witness is open from the second read
    let answered = false;
    const answer = httpRequest(manager.url('/shutdown'), { timeoutMs: 20_000 }).finally(() => (answered = true));
    await manager.waitForLog((line) => line['event'] === 'poll' && line['open_connections'] === 2 && line['check_delay_pending'] === undefined);

    const restartedAt = performance.now();
    const child = await hotRestarted(t, parent);
    const followed = await manager.waitForLog((line) => line['event'] === 'envoy_hot_restarted', 5_000);
    assert.deepEqual([followed['from_epoch'], followed['to_epoch']], [0, 1]);
    // The new epoch was told to drain, like the parent before it.
    for (let attempt = 0; attempt < 40 && (await childMutations(child)).length < 2; attempt += 1) await new Promise((resolve) => setTimeout(resolve, 50));
    assert.deepEqual(await childMutations(child), ['/healthcheck/fail', '/drain_listeners'], 'the child got both drain steps');
    assert.equal(await childState(child), 'DRAINING');
    // The parent still holds both connections: nothing says "drained" before it exits.
    const drain = JSON.parse((await httpRequest(manager.url('/drain'))).body) as { state: string; hotRestarts: unknown[]; parentConnections: number | null };
    assert.equal(drain.state, 'draining');
    assert.deepEqual(drain.hotRestarts, [{ fromEpoch: 0, toEpoch: 1 }]);
    assert.equal(answered, false, '/shutdown answered while the parent held its connections');

    const { status, body } = await answer;
    const releasedAfterMs = performance.now() - restartedAt;
    assert.equal(status, 200, body);
    assert.match(body, /^drained: 0 open connections/);
    assert.match(body, /Envoy hot-restarted during the drain \(restart epoch 0 to 1\)/);
    assert.ok(releasedAfterMs >= PARENT_SHUTDOWN_MS - 200, `released ${Math.round(releasedAfterMs)} ms after the restart, before the parent's exit`);
    assert.equal(parent.exitedWith, 'close', 'the child terminated the parent');
    const finished = await manager.waitForLog((line) => line['event'] === 'drain_finished');
    assert.equal(finished['reason'], 'connections-closed');
    assert.equal(manager.logs.filter((line) => line['event'] === 'envoy_replaced').length, 0);
  });

  // Before issue 28's model search this was a control: without the epoch the new one was never told to drain and
  // stayed LIVE. A counter reset without an epoch now re-sends the steps (drain.ts resendStepsAfterBlindReset).
  test('a drain that cannot read the restart epoch (server.* trimmed) takes the hot restart for a counter reset and still tells the new epoch to drain', async (t) => {
    // A stats_matcher trimming server.* (the child starts with the same bootstrap): no epoch, no uptime, in any read.
    const parent = await EnvoyEmulator.start({ ...EMULATOR, statsExclusion: ['^server\\.'] });
    t.after(() => parent.close());
    const held = await openTcpConnections(parent.ports.tcp, 2);
    t.after(() => closeAll(held));
    const trimmed = new WitnessedAdminClient({ address: '127.0.0.1', port: parent.ports.admin, timeoutMs: 1_000 });
    t.after(() => trimmed.close());
    const settings: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': INTERVAL_MS, 'min-open-connections': 0, 'drain-timeout': 2_000, 'admin-refusals': 2 };
    const drain = new Drain(trimmed, settings, new MemoryLog(), systemClock);
    const outcome = drain.start();
    await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 6));
    const child = await hotRestarted(t, parent);
    const result = await outcome;
    assert.deepEqual(await childMutations(child), ['/healthcheck/fail', '/drain_listeners'], 'the new epoch was told to fail its health checks and to drain');
    assert.equal(await childState(child), 'DRAINING');
    assert.equal(result.reason, 'deadline', `no uptime shows the child's merge of the parent's 2 connections: held to the deadline: ${JSON.stringify(result)}`);
  });

  // Envoy merges a parent's stats into the child only when the child's workers start (updateServerStats): until then
  // the parent's connections are in no count, and server.parent_connections is 0. The child's uptime, set by that
  // same update, tells the drain when the counts can be trusted.
  for (const pretendMerged of [false, true]) {
    test(
      pretendMerged
        ? "control: a drain that takes the child's first counts as merged (an uptime reported before the merge) says drained while the parent holds its connections"
        : "before the child's first merge (its workers not started), its counts lack the parent's connections: no count ends the drain until the child reports an uptime",
      async (t) => {
        const parent = await EnvoyEmulator.start({ statsFlushIntervalMs: 1_500, parentShutdownTimeMs: 60_000 });
        t.after(() => parent.close());
        const held = await openTcpConnections(parent.ports.tcp, 2);
        t.after(() => closeAll(held));
        const client = new WitnessedAdminClient({ address: '127.0.0.1', port: parent.ports.admin, timeoutMs: 1_000 });
        t.after(() => client.close());
        const target = pretendMerged
          ? changedTarget(client, { read: (read) => ({ ...read, hotRestart: { epoch: read.hotRestart?.epoch ?? null, parentConnections: read.hotRestart?.parentConnections ?? null, uptime: 1 } }) })
          : changedTarget(client, {});
        const settings: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': INTERVAL_MS, 'min-open-connections': 0, 'drain-timeout': 4_000, 'admin-refusals': 2 };
        const drain = new Drain(target, settings, new MemoryLog(), systemClock);
        const outcome = drain.start();
        await new Promise((resolve) => setTimeout(resolve, INTERVAL_MS * 6));
        await hotRestarted(t, parent);
        const result = await outcome;
        assert.equal(parent.openConnections.tcp, 2, 'the parent still holds both connections');
        if (pretendMerged) {
          assert.deepEqual([result.reason, result.openConnections], ['connections-closed', 0], `drained on the child's own count: ${JSON.stringify(result)}`);
        } else {
          // Once merged, the parent's 2 connections are in the child's count and in parent_connections: to the deadline.
          assert.deepEqual([result.reason, result.openConnections], ['deadline', 2], JSON.stringify(result));
        }
      },
    );
  }
});
