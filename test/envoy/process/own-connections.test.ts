import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { OwnConnectionLedger } from '../../../src/envoy/process/own-connections.js';

describe('OwnConnectionLedger', () => {
  test('counts the sockets created after a marker that the admin port answered on, each once', () => {
    const ledger = new OwnConnectionLedger();
    const first = ledger.created();
    first();
    const marker = ledger.connectionMarker();
    assert.equal(marker, 1, 'one socket created');
    const answered = ledger.created();
    ledger.created(); // never answered
    assert.equal(ledger.connectedSince(marker), 0, 'created is not connected: Envoy may close a socket at accept without counting it');
    answered();
    answered();
    assert.equal(ledger.connectedSince(marker), 1, 'answered once, counted once');
    assert.equal(ledger.connectedSince(0), 2, 'and the one before the marker');
  });

  test('keeps the latest numbers only: a long-lived sidecar holds a bounded ledger, and old markers count low, never high', () => {
    const ledger = new OwnConnectionLedger();
    for (let index = 0; index < 5_000; index += 1) ledger.created()();
    assert.ok(ledger.connectedSince(0) <= 1_024, `at most 1,024 kept, counted ${ledger.connectedSince(0)}`);
    assert.equal(ledger.connectedSince(4_990), 10, 'the latest are all there');
  });
});
