/**
 * What the sidecar loads at start, checked on the build (run `npm run build` first; `npm test` does): the
 * bundle that `npm run build` makes of dist/sidecar/main.js imports Node built-ins and the error classes that
 * src/main.ts shares with it, nothing else; prom-client only once /metrics is asked for. A dependency or
 * another project module imported by the sidecar would show here before it shows in every Envoy pod's memory.
 */
import assert from 'node:assert/strict';
import { readFile } from 'node:fs/promises';
import { test } from 'node:test';
import { createRequire } from 'node:module';
import { fileURLToPath } from 'node:url';

const BUNDLE = fileURLToPath(new URL('../../dist/sidecar/main.js', import.meta.url));

test('the sidecar bundle imports only Node built-ins and the shared error classes', async () => {
  const code = await readFile(BUNDLE, 'utf8');
  const statics = [...code.matchAll(/^import\s[^;]*?from\s+"([^"]+)";/gms)].map((match) => match[1] as string);
  const dynamics = [...code.matchAll(/\bimport\(\s*"([^"]+)"\s*\)/g)].map((match) => match[1] as string);
  assert.ok(statics.length > 0, 'no import found: is dist/sidecar/main.js the bundle?');
  for (const specifier of statics) {
    assert.ok(specifier.startsWith('node:') || ['../config/errors.js', '../errors.js'].includes(specifier), `the sidecar imports ${specifier} at start`);
  }
  // An ESM import of node:http reads all its exports, and on Node 24 that loads undici (12 MiB): see src/envoy/admin-client.ts.
  assert.ok(!statics.includes('node:http'), 'node:http is imported; use process.getBuiltinModule');
  assert.ok(!statics.includes('node:crypto'), 'node:crypto is imported at start; it is loaded at the first token check');
  assert.deepEqual(dynamics, ['./metrics.js']);
});

test("the sidecar's metrics take prom-client's classes from their own files, not its index", async () => {
  const code = await readFile(fileURLToPath(new URL('../../dist/sidecar/metrics.js', import.meta.url)), 'utf8');
  assert.doesNotMatch(code, /from\s+['"]prom-client['"]/, 'the index loads cluster, push gateway and default metrics: 10-16 MiB');
  // The files are the index's own classes: the exposition is prom-client's, whatever the version.
  const require = createRequire(import.meta.url);
  const index = require('prom-client') as Record<string, unknown>;
  for (const [name, file] of [['Registry', 'registry'], ['Gauge', 'gauge'], ['Counter', 'counter']] as const) {
    assert.equal(require(`prom-client/lib/${file}`), index[name], `prom-client/lib/${file} is prom-client's ${name}`);
  }
});
