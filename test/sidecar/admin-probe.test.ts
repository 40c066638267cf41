import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { WitnessedAdminClient } from '../../src/envoy/process/witnessed-admin.js';
import { startAdminProbe } from '../../src/sidecar/admin-probe.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { MemoryLog } from '../support/memory-log.js';
import { freePort } from '../support/ports.js';
import { waitUntil } from '../support/wait.js';

describe('start-up probe of the Envoy admin API', () => {
  test('early failures are logged once at info; a warning naming the fix comes only after warnAfterMs, then at most every warnEveryMs', async (t) => {
    const port = await freePort(); // nothing listens yet: Envoy still starting, or a wrong port
    const client = new WitnessedAdminClient({ address: '127.0.0.1', port, timeoutMs: 500 });
    t.after(() => client.close());
    const log = new MemoryLog();
    const startedAt = Date.now();
    const probe = startAdminProbe(client, log, { minRetryMs: 10, maxRetryMs: 20, warnAfterMs: 300, warnEveryMs: 400 });
    t.after(async () => {
      probe.stop();
      await probe.finished;
    });

    await waitUntil(() => log.lines.filter((line) => line.level === 'warn').length >= 3, 5_000, 'three warnings');
    const [waiting, ...rest] = log.lines;
    assert.equal(waiting?.level, 'info');
    assert.equal(waiting?.fields['event'], 'envoy_admin_waiting');
    assert.match(waiting?.message ?? '', new RegExp(`not reachable yet at 127\\.0\\.0\\.1:${port}`));
    assert.ok(rest.every((line) => line.level === 'warn' && line.fields['event'] === 'envoy_admin_unreachable'), 'nothing else logged in between');
    const warnings = rest;
    assert.ok((warnings[0]?.at ?? 0) - startedAt >= 300, `first warning after ${(warnings[0]?.at ?? 0) - startedAt} ms`);
    assert.ok(Number(warnings[0]?.fields['unreachable_for_ms']) >= 300, 'the warning counts at least warnAfterMs unreachable');
    assert.match(warnings[0]?.message ?? '', /is Envoy's admin API really at .*shutdown-manager\.io\/envoy-admin-port/);
    for (let index = 1; index < warnings.length; index += 1) {
      const gap = (warnings[index]?.at ?? 0) - (warnings[index - 1]?.at ?? 0);
      assert.ok(gap >= 400, `warnings ${gap} ms apart`);
    }

    const emulator = await EnvoyEmulator.start({ adminPort: port });
    t.after(() => emulator.close());
    await probe.finished;
    assert.equal(log.lines.at(-1)?.fields['event'], 'envoy_admin_reachable');
    assert.equal(client.hasAnswered, true);
  });

  test('an admin API that answers within warnAfterMs causes no warning at all', async (t) => {
    const port = await freePort();
    const client = new WitnessedAdminClient({ address: '127.0.0.1', port, timeoutMs: 500 });
    t.after(() => client.close());
    const log = new MemoryLog();
    const probe = startAdminProbe(client, log, { minRetryMs: 10, maxRetryMs: 20, warnAfterMs: 5_000, warnEveryMs: 5_000 });
    t.after(() => probe.stop());
    await waitUntil(() => log.lines.length > 0, 2_000, 'a first failure');
    await new Promise((resolve) => setTimeout(resolve, 100)); // several more failures
    const emulator = await EnvoyEmulator.start({ adminPort: port });
    t.after(() => emulator.close());
    await probe.finished;
    assert.deepEqual(
      log.lines.map((line) => [line.level, line.fields['event']]),
      [['info', 'envoy_admin_waiting'], ['info', 'envoy_admin_reachable']],
    );
  });

  test('an admin port that answers 500 to everything is reported with what it answered, not as unreachable', async (t) => {
    const emulator = await EnvoyEmulator.start({ fault: { kind: 'status', status: 500 } });
    t.after(() => emulator.close());
    const client = new WitnessedAdminClient({ address: '127.0.0.1', port: emulator.ports.admin, timeoutMs: 500 });
    t.after(() => client.close());
    const log = new MemoryLog();
    const probe = startAdminProbe(client, log, { minRetryMs: 10, maxRetryMs: 20, warnAfterMs: 50, warnEveryMs: 5_000 });
    t.after(async () => {
      probe.stop();
      await probe.finished;
    });
    await waitUntil(() => log.lines.some((line) => line.level === 'warn'), 5_000, 'a warning');
    const warning = log.lines.find((line) => line.level === 'warn');
    assert.equal(warning?.fields['last_answer_status'], 500);
    assert.match(warning?.message ?? '', /answers, but not as Envoy does \(last: GET \/ready answered HTTP 500 "emulated admin failure \(HTTP 500\)"\)/);
    assert.doesNotMatch(warning?.message ?? '', /not reachable/);
    // The first line, before any warning, already tells it apart from an Envoy still starting.
    const first = log.lines[0];
    assert.deepEqual([first?.fields['event'], first?.fields['kind']], ['envoy_admin_waiting', 'invalid-answer']);
    assert.match(first?.message ?? '', /answered, but not as Envoy does/);
    assert.doesNotMatch(first?.message ?? '', /may still be starting/);
  });
});
