/**
 * The readiness probe the injector writes, asked of the built sidecar (`npm run build` first) as the kubelet
 * asks it: 503 while Envoy's admin API has never answered (a wrong admin port keeps the pod out of service
 * and stops a rollout), 200 once it has, and 200 still when it stops answering (latched: a busy or
 * restarting Envoy never takes the sidecar out of service).
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { readinessProbe } from '../../src/inject/sidecar.js';
import { httpRequest } from '../support/connections.js';
import { EnvoyEmulator } from '../../src/emulator/envoy-emulator.js';
import { freePort } from '../support/ports.js';
import { spawnSidecar } from '../support/sidecar-process.js';
import { waitUntil } from '../support/wait.js';

const defaults = parseWebhookConfig([], {}).injection.defaults;

test(
  "the built sidecar answers the injected readiness probe: 503 until Envoy's admin API answers, then 200 for good",
  async (t) => {
    const probe = readinessProbe(defaults).httpGet;
    assert.ok(probe?.path !== undefined, 'the readiness probe has a path');
    const adminPort = await freePort();
    const sidecar = await spawnSidecar([`--admin-port=${adminPort}`]);
    t.after(() => sidecar.kill());
    const ask = async (): Promise<number> => (await httpRequest(sidecar.url(probe.path ?? ''), { timeoutMs: 2_000 })).status;

    assert.equal(await ask(), 503, 'nothing answers on the admin port yet');
    const emulator = await EnvoyEmulator.start({ adminPort });
    let closed = false;
    t.after(() => (closed ? undefined : emulator.close()));
    // The sidecar's own admin probe backs off to 5 s between tries.
    await waitUntil(async () => (await ask()) === 200, 10_000, 'the sidecar to become ready');
    await emulator.close();
    closed = true;
    assert.equal(await ask(), 200, 'latched: an admin API that stops answering does not make the sidecar unready');
  },
);
