/**
 * The token that guards /shutdown and /wait (src/sidecar/server/shutdown-token.ts): the check, and the lines of
 * the refusals. Through the server, with their counters and a flood: server-bounds.test.ts.
 */
import assert from 'node:assert/strict';
import { describe, mock, test } from 'node:test';
import { bearerCheck, RefusalLog } from '../../src/sidecar/server/shutdown-token.js';
import { MemoryLog } from '../support/memory-log.js';

describe('bearerCheck', () => {
  test('without a token, every call is let through', () => {
    const authorized = bearerCheck(undefined);
    assert.equal(authorized(undefined), true);
    assert.equal(authorized('Bearer anything'), true);
  });

  test('with a token, only "Bearer <token>" exactly', () => {
    const authorized = bearerCheck('s3cr3t');
    assert.equal(authorized('Bearer s3cr3t'), true);
    for (const header of [undefined, '', 's3cr3t', 'Bearer s3cr3', 'Bearer s3cr3t2', 'bearer s3cr3t', 'Basic s3cr3t']) {
      assert.equal(authorized(header), false, String(header));
    }
  });
});

describe('RefusalLog', () => {
  test('the first refusal at once, naming the caller; then one line per period with the count, the total and the last caller', (t) => {
    mock.timers.enable({ apis: ['setTimeout'] });
    t.after(() => mock.timers.reset());
    const log = new MemoryLog();
    const refusals = new RefusalLog(log, 60_000);
    refusals.refused('/shutdown', '10.0.0.7');
    assert.deepEqual(
      log.lines.map((line) => [line.level, line.fields, line.message]),
      [['info', { event: 'shutdown_refused', path: '/shutdown', remote: '10.0.0.7', refused: 1, total: 1 }, '/shutdown without the right token refused (from 10.0.0.7)']],
    );
    refusals.refused('/wait', undefined);
    refusals.refused('/shutdown', '10.0.0.8');
    mock.timers.tick(60_000);
    assert.deepEqual(log.lines.at(-1)?.fields, { event: 'shutdown_refused', path: '/shutdown', remote: '10.0.0.8', refused: 2, total: 3 });
    assert.equal(
      log.lines.at(-1)?.message,
      '2 calls of /shutdown or /wait without the right token refused since the last such line (3 in all); the last: /shutdown from 10.0.0.8',
    );
    refusals.refused('/wait', undefined);
    refusals.stop();
    assert.deepEqual(log.lines.at(-1)?.fields, { event: 'shutdown_refused', path: '/wait', remote: 'unknown', refused: 1, total: 4 });
    assert.equal(refusals.total, 4);
  });
});
