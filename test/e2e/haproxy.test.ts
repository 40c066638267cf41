/**
 * Pod deletions behind a real HAProxy (Debian's haproxy 2.6; test/e2e/haproxy/): three emulated Envoy pods behind
 * HAProxy in `mode http`, HTTP checks of Envoy's health-check filter every 300 ms (DOWN after 3 failures), busy
 * keep-alive clients through HAProxy, and pod 0 deleted as the kubelet does it (preStop GET /shutdown to the built
 * sidecar, Envoy's SIGTERM when it answers). The baseline scenario of docs/proof.md's HAProxy table, under each rule:
 *
 * - the observed rule loses nothing, and the lag it reports is HAProxy's DOWN time (from HAProxy's own log) within
 *   one check-interval, plus slack for a loaded machine;
 * - no sidecar (the control) loses requests: HAProxy sends the pod requests until it marks it DOWN;
 * - the fixed rule with check-delay below HAProxy's DOWN time loses requests (a negative control), above it none.
 *
 * `npm run build` first (npm test does). Skipped, with the reason, where haproxy is not installed (.ci/run installs
 * it, and says why in HAPROXY_UNAVAILABLE when it could not).
 */
import assert from 'node:assert/strict';
import { describe, test, type TestContext } from 'node:test';
import { runsAlone } from '../support/exclusive.js';
import { haproxyUnavailable } from './haproxy/haproxy.js';
import { CHECK_INTERVAL_MS, FIXED_ABOVE_MS, FIXED_BELOW_MS, runOnce, scenarioOf, type RuleName, type RunReport } from './haproxy/scenarios.js';

// It loads the machine (HAProxy, three Envoys, a sidecar and busy clients): never beside another such file.
runsAlone();

const unavailable = haproxyUnavailable();
if (unavailable !== undefined && process.env['CI'] === 'true' && process.env['HAPROXY_UNAVAILABLE'] === undefined) {
  throw new Error('haproxy is missing: .ci/run installs it (Debian package haproxy)');
}
const skip = unavailable === undefined ? false : `${unavailable}; CI runs these`;

/**
 * What the lag may differ from HAProxy's DOWN time by, beyond one check-interval: HAProxy's log line and the
 * sidecar's reads are each read by a process of their own on a shared, loaded machine. The event loop's worst stall in
 * this process during the run (which delays reading HAProxy's log, and the emulator's answers) is added to it.
 */
const SLACK_MS = 300;

const rounded = (value: number | null | undefined): string => (typeof value === 'number' ? String(Math.round(value)) : 'none');

async function deletion(t: TestContext, rule: RuleName): Promise<RunReport> {
  const report = await runOnce(scenarioOf('a'), rule);
  const failures = [...report.failures].map(([kind, count]) => `${kind} x${count}`).join(', ') || 'none';
  t.diagnostic(
    `${rule}: ${report.failed} failed (${failures}) / ${report.served} served; DOWN ${report.downAfterMs ?? '-'} ms after ${report.referenceIs}; ` +
      `last request to the pod at ${report.lastSentAfterMs ?? '-'} ms; lag ${rounded(report.lagAtLeastMs)}-${rounded(report.lagMs)} ms; ` +
      `/shutdown answered after ${report.releaseAfterMs} ms (${report.reason ?? 'no sidecar'}); event loop p99 ${Math.round(report.loopDelayMs.p99)} ms, max ${Math.round(report.loopDelayMs.max)} ms; load ${report.loadAverage.toFixed(1)}`,
  );
  assert.equal(report.failedBeforeDeletion, 0, 'nothing failed before the deletion: HAProxy and the pods were up');
  return report;
}

describe('pod deletions behind a real HAProxy, HTTP checks of Envoy\'s health-check filter, busy clients', { skip }, () => {
  test("the observed rule: nothing lost, and the lag the sidecar reports is HAProxy's DOWN time from its log, within one check-interval", { timeout: 45_000 }, async (t) => {
    const report = await deletion(t, 'observed');
    assert.equal(report.failed, 0, 'no request failed: the pod was let go after HAProxy had marked it DOWN');
    assert.equal(report.reason, 'connections-closed', 'the drain ended by its count, not its deadline');
    assert.ok(report.downAfterMs !== undefined, 'HAProxy logged the pod DOWN');
    assert.ok(report.lagMs !== undefined && report.lagMs !== null && report.lagMs > 0, `the sidecar reported a lag: ${String(report.lagMs)}`);
    assert.equal(report.loggedLagMs, report.lagMs, 'the drain_finished log line carries the lag /drain shows');
    const slack = SLACK_MS + report.loopDelayMs.max;
    assert.ok(
      report.lagMs >= report.downAfterMs - slack && report.lagMs <= report.downAfterMs + CHECK_INTERVAL_MS + slack,
      `lag ${Math.round(report.lagMs)} ms against HAProxy's DOWN ${report.downAfterMs} ms after the failure: more than one check-interval (${CHECK_INTERVAL_MS} ms) + ${Math.round(slack)} ms apart`,
    );
    assert.ok(report.releaseAfterMs > report.downAfterMs, `released ${report.releaseAfterMs} ms after /shutdown, after the DOWN at ${report.downAfterMs} ms`);
  });

  test('control: without the sidecar (Envoy stopped at the deletion) HAProxy sends the pod requests until it is DOWN, and they fail', { timeout: 45_000 }, async (t) => {
    const report = await deletion(t, 'control');
    assert.ok(report.failed > 0, `requests failed: ${report.failed}`);
    assert.ok(report.sentAfterFailed > 0, `HAProxy's log shows requests to the deleted pod that failed: ${report.sentAfterFailed}`);
  });

  test(`the fixed rule with check-delay ${FIXED_BELOW_MS} ms, below HAProxy's DOWN time, loses requests (negative control)`, { timeout: 45_000 }, async (t) => {
    const report = await deletion(t, 'fixed-below');
    assert.ok(report.failed > 0, `requests failed: ${report.failed}`);
    assert.ok(report.downAfterMs !== undefined && report.deletion.releasedAt - report.reference < report.downAfterMs, 'the pod was let go before HAProxy marked it DOWN');
  });

  test(`the fixed rule with check-delay ${FIXED_ABOVE_MS} ms, above HAProxy's DOWN time, loses none`, { timeout: 45_000 }, async (t) => {
    const report = await deletion(t, 'fixed-above');
    assert.equal(report.failed, 0, 'no request failed');
    assert.ok(report.downAfterMs !== undefined && report.downAfterMs < FIXED_ABOVE_MS, `HAProxy marked the pod DOWN (${String(report.downAfterMs)} ms) before check-delay ended`);
  });
});
