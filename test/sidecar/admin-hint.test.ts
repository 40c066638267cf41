/**
 * adminPortHint (src/sidecar/admin-hint.ts): the one sentence the start-up probe and the drain log when Envoy's
 * admin API cannot be reached. It must name the right knob for the address's kind, and each annotation and flag it
 * names must be one that really sets that address.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { resolvePodDrainPlan } from '../../src/config/annotations.js';
import { parseSidecarConfig } from '../../src/config/sidecar.js';
import { parseWebhookConfig } from '../../src/config/webhook.js';
import { ADMIN_PORT_ANNOTATION, adminPortHint } from '../../src/sidecar/admin-hint.js';

const ANNOTATION = /shutdown-manager\.io\/[a-z-]+/g;
const FLAG = /--[a-z-]+/g;

/** The annotations and flags a hint names, in order. */
function knobs(hint: string): { readonly annotations: string[]; readonly flags: string[] } {
  return { annotations: hint.match(ANNOTATION) ?? [], flags: hint.match(FLAG) ?? [] };
}

/** The pod's drain plan with only `annotations` set (the webhook's defaults otherwise). */
function planWith(annotations: Record<string, string>) {
  return resolvePodDrainPlan(annotations, parseWebhookConfig([], {}).injection.defaults, 30).plan;
}

describe('adminPortHint', () => {
  test('the annotation it is named for is the admin port annotation', () => {
    assert.equal(ADMIN_PORT_ANNOTATION, 'shutdown-manager.io/envoy-admin-port', "the annotation users set for Envoy Gateway's 19000 or Istio's 15000");
  });

  test('over TCP: names the address, the admin port annotation and flag, and the address annotation for another host', () => {
    for (const address of ['127.0.0.1:9001', '[::1]:15000', 'unix-admin.local:19000']) {
      const hint = adminPortHint(address);
      assert.ok(hint.includes(`at ${address}?`), `the hint names ${address}: ${hint}`);
      assert.deepEqual(knobs(hint), { annotations: [ADMIN_PORT_ANNOTATION, 'shutdown-manager.io/envoy-admin-address'], flags: ['--admin-port'] }, `the port's knobs for ${address}`);
      assert.doesNotMatch(hint, /socket|mount/, `nothing of sockets for ${address}`);
    }
  });

  test('on a Unix socket: names the socket, the address annotation and flag, pipe.path and the volume, and no port', () => {
    const hint = adminPortHint('unix:/admin/admin.sock');
    assert.ok(hint.includes('on the socket unix:/admin/admin.sock?'), `the hint names the socket: ${hint}`);
    assert.deepEqual(knobs(hint), { annotations: ['shutdown-manager.io/envoy-admin-address'], flags: ['--admin-address'] }, "the socket's knobs");
    assert.match(hint, /admin\.address\.pipe\.path/, "where Envoy's bootstrap names its socket");
    assert.match(hint, /mount the volume/, 'the volume both containers need');
    assert.doesNotMatch(hint, /admin-port/, 'a port means nothing on a socket (an annotation with one is refused)');
  });

  test("every annotation and flag it names sets the pod's admin port or address", () => {
    const tcp = knobs(adminPortHint('127.0.0.1:9001'));
    const unix = knobs(adminPortHint('unix:/admin/admin.sock'));
    const annotations = [...new Set([...tcp.annotations, ...unix.annotations])];
    const flags = [...new Set([...tcp.flags, ...unix.flags])];
    assert.equal(annotations.length + flags.length, 4, 'two annotations and two flags in all');
    // What each sets, and a value other than its default.
    const sets: Readonly<Record<string, readonly ['admin-port' | 'admin-address', string]>> = {
      [ADMIN_PORT_ANNOTATION]: ['admin-port', '19000'],
      'shutdown-manager.io/envoy-admin-address': ['admin-address', 'unix:/run/envoy/admin.sock'],
      '--admin-port': ['admin-port', '19000'],
      '--admin-address': ['admin-address', 'unix:/run/envoy/admin.sock'],
    };
    for (const annotation of annotations) {
      const [setting, value] = sets[annotation] ?? assert.fail(`${annotation} is not an annotation of the admin address`);
      assert.equal(String(planWith({ [annotation]: value })[setting]), value, `${annotation} sets ${setting}`);
    }
    for (const flag of flags) {
      const [setting, value] = sets[flag] ?? assert.fail(`${flag} is not a flag of the admin address`);
      assert.equal(String(parseSidecarConfig([`${flag}=${value}`], {})[setting]), value, `${flag} sets the sidecar's ${setting}`);
    }
  });
});
