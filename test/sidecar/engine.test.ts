/**
 * The sidecar's Envoy side (src/sidecar/engine.ts) started against the Envoy emulator, as main.ts starts it once
 * its server listens. (The admin API's name in the "listening" line is admin-address.ts's adminTarget, the admin
 * client's own: test/envoy/admin-address.test.ts.)
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { openJournal } from '../../src/sidecar/journal.js';
import { startEngine } from '../../src/sidecar/engine.js';
import { systemClock } from '../../src/clock.js';
import { MemoryLog } from '../support/memory-log.js';
import { waitUntil } from '../support/wait.js';

describe('the engine', () => {
  test('probes Envoy, is ready once it answered, serves metrics, and closes', async (t) => {
    const emulator = await EnvoyEmulator.start();
    t.after(() => emulator.close());
    const config = parseSidecarConfig(['--admin-address=127.0.0.1', `--admin-port=${emulator.ports.admin}`, '--state-dir='], {});
    const log = new MemoryLog();
    const counters = { unauthorized: 0, connectionsClosed: { shed: 0, timedOut: 0, refused: 0, tooManyInFlight: 0, slowReader: 0, writeTimedOut: 0 } };
    const engine = startEngine(config, { journal: openJournal(''), log, clock: systemClock, serverCounters: () => counters });
    await waitUntil(() => engine.supervisor.readiness().ready, 10_000, "Envoy's admin API to answer");
    assert.ok(log.lines.some((line) => line.fields['event'] === 'envoy_admin_reachable'), 'the probe said so');
    const { contentType, body } = await engine.metrics();
    assert.match(contentType, /^text\/plain/);
    assert.match(body, /^shutdown_manager_drain_state\{state="idle"\} 1$/m);
    engine.interrupt();
    await engine.close();
  });

});
