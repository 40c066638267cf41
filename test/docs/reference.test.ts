/** The reference docs are what the code defines: `npm run docs` writes them, and this fails when they drifted. */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { POD_DRAIN_SETTINGS } from '../../src/config/drain.js';
import { SIDECAR_SETTINGS } from '../../src/config/sidecar.js';
import { REFERENCE_FILES } from '../../tools/docs.js';

const root = new URL('../../', import.meta.url);

for (const [path, write] of Object.entries(REFERENCE_FILES)) {
  test(`${path} is what npm run docs writes from the code`, async () => {
    const committed = await readFile(new URL(path, root), 'utf8');
    assert.ok(committed === write(), `${path} differs from what the code defines: run npm run docs and commit it`);
  });
}

test('the reference names every setting and annotation, and the lag metrics (a control on the generator itself)', () => {
  const configuration = REFERENCE_FILES['docs/reference/configuration.md']?.() ?? '';
  for (const name of Object.keys(SIDECAR_SETTINGS)) assert.ok(configuration.includes(`\`--${name}\``), name);
  for (const name of Object.keys(POD_DRAIN_SETTINGS)) {
    const annotation = { 'admin-port': 'envoy-admin-port', 'admin-address': 'envoy-admin-address' }[name] ?? name;
    assert.ok(configuration.includes(`\`shutdown-manager.io/${annotation}\``), annotation);
  }
  const metrics = REFERENCE_FILES['docs/reference/metrics.md']?.() ?? '';
  assert.match(metrics, /`shutdown_manager_load_balancer_lag_seconds\{rule\}` \| gauge/);
  assert.match(metrics, /`shutdown_manager_drain_load_balancer_lag_seconds` \| histogram/);
});
