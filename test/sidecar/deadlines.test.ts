/** The guard's deadlines (src/sidecar/server/deadlines.ts), on a fake monotonic clock and Node's timers mocked. */
import assert from 'node:assert/strict';
import type { Socket } from 'node:net';
import { describe, mock, test, type TestContext } from 'node:test';
import { Deadlines } from '../../src/sidecar/server/deadlines.js';

/** Stand-ins for sockets: Deadlines only keeps them as keys and hands them back. */
const sockets = (count: number): Socket[] => Array.from({ length: count }, () => ({}) as Socket);

function fakeTime(t: TestContext, limitMs: number) {
  mock.timers.enable({ apis: ['setTimeout'] });
  t.after(() => mock.timers.reset());
  const clock = { ms: 0, now: () => clock.ms };
  const expired: Socket[] = [];
  const deadlines = new Deadlines(limitMs, (socket) => expired.push(socket), clock);
  const advance = (ms: number): void => {
    clock.ms += ms;
    mock.timers.tick(ms);
  };
  return { deadlines, expired, advance };
}

describe('Deadlines: sockets oldest first, one timer for the oldest', () => {
  test('each socket expires limitMs after its clock started, oldest first, and is removed', (t) => {
    const { deadlines, expired, advance } = fakeTime(t, 1_000);
    const [a, b, c] = sockets(3) as [Socket, Socket, Socket];
    deadlines.start(a);
    advance(300);
    deadlines.start(b);
    advance(300);
    deadlines.start(c);
    assert.equal(deadlines.oldest(), a);
    advance(399);
    assert.deepEqual(expired, []);
    advance(1);
    assert.deepEqual(expired, [a]);
    assert.equal(deadlines.has(a), false);
    assert.equal(deadlines.oldest(), b);
    advance(600);
    assert.deepEqual(expired, [a, b, c]);
    assert.equal(deadlines.size, 0);
  });

  test('starting a socket again restarts its clock and makes it the newest; a deleted one never expires', (t) => {
    const { deadlines, expired, advance } = fakeTime(t, 1_000);
    const [a, b, c] = sockets(3) as [Socket, Socket, Socket];
    deadlines.start(a);
    deadlines.start(b);
    deadlines.start(c);
    advance(500);
    deadlines.start(a);
    deadlines.delete(b);
    assert.deepEqual(deadlines.sockets(), [c, a]);
    advance(500);
    assert.deepEqual(expired, [c]);
    advance(500);
    assert.deepEqual(expired, [c, a]);
  });

  test('stop cancels the timer; a lifted bound (Infinity) never arms one', (t) => {
    const { deadlines, expired, advance } = fakeTime(t, 1_000);
    const [a] = sockets(1) as [Socket];
    deadlines.start(a);
    deadlines.stop();
    advance(10_000);
    assert.deepEqual(expired, []);

    const lifted: Socket[] = [];
    const unbounded = new Deadlines(Infinity, (socket) => lifted.push(socket), { now: () => 0 });
    unbounded.start(a);
    advance(1_000_000);
    assert.deepEqual(lifted, []);
    assert.equal(unbounded.size, 1);
  });
});
