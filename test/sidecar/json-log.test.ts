/**
 * The sidecar's own logger writes exactly the lines pino writes with the webhook's options (src/logging.ts):
 * same bytes for generated fields and messages, at every level, with Date.now fixed for both.
 */
import assert from 'node:assert/strict';
import { test } from 'node:test';
import fc from 'fast-check';
import { pino } from 'pino';
import { loggerOptions } from '../../src/logging.js';
import { createJsonLog } from '../../src/sidecar/json-log.js';

const LEVELS = ['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent'] as const;

/** Strings pino escapes in different ways: quotes, backslashes, control characters, long ones, non-ASCII, lone surrogates. */
const text = fc.oneof(
  fc.string({ maxLength: 20 }),
  fc.string({ unit: 'binary', maxLength: 20 }),
  fc.string({ minLength: 90, maxLength: 120 }),
  fc.constantFrom('', '"', '\\', 'a"b\\c', '\n', 'tab\there', '\u2028', '\ud800', 'x\udc00y', 'é', 'listening on [::]:8090'),
);
const value = fc.oneof(
  text,
  fc.double(),
  fc.constantFrom(Number.NaN, Number.POSITIVE_INFINITY, -0, 1e21, 0.1),
  fc.integer(),
  fc.boolean(),
  fc.constant(null),
  fc.constant(undefined),
  fc.array(fc.oneof(text, fc.integer(), fc.constant(null)), { maxLength: 3 }),
  fc.dictionary(text, fc.oneof(text, fc.integer(), fc.boolean()), { maxKeys: 3 }),
);
const fields = fc.dictionary(fc.oneof(text, fc.constantFrom('event', 'level', 'msg', 'time', 'component')), value, { maxKeys: 6 });

test('createJsonLog writes the lines pino writes with the same options', (t) => {
  t.mock.method(Date, 'now', () => 1_767_225_600_123);
  fc.assert(
    fc.property(fc.constantFrom(...LEVELS), fc.constantFrom('info', 'warn', 'error') as fc.Arbitrary<'info' | 'warn' | 'error'>, fields, text, (level, method, logged, message) => {
      const expected: string[] = [];
      const actual: string[] = [];
      pino(loggerOptions(level, 'shutdown-manager'), { write: (line: string) => expected.push(line) })[method](logged, message);
      createJsonLog(level, 'shutdown-manager', { write: (line) => actual.push(line) })[method](logged, message);
      assert.deepEqual(actual, expected);
    }),
    { numRuns: 2000 },
  );
});

test('the sidecar logs the line its log readers expect', () => {
  const lines: string[] = [];
  createJsonLog('info', 'shutdown-manager', { write: (line) => lines.push(line), now: () => Date.UTC(2026, 0, 2, 3, 4, 5, 6) }).info(
    { event: 'listening', port: 8090, listeners: [], drain_inbound_only: false, skipped: undefined },
    'shutdown manager listening on [::]:8090',
  );
  assert.deepEqual(lines, [
    '{"level":"info","time":"2026-01-02T03:04:05.006Z","component":"shutdown-manager","event":"listening","port":8090,"listeners":[],"drain_inbound_only":false,"msg":"shutdown manager listening on [::]:8090"}\n',
  ]);
});

test('an unknown level is refused, as pino refuses it', () => {
  assert.throws(() => createJsonLog('verbose', 'shutdown-manager'), /unknown log level "verbose"/);
  assert.throws(() => createJsonLog('constructor', 'shutdown-manager'), /unknown log level/);
});
