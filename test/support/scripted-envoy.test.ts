/** The scripted Envoy's own contract: its mark as Envoy's over a real socket, and what each scripted answer does. */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { EnvoyAdminClient } from '../../src/envoy/admin-client.js';
import { AdminRefusedError, AdminStatusError } from '../../src/envoy/admin-errors.js';
import { FaultAdmin } from './fault-admin.js';
import { ScriptedEnvoy } from './scripted-envoy.js';
import { VirtualClock } from './virtual-clock.js';

/** What happens to Envoy, step by step: a call of ours, or a change of its process. */
type Step = 'count' | 'fail' | 'drain' | 'serverInfo' | 'reset' | 'exit' | 'replace';
const STEPS: readonly Step[] = ['count', 'fail', 'drain', 'count', 'serverInfo', 'count', 'reset', 'count', 'exit', 'count', 'replace', 'count', 'count'];

/** The mark each stats read reported, or 'refused'. */
async function marksOf(envoy: Pick<ScriptedEnvoy, 'countOpenConnections' | 'failHealthChecks' | 'drainListeners' | 'serverInfo'>, change: (step: 'reset' | 'exit' | 'replace') => Promise<void>) {
  const marks: (number | null | 'refused')[] = [];
  for (const step of STEPS) {
    if (step === 'count') marks.push(await envoy.countOpenConnections().then((count) => count.adminConnectionsTotal, (error: unknown) => (error instanceof AdminRefusedError ? 'refused' : null)));
    else if (step === 'fail') await envoy.failHealthChecks();
    else if (step === 'drain') await envoy.drainListeners();
    else if (step === 'serverInfo') await envoy.serverInfo();
    else await change(step);
  }
  return marks;
}

describe('ScriptedEnvoy', () => {
  test("its mark grows as Envoy's does over a real socket (FaultAdmin and the admin client): one per call accepted, none refused, 0 after a reset and in a new process", async (t) => {
    const admin = await FaultAdmin.start();
    const client = new EnvoyAdminClient({ address: '127.0.0.1', port: admin.port, timeoutMs: 2_000 });
    t.after(async () => {
      client.close();
      await admin.close();
    });
    const real = await marksOf(client, (step) => (step === 'reset' ? Promise.resolve(admin.resetCounters()) : step === 'exit' ? admin.stop() : admin.restart()));
    const double = new ScriptedEnvoy({ mark: 0 });
    const scripted = await marksOf(double, async (step) => {
      if (step === 'reset') double.resetCounters();
      else if (step === 'exit') double.down = true;
      else double.replace();
    });
    assert.deepEqual(real, [1, 4, 6, 1, 'refused', 1, 2], 'the admin counter over a real socket');
    assert.deepEqual(scripted, real, 'the same marks from the double');
  });

  test('answers: the last repeats; an error fails the call; hang rejects once aborted; stuck never settles; a function answers once Envoy took the call', async () => {
    const envoy = new ScriptedEnvoy({ answers: { count: [1, 2] } });
    assert.deepEqual([(await envoy.countOpenConnections()).total, (await envoy.countOpenConnections()).total, (await envoy.countOpenConnections()).total], [1, 2, 2], 'the queue in order, then its last answer');
    envoy.answers.fail = [new AdminStatusError('POST /healthcheck/fail', 500, 'boom')];
    await assert.rejects(envoy.failHealthChecks(), AdminStatusError, 'the scripted error');
    assert.equal(envoy.state, 'LIVE', 'a failed /healthcheck/fail changed nothing');
    envoy.answers.count = ['hang'];
    const abort = new AbortController();
    const hanging = envoy.countOpenConnections(abort.signal);
    abort.abort();
    await assert.rejects(hanging, /aborted/, 'a hanging call rejects once aborted');
    envoy.answers.count = ['stuck'];
    const stuck = new AbortController();
    const never = envoy.countOpenConnections(stuck.signal).then(() => 'settled', () => 'settled');
    stuck.abort();
    assert.equal(await Promise.race([never, new Promise((resolve) => setImmediate(() => resolve('pending')))]), 'pending', 'a stuck call stays pending, aborted or not');
    envoy.answers.count = [() => ({ adminConnectionsTotal: envoy.mark * 10 })];
    assert.equal((await envoy.countOpenConnections()).adminConnectionsTotal, 1_070, 'called after its connection was accepted: 100 + 7 calls');
    assert.deepEqual(envoy.names(), ['count', 'count', 'count', 'fail', 'count', 'count', 'count'], 'every call logged');
  });

  test("our connections: each call creates one, answered once Envoy answered it; a refused one is created but neither answered nor in Envoy's mark", async () => {
    const envoy = new ScriptedEnvoy({ answers: { count: [0, new AdminRefusedError('GET /stats', 'connection refused'), 0] } });
    await envoy.countOpenConnections();
    const marker = envoy.connectionMarker();
    await assert.rejects(envoy.countOpenConnections(), AdminRefusedError, 'the scripted refusal');
    const read = await envoy.countOpenConnections();
    assert.deepEqual([envoy.connectionMarker() - marker, envoy.connectedSince(marker), read.adminConnectionsTotal], [2, 1, 102], 'two created, one answered; the mark grew by 1 since 101');
  });

  test('the clock given: each call logged at its time, a delayed answer that much later; a call aborted meanwhile rejects', async () => {
    const clock = new VirtualClock();
    const startedAt = clock.now();
    const envoy = new ScriptedEnvoy({ clock, delayMs: { count: 250 } });
    await envoy.countOpenConnections();
    assert.deepEqual([envoy.calls[0]?.at, clock.now()], [startedAt, startedAt + 250], 'sent at once, answered 250 ms later');
    const abort = new AbortController();
    const late = envoy.countOpenConnections(abort.signal);
    abort.abort();
    await assert.rejects(late, /aborted/, 'aborted before the delay was over');
    assert.equal(envoy.inFlight, 0, 'no call left in flight');
  });
});
