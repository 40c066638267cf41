import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { heldByAnother, ProcessFollower, whyUntold, type FollowVerdict } from '../../src/sidecar/process-follower.js';
import { MemoryLog } from '../support/memory-log.js';
import { ScriptedEnvoy } from '../support/scripted-envoy.js';

function setUp(readTimeoutMs = 1_000) {
  const envoy = new ScriptedEnvoy();
  const log = new MemoryLog();
  const stopping = new AbortController();
  const seen: FollowVerdict[] = [];
  const follower = new ProcessFollower(envoy, log, { readTimeoutMs, stopping: stopping.signal, clock: { now: () => performance.now() }, onCount: (_count, verdict) => seen.push(verdict) });
  return { envoy, log, stopping, seen, follower };
}

describe('ProcessFollower', () => {
  test('follows the process read after read, and another one from when it answers', async () => {
    const { envoy, follower, seen } = setUp();
    assert.deepEqual(await follower.read(), { ok: true, verdict: 'first', restartEpoch: null }, 'the first read');
    assert.equal((await follower.read()).ok, true, 'the second read');
    envoy.replace(); // another process: its counter starts again
    await follower.read();
    await follower.read();
    assert.deepEqual(seen, ['first', 'same', 'replaced', 'same'], 'the new process is followed from its first read');
    assert.equal(follower.latest?.mark, 2, 'the latest read is the new process');
  });

  test('reads one at a time: a read asked for while one is in flight waits for it', async () => {
    const { envoy, follower } = setUp();
    let release!: () => void;
    const held = new Promise<void>((resolve) => (release = resolve));
    envoy.answers.count = [() => held.then(() => 0)]; // every answer waits for release()
    const first = follower.read();
    const second = follower.read();
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(envoy.inFlight, 1, 'the second read is not sent yet');
    release();
    await Promise.all([first, second]);
    assert.equal(envoy.maxInFlight, 1, 'never two reads at once');
  });

  test('a read that does not answer in time is a timeout, and the call is cancelled', async () => {
    const { envoy, follower } = setUp(50);
    envoy.answers.count = ['hang'];
    const read = await follower.read();
    assert.deepEqual(read, { ok: false, kind: 'timeout', message: 'no answer within 50 ms' }, 'the fallback');
    await new Promise((resolve) => setImmediate(resolve));
    assert.equal(envoy.inFlight, 0, 'the held call was cancelled');
  });

  test('marks that never grow as our connections do are said once, after a few doubtful reads', async () => {
    const { envoy, follower, log } = setUp();
    envoy.answers.count = [{ adminConnectionsTotal: 100 }]; // a proxy's counter, whatever our connections
    for (let read = 0; read < 6; read += 1) await follower.read();
    assert.equal(log.events('admin_marks_unproven').length, 1, 'a proxy in front of the admin API is suspected once');
  });

  test("a refusal tells whether another process's witness was open, and the re-arm says why", async () => {
    const { envoy, follower } = setUp();
    envoy.down = true;
    const read = await follower.read();
    assert.equal(read.ok, false, 'refused');
    assert.ok(!read.ok && read.kind === 'refused', 'of kind refused');
    const openOther = { ok: false, kind: 'refused', message: 'refused', openWitness: 3 } as const;
    assert.equal(heldByAnother(openOther, { mark: 1, marker: 0, witness: 2 }), true, 'witness 3 open, the drained process held 2');
    assert.equal(heldByAnother(openOther, { mark: 1, marker: 0, witness: 3 }), false, "the drained process's own witness");
    assert.match(whyUntold(openOther), /that process lives, its address lost/, 'the re-arm line says the process lives');
    assert.match(whyUntold({ ok: true, verdict: 'reset', restartEpoch: null }), /a counter reset or a hot restart/, 'a blind reset');
  });
});
