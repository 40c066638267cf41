/**
 * What Envoy main's connection-level drain (runtime guard use_connection_event_drain, modelled by the emulator for
 * 1.41.0-dev from main's changelog) changes for a drain, through the built sidecar: an idle keep-alive client no
 * longer holds the pod until its next request or the deadline. Control: a released Envoy (1.36.2), where it does.
 * `npm run build` first.
 */
import assert from 'node:assert/strict';
import http from 'node:http';
import { test } from 'node:test';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { ENVOY_MAIN_VERSION } from '../../src/emulator/versions.js';
import { spawnSidecar } from '../support/sidecar-process.js';

/** One request on a keep-alive connection, then the connection left open and idle. */
async function idleKeepAlive(port: number): Promise<http.Agent> {
  const agent = new http.Agent({ keepAlive: true, maxSockets: 1 });
  await new Promise<void>((resolve, reject) => {
    http.get({ host: '127.0.0.1', port, path: '/', agent }, (response) => {
      response.resume();
      response.on('end', () => resolve());
    }).on('error', reject);
  });
  return agent;
}

for (const [version, heldToDeadline] of [['1.36.2', true], [ENVOY_MAIN_VERSION, false]] as const) {
  test(`Envoy ${version}: an idle keep-alive client ${heldToDeadline ? 'holds the drain to its deadline (control)' : 'is closed as the drain starts, and the drain ends'}`, async (t) => {
    const emulator = await EnvoyEmulator.start({ version, drainTimeMs: 8_000 });
    t.after(() => emulator.close());
    const agent = await idleKeepAlive(emulator.ports.http);
    t.after(() => agent.destroy());
    const sidecar = await spawnSidecar([`--admin-port=${emulator.ports.admin}`, '--check-interval=100ms', '--check-delay=300ms', '--drain-timeout=3s']);
    t.after(() => sidecar.kill());
    await sidecar.waitForLog((line) => line['event'] === 'envoy_admin_reachable');
    const started = Date.now();
    const answer = await fetch(sidecar.url('/shutdown'));
    const body = await answer.text();
    const tookMs = Date.now() - started;
    t.diagnostic(`${answer.status} after ${tookMs} ms: ${body.trim()}`);
    if (heldToDeadline) {
      assert.equal(answer.status, 503);
      assert.match(body, /^drain deadline reached after 3\.\ds with 1 connections still open/);
    } else {
      assert.equal(answer.status, 200);
      assert.match(body, /^drained: 0 open connections/);
      assert.ok(tookMs < 2_500, `${tookMs} ms`);
    }
  });
}
