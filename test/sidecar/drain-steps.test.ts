/**
 * The drain's step ids and their labels (src/sidecar/drain-steps.ts): the labels are the drain_step lines' `step`,
 * the admin_error lines' `action` and the names in an outcome's unconfirmedSteps, which log queries and the e2e tests
 * match, so each is pinned here word for word.
 */
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { labelOf, type DrainActionId } from '../../src/sidecar/drain-steps.js';

describe('drain steps', () => {
  test('one label per id, as the logs have always said', () => {
    const ids: readonly DrainActionId[] = ['fail-health-checks', 'drain-listeners', 'count-connections'];
    assert.deepEqual(
      ids.map((id) => labelOf(id)),
      ['fail health checks', 'drain listeners', 'count open connections'],
    );
  });
});
