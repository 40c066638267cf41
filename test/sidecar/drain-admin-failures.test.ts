/**
 * A drain's admin-failure bookkeeping (src/sidecar/drain-admin-failures.ts): counts by kind, the run of refusals,
 * the initiation steps left unconfirmed by a timeout, and warnings at most one per kind and error class a period.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { AdminRefusedError, AdminStatusError, AdminTimeoutError } from '../../src/envoy/admin-errors.js';
import { AdminFailureLedger } from '../../src/sidecar/drain-admin-failures.js';
import { MemoryLog } from '../support/memory-log.js';

function ledger(hasAnswered = true): { failures: AdminFailureLedger; log: MemoryLog; clock: { nowMs: number; now: () => number } } {
  const clock = { nowMs: 1_000, now: () => clock.nowMs };
  const log = new MemoryLog();
  return { failures: new AdminFailureLedger({ address: '127.0.0.1:9901', hasAnswered }, log, clock), log, clock };
}

describe('drain admin failures', () => {
  test('counts by kind, the last failure, and the run of refusals that an answered read ends', () => {
    const { failures, clock } = ledger();
    assert.equal(failures.report(), null, 'nothing failed yet');
    failures.record(new AdminRefusedError('/stats', 'connect ECONNREFUSED'), 'count-connections');
    clock.nowMs = 1_500;
    failures.record(new AdminRefusedError('/stats', 'connect ECONNREFUSED'), 'count-connections');
    assert.equal(failures.consecutiveRefusals, 2);
    assert.equal(failures.refusalsSinceMs, 1_000, 'the run started at the first refusal');
    failures.stepAccepted();
    assert.equal(failures.consecutiveRefusals, 0);
    assert.equal(failures.refusalsSinceMs, 1_000, 'a step taken does not end the run timed');
    failures.readAnswered();
    assert.equal(failures.refusalsSinceMs, undefined);
    failures.record(new AdminStatusError('/stats', 500, 'oops'), 'count-connections');
    assert.equal(failures.lastInvalidAnswer, 'Envoy admin /stats: answered HTTP 500: "oops"');
    assert.deepEqual(failures.report(), { kind: 'invalid-answer', message: 'Envoy admin /stats: answered HTTP 500: "oops"', counts: { refused: 2, timeout: 0, transport: 0, 'invalid-answer': 1 } });
  });

  test('a step that timed out is unconfirmed, by its label, until taken; a read that timed out is no step', () => {
    const { failures } = ledger();
    failures.record(new AdminTimeoutError('/healthcheck/fail', 'no answer in 1s'), 'fail-health-checks');
    failures.record(new AdminTimeoutError('/stats', 'no answer in 1s'), 'count-connections');
    assert.equal(failures.timeouts, 2);
    assert.deepEqual(failures.unconfirmedSteps(() => false), ['fail health checks']);
    assert.deepEqual(failures.unconfirmedSteps((id) => id === 'fail-health-checks'), []);
  });

  test('one warning per kind and error class a period; a cut call is the last error', () => {
    const { failures, log } = ledger();
    for (let index = 0; index < 3; index += 1) {
      const error = new AdminRefusedError('/stats', 'connect ECONNREFUSED');
      failures.logFailure(error, failures.record(error, 'count-connections'), 'count-connections');
    }
    const warned = log.lines.filter((line) => line.fields['event'] === 'admin_error');
    assert.equal(warned.length, 1, 'the rest within the period are not logged');
    assert.equal(warned[0]?.message, 'Envoy admin call failed (count open connections, refused); retrying every check interval (at most one such line per 30s)');
    failures.noteCutCall('drain-listeners');
    assert.equal(failures.lastError, "drain listeners: no answer from Envoy's admin API before the drain ended");
  });
});
