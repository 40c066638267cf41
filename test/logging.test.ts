/** The webhook's log lines carry the time pino's own isoTime would write, at each millisecond. */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import { pino } from 'pino';
import { loggerOptions } from '../src/logging.js';

test('each line has the ISO time of its own millisecond, as pino.stdTimeFunctions.isoTime writes it', (t) => {
  const lines: string[] = [];
  const logger = pino(loggerOptions('info', 'webhook'), { write: (line: string) => lines.push(line) });
  const times = [1_767_225_600_123, 1_767_225_600_123, 1_767_225_600_124, 1_767_225_601_000, 1_767_225_600_123];
  let now = 0;
  t.mock.method(Date, 'now', () => now);
  const expected: string[] = [];
  for (const time of times) {
    now = time;
    expected.push(pino.stdTimeFunctions.isoTime());
    logger.info('tick');
  }
  assert.deepEqual(
    lines.map((line) => `,"time":"${(JSON.parse(line) as { time: string }).time}"`),
    expected,
  );
});
