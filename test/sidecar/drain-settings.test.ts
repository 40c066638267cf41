import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { longLivedGraceOf, quietPeriodOf, type DrainLoopSettings } from '../../src/sidecar/drain-settings.js';

const SETTINGS: DrainLoopSettings = { 'drain-delay': 0, 'check-delay': 0, 'check-interval': 1_000, 'min-open-connections': 0, 'drain-timeout': 60_000, 'admin-refusals': 3 };

describe('drain settings', () => {
  test('a quiet period that is absent or 0 is off (null), never a period of 0', () => {
    assert.equal(quietPeriodOf(SETTINGS), null, 'absent');
    assert.equal(quietPeriodOf({ ...SETTINGS, 'quiet-period': 0 }), null, '0');
    assert.equal(quietPeriodOf({ ...SETTINGS, 'quiet-period': 5_000 }), 5_000, 'set');
  });

  test('a long-lived-grace that is absent is off (null); 0 is a grace of 0', () => {
    assert.equal(longLivedGraceOf(SETTINGS), null, 'absent');
    assert.equal(longLivedGraceOf({ ...SETTINGS, 'long-lived-grace': 0 }), 0, 'a grace of 0: long-lived connections are left at check-delay');
    assert.equal(longLivedGraceOf({ ...SETTINGS, 'long-lived-grace': 30_000 }), 30_000, 'set');
  });
});
