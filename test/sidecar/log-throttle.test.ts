import assert from 'node:assert/strict';
import { describe, mock, test } from 'node:test';
import { LogThrottle, Once, OnChange, RateLimit } from '../../src/sidecar/log-throttle.js';

/** A LogThrottle whose flush logs the events noted since its last line, as the server's two logs do. */
function burstLog(periodMs: number) {
  const lines: { atMs: number; events: number }[] = [];
  let pending = 0;
  let nowMs = 0;
  const throttle = new LogThrottle(periodMs, () => {
    if (pending === 0) return false;
    lines.push({ atMs: nowMs, events: pending });
    pending = 0;
    return true;
  });
  return {
    lines,
    throttle,
    event: () => {
      pending += 1;
      throttle.noted();
    },
    tick: (ms: number) => {
      nowMs += ms;
      mock.timers.tick(ms);
    },
  };
}

describe('LogThrottle: a burst at once, then a summary per period, and a last one at stop', () => {
  test('the first event is logged at once, the rest of a burst as one summary at the end of each period', (t) => {
    mock.timers.enable({ apis: ['setTimeout'] });
    t.after(() => mock.timers.reset());
    const { lines, throttle, event, tick } = burstLog(1_000);
    event();
    assert.deepEqual(lines, [{ atMs: 0, events: 1 }], 'at once');
    for (let i = 0; i < 5; i += 1) event();
    tick(999);
    assert.equal(lines.length, 1, 'nothing more within the period');
    tick(1);
    assert.deepEqual(lines.at(-1), { atMs: 1_000, events: 5 }, 'one summary at its end, even with no event after it');
    event();
    event();
    tick(1_000);
    assert.deepEqual(lines.at(-1), { atMs: 2_000, events: 2 });
    throttle.stop();
  });

  test('a period without events ends the burst: the next event is logged at once again', (t) => {
    mock.timers.enable({ apis: ['setTimeout'] });
    t.after(() => mock.timers.reset());
    const { lines, throttle, event, tick } = burstLog(1_000);
    event();
    tick(1_000); // a quiet period: its flush finds nothing, and no timer is left
    tick(5_000);
    assert.equal(lines.length, 1);
    event();
    assert.deepEqual(lines.at(-1), { atMs: 6_000, events: 1 }, 'at once, not at the end of a period');
    throttle.stop();
  });

  test('stop logs what is still unreported, and later events one line each', (t) => {
    mock.timers.enable({ apis: ['setTimeout'] });
    t.after(() => mock.timers.reset());
    const { lines, throttle, event, tick } = burstLog(1_000);
    event();
    event();
    event();
    tick(10);
    throttle.stop();
    assert.deepEqual(lines.at(-1), { atMs: 10, events: 2 }, 'the final summary');
    tick(5_000);
    assert.equal(lines.length, 2, 'no timer left behind');
    event();
    event();
    assert.deepEqual(lines.slice(2), [
      { atMs: 5_010, events: 1 },
      { atMs: 5_010, events: 1 },
    ]);
  });
});

describe('RateLimit: at most one line per period and key, with the events since the last', () => {
  const clockAt = () => {
    const clock = { ms: 0, now: () => clock.ms };
    return clock;
  };

  test("a key's first event passes at once; later ones once the period has passed since its last line, with their count", () => {
    const clock = clockAt();
    const limit = new RateLimit(60_000, clock);
    assert.equal(limit.any, false);
    assert.equal(limit.note(), 1, 'the first event, at once');
    assert.equal(limit.any, true);
    clock.ms = 10_000;
    assert.equal(limit.note(), undefined);
    clock.ms = 59_999;
    assert.equal(limit.note(), undefined);
    clock.ms = 60_000;
    assert.equal(limit.note(), 3, 'the two held back and this one');
    clock.ms = 60_001;
    assert.equal(limit.note(), undefined);
  });

  test('keys are limited apart', () => {
    const clock = clockAt();
    const limit = new RateLimit(30_000, clock);
    assert.equal(limit.note('timeout:Error'), 1);
    assert.equal(limit.note('refused:AdminRefusedError'), 1);
    assert.equal(limit.note('timeout:Error'), undefined);
    clock.ms = 30_000;
    assert.equal(limit.note('timeout:Error'), 2);
  });

  test('reset ends a run: it tells the events since the last line (undefined with no line), and the next event passes at once', () => {
    const clock = clockAt();
    const limit = new RateLimit(60_000, clock);
    assert.equal(limit.reset(), undefined, 'nothing logged: nothing to say');
    limit.note();
    limit.note();
    limit.note();
    assert.equal(limit.reset(), 2, 'two events after the line');
    assert.equal(limit.any, false);
    clock.ms = 1;
    assert.equal(limit.note(), 1, 'at once, though within the period of the last line');
    assert.equal(limit.reset(), 0);
  });
});

describe('Once and OnChange', () => {
  test('Once is true at the first call for a key only', () => {
    const once = new Once<'a' | 'b'>();
    assert.equal(once.first('a'), true);
    assert.equal(once.first('a'), false);
    assert.equal(once.first('b'), true);
    assert.equal(once.first('b'), false);
  });

  test('OnChange is true for a value other than the last one seen, the initial one included', () => {
    const change = new OnChange('');
    assert.equal(change.changed(''), false, 'the initial value is taken as seen');
    assert.equal(change.changed('x,y'), true);
    assert.equal(change.changed('x,y'), false);
    assert.equal(change.changed('x'), true);
    assert.equal(change.changed('x,y'), true, 'again after another value');
  });
});
