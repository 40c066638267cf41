/**
 * The process a drain drains, as a state machine of its own (src/sidecar/drain-process.ts): unpinned, pinned to an
 * epoch, awaiting a hot restart child's merge. Read by read, with this sidecar's connections those of
 * test/support/scripted-envoy.ts and its answers built here; the drain's own tests (drain*.test.ts,
 * hot-restart.test.ts, the drain model) hold the same rules through the drain.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AdminRefusedError } from '../../src/envoy/admin-errors.js';
import type { ReadEvidence } from '../../src/envoy/process/identity.js';
import type { HotRestartState } from '../../src/envoy/stats.js';
import { DrainedProcess } from '../../src/sidecar/drain-process.js';
import { MemoryLog } from '../support/memory-log.js';
import { countOf, ScriptedEnvoy, type CountRead } from '../support/scripted-envoy.js';

function count(mark: number | null, hotRestart?: HotRestartState, evidence?: ReadEvidence): CountRead {
  return countOf({ adminConnectionsTotal: mark, ...(hotRestart === undefined ? {} : { hotRestart }), ...(evidence === undefined ? {} : { evidence }) });
}

/** One read: the expectation taken before it is sent, the connection it opens, then its answer observed. */
function read(process: DrainedProcess, envoy: ScriptedEnvoy, answer: CountRead) {
  const expected = process.expect();
  envoy.connect();
  return process.observe(answer, expected);
}

function setUp(): { envoy: ScriptedEnvoy; log: MemoryLog; process: DrainedProcess } {
  const envoy = new ScriptedEnvoy();
  const log = new MemoryLog();
  return { envoy, log, process: new DrainedProcess(envoy, log) };
}

describe('DrainedProcess', () => {
  test('the first read pins its process and epoch; reads that grow as ours do are the same process', () => {
    const { envoy, process } = setUp();
    assert.deepEqual(process.pin, { kind: 'unpinned' }, 'nothing pinned before a read');
    assert.deepEqual(read(process, envoy, count(10, { epoch: 0, parentConnections: 0, uptime: 5 })), { process: 'pinned', resendSteps: false }, 'the first read pins');
    assert.deepEqual(process.pin, { kind: 'pinned', epoch: 0 }, 'pinned to epoch 0');
    assert.equal(read(process, envoy, count(11, { epoch: 0, parentConnections: 0, uptime: 5 })).process, 'same', 'grew by our one connection');
    assert.equal(process.pinnedMark, 11, 'the pinned mark follows the process');
  });

  test('steps taken before the first read are sent again: they went to a process nobody identified', () => {
    const { envoy, log, process } = setUp();
    process.stepTaken('fail-health-checks');
    assert.equal(read(process, envoy, count(10)).resendSteps, true, 'both steps go out again');
    assert.deepEqual(log.events('drain_steps_resent')[0]?.['steps'], ['fail health checks'], 'the log names the step');
  });

  test('a hot restart child is followed: awaiting its merge until it reports an uptime, its parent holding no connection', () => {
    const { envoy, log, process } = setUp();
    read(process, envoy, count(10, { epoch: 0, parentConnections: 0, uptime: 5 }));
    const child = count(2, { epoch: 1, parentConnections: 3, uptime: 0 });
    assert.deepEqual(read(process, envoy, child), { process: 'hot-restarted', resendSteps: true }, "the child's steps are sent");
    assert.deepEqual(process.pin, { kind: 'awaiting-merge', epoch: 1 }, 'following epoch 1 until it merged');
    assert.deepEqual(process.hotRestartsSeen, [{ fromEpoch: 0, toEpoch: 1 }], 'the hot restart is reported');
    assert.equal(process.countIsWhole(child), false, 'no uptime yet: the parent is in no count');
    const merged = count(4, { epoch: 1, parentConnections: 3, uptime: 7 });
    assert.equal(read(process, envoy, merged).process, 'same', "the child's next read is its own");
    assert.equal(process.countIsWhole(merged), false, 'merged, but the parent still holds connections');
    assert.deepEqual(process.pin, { kind: 'pinned', epoch: 1 }, 'the merge is seen');
    assert.equal(log.events('hot_restart_parent_holds').length, 1, 'the parent holding connections is said once');
    assert.equal(process.countIsWhole(count(5, { epoch: 1, parentConnections: 0, uptime: 8 })), true, 'the parent let go: a whole count');
  });

  test('a counter reset with no epoch to tell may be a hot restart: steps again, and no count is whole until an uptime shows', () => {
    const { envoy, log, process } = setUp();
    const evidence = (witness: number): ReadEvidence => ({ witness, closedThrough: 0, created: 1, createdAtSend: 1 });
    read(process, envoy, count(10, undefined, evidence(1)));
    read(process, envoy, count(11, undefined, evidence(1)));
    const reset = read(process, envoy, count(0, undefined, evidence(1)));
    assert.deepEqual(reset, { process: 'reset', resendSteps: true }, 'the same witness across a counter that went down: a reset, drained again');
    assert.deepEqual(process.pin, { kind: 'awaiting-merge', epoch: null }, 'awaiting a merge it cannot rule out');
    assert.equal(process.countIsWhole(count(1)), false, 'no uptime reported: never whole');
    assert.equal(log.events('envoy_counters_reset').length, 1, 'the reset is logged');
  });

  test('another process is reported with the steps that may have reached it', () => {
    const { envoy, log, process } = setUp();
    read(process, envoy, count(10, { epoch: 0, parentConnections: 0 }));
    process.stepTaken('drain-listeners');
    assert.equal(read(process, envoy, count(3, { epoch: 0, parentConnections: 0 })).process, 'replaced', 'a counter that went down, with no witness kept');
    assert.deepEqual(log.events('envoy_replaced')[0]?.['steps_maybe_to_new_process'], ['drain listeners'], 'the step sent since the last read is named');
  });

  test('refusals prove an exit only with the witness let go, or after refusals long enough without it', () => {
    const { envoy, log, process } = setUp();
    read(process, envoy, count(10, undefined, { witness: 1, closedThrough: 0, created: 1, createdAtSend: 1 }));
    const refused = (evidence: Partial<ReadEvidence> & { lastClosed?: boolean }): AdminRefusedError => {
      const error = new AdminRefusedError('GET /stats', 'connection refused');
      error.evidence = { witness: null, closedThrough: 0, created: 1, lastClosed: false, closed: [], ...evidence };
      return error;
    };
    assert.equal(process.exitProven(refused({ witness: 1 }), 60_000), false, 'the witness is open: Envoy lives, however long it refuses');
    assert.equal(log.events('envoy_admin_address_lost').length, 1, 'and says so');
    assert.equal(process.exitProven(refused({ closedThrough: 1 }), 0), true, 'the witness that spoke for the pinned read was closed by the other end');
    assert.equal(process.exitProven(refused({}), 9_999), false, 'no evidence yet: not before 10 s of refusals');
    assert.equal(process.exitProven(refused({}), 10_000), true, 'no evidence: refusals for 10 s');
    assert.equal(process.exitProven(new AdminRefusedError('GET /stats', 'refused'), 0), true, 'a target that keeps no witness: as before witnesses');
  });
});
