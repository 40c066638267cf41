/**
 * What a hostile or broken admin answer costs the sidecar, measured in a child process of its own
 * (memory-child.ts) so that the figures are the client's alone.
 *
 * Figures on Node 20 (before this client bounded its calls): a 1e6-deep JSON stats answer raised the peak
 * RSS by 118 MiB and was read as 0 connections; now +8 MiB and an invalid answer in ~30 ms. 20,000 calls
 * sharing one caller signal grew the heap by 2.5 MiB (AbortSignal.any); now ~0.1 MiB, not growing with
 * the number of calls.
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { FaultAdmin } from '../support/fault-admin.js';
import { REPO_ROOT, runNode } from '../support/process.js';
import { runsAlone } from '../support/exclusive.js';

// It loads or times the machine: never beside another such file (see test/support/exclusive.ts).
runsAlone();

async function runChild(t: TestContext, mode: 'deep-json' | 'calls', args: readonly string[] = []): Promise<Record<string, unknown>> {
  const admin = await FaultAdmin.start();
  t.after(() => admin.close());
  if (mode === 'deep-json') admin.script('/stats', 'deep-json');
  const child = await runNode(['--expose-gc', '--import', 'tsx', 'test/envoy/memory-child.ts', mode, String(admin.port), ...args], {
    cwd: REPO_ROOT,
    timeoutMs: 120_000,
  });
  assert.equal(child.code, 0, child.stderr);
  return JSON.parse(child.stdout) as Record<string, unknown>;
}

describe('EnvoyAdminClient: memory under hostile answers', () => {
  test('a 1e6-deep JSON answer is refused quickly, and the peak RSS stays modest', async (t) => {
    const result = await runChild(t, 'deep-json');
    assert.equal(result['kind'], 'invalid-answer', String(result['message']));
    assert.match(String(result['message']), /nested deeper than 32 levels/);
    assert.ok(Number(result['elapsedMs']) < 2_000, `took ${String(result['elapsedMs'])} ms`);
    const rise = Number(result['peakRssAfterMiB']) - Number(result['peakRssBeforeMiB']);
    // The 2 MB body, its string and the excerpt: a few MiB. JSON.parse of it would add over 100 MiB.
    assert.ok(rise < 40, `peak RSS rose by ${rise} MiB`);
  });

  test('5,000 calls with one long-lived caller signal leave no listener on it and do not grow the heap', async (t) => {
    const result = await runChild(t, 'calls', ['5000']);
    assert.equal(result['listenersLeft'], 0);
    // AbortSignal.any kept ~128 bytes a call: 0.6 MiB here, on top of the ~0.2 MiB any run grows by.
    assert.ok(Number(result['heapGrowthBytes']) < 512 * 1024, `heap grew by ${String(result['heapGrowthBytes'])} bytes`);
  });
});
