/**
 * decideRecovery, row by row (the table is in src/sidecar/recovery.ts): what a starting sidecar does about
 * the Envoy it finds, given what the journal says an earlier sidecar asked of that very process and what
 * Envoy accepted.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import type { EnvoyProcessInfo, EnvoyServerState } from '../../src/envoy/admin-client.js';
import type { JournalEntry, StepProgress } from '../../src/sidecar/journal.js';
import { decideRecovery, SAME_PROCESS_TOLERANCE_MS, type RecoveryAction } from '../../src/sidecar/recovery.js';

const STARTED = 1_000_000;
const STATES: readonly EnvoyServerState[] = ['LIVE', 'DRAINING', 'PRE_INITIALIZING', 'INITIALIZING'];
const PROGRESS: readonly (StepProgress | null)[] = [null, 'intended', 'accepted'];

function envoy(state: EnvoyServerState): EnvoyProcessInfo {
  return { state, uptimeSeconds: 600, version: null, restartEpoch: 0, startedAtMs: STARTED, readAtMs: STARTED + 600_000 };
}

function record(healthChecks: StepProgress | null, listenersDrain: StepProgress | null, envoyStartedAtMs: number | null = STARTED): JournalEntry {
  return { envoyStartedAtMs, healthChecks, listenersDrain, updatedAt: '2026-11-26T08:00:00.000Z' };
}

function decide(state: EnvoyServerState, journal: JournalEntry | undefined): [RecoveryAction, boolean | 'unknown'] {
  const decision = decideRecovery(envoy(state), journal);
  assert.ok(decision.why.length > 0, 'the decision says why');
  return [decision.action, decision.listenersDrained];
}

describe('recovery: listeners drain recorded for this process', () => {
  test('row 1: accepted, in any state and whatever the health checks: restart (the drain cannot be undone)', () => {
    for (const state of STATES) {
      for (const health of PROGRESS) {
        assert.deepEqual(decide(state, record(health, 'accepted')), ['restart-envoy', true], `${state}, health checks ${health}`);
      }
    }
    assert.match(decideRecovery(envoy('LIVE'), record('accepted', 'accepted')).why, /Envoy accepted it/);
  });

  test('row 2: intended only, in any state, even LIVE: restart (it may have reached Envoy, and nothing shows whether it did)', () => {
    for (const state of STATES) {
      for (const health of PROGRESS) {
        assert.deepEqual(decide(state, record(health, 'intended')), ['restart-envoy', 'unknown'], `${state}, health checks ${health}`);
      }
    }
    assert.match(decideRecovery(envoy('LIVE'), record('intended', 'intended')).why, /no answer recorded/);
  });
});

describe('recovery: health checks recorded for this process, listeners never sent', () => {
  test('row 3: accepted or intended, Envoy DRAINING: pass the health checks (nothing irreversible was sent)', () => {
    assert.deepEqual(decide('DRAINING', record('accepted', null)), ['pass-health-checks', false]);
    assert.deepEqual(decide('DRAINING', record('intended', null)), ['pass-health-checks', false], 'DRAINING shows the intended call got there');
    assert.match(decideRecovery(envoy('DRAINING'), record('intended', null)).why, /asked to fail this Envoy's health checks/);
    assert.match(decideRecovery(envoy('DRAINING'), record('accepted', null)).why, /failed this Envoy's health checks/);
  });

  test('row 4: accepted or intended, Envoy LIVE or starting: nothing to do', () => {
    for (const state of ['LIVE', 'PRE_INITIALIZING', 'INITIALIZING'] as const) {
      assert.deepEqual(decide(state, record('intended', null)), ['none', false], `${state}: the intent never took effect`);
      assert.deepEqual(decide(state, record('accepted', null)), ['none', false], `${state}: passed again since`);
    }
  });
});

describe('recovery: no record of this Envoy process', () => {
  const noRecord: readonly [string, JournalEntry | undefined][] = [
    ['no journal', undefined],
    ['a record of an unknown process', record('accepted', null, null)],
    ['a record of an earlier process', record('accepted', null, STARTED - SAME_PROCESS_TOLERANCE_MS - 1)],
    ['a record of a later process', record('accepted', 'accepted', STARTED + SAME_PROCESS_TOLERANCE_MS + 1)],
    ['a record of neither step', record(null, null)],
  ];

  test('row 5: Envoy DRAINING: restart (nothing tells whether its listeners were drained)', () => {
    for (const [why, journal] of noRecord) assert.deepEqual(decide('DRAINING', journal), ['restart-envoy', 'unknown'], why);
  });

  test('row 6: Envoy LIVE or starting: nothing to do', () => {
    for (const state of ['LIVE', 'PRE_INITIALIZING', 'INITIALIZING'] as const) {
      for (const [why, journal] of noRecord) assert.deepEqual(decide(state, journal), ['none', 'unknown'], `${state}, ${why}`);
    }
  });

  test('two estimates of one start within the tolerance are the same process', () => {
    assert.deepEqual(decide('DRAINING', record('accepted', null, STARTED + SAME_PROCESS_TOLERANCE_MS)), ['pass-health-checks', false]);
    assert.deepEqual(decide('DRAINING', record('accepted', null, STARTED - SAME_PROCESS_TOLERANCE_MS)), ['pass-health-checks', false]);
  });
});
