/**
 * LoopTimers driven by the test: the self-managed loop's timers fire only when the test says so, and time
 * jumps to them, so the tests check the delays chosen exactly instead of measuring them on a busy machine.
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { LoopTimers, TimerHandle } from '../../src/certs/self-managed.js';

interface Pending {
  readonly callback: () => void;
  readonly delayMs: number;
}

export class ManualTimers implements LoopTimers {
  private clock = 0;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();

  now(): number {
    return this.clock;
  }

  schedule(callback: () => void, delayMs: number): TimerHandle {
    const id = ++this.nextId;
    this.pending.set(id, { callback, delayMs });
    return { cancel: () => this.pending.delete(id) };
  }

  /** How many timers are scheduled and not yet fired or cancelled. */
  get scheduled(): number {
    return this.pending.size;
  }

  /** Waits (in real time, for the requests of a check in progress) until the loop schedules its next timer; its delay. */
  async next(limitMs = 5_000): Promise<number> {
    const deadline = performance.now() + limitMs;
    while (this.pending.size === 0) {
      if (performance.now() > deadline) assert.fail(`no timer scheduled within ${limitMs} ms`);
      await sleep(5);
    }
    return this.only()[1].delayMs;
  }

  /** Moves the clock to the one scheduled timer and runs it. */
  fire(): void {
    const [id, { callback, delayMs }] = this.only();
    this.pending.delete(id);
    this.clock += delayMs;
    callback();
  }

  private only(): [number, Pending] {
    assert.equal(this.pending.size, 1, 'the loop keeps exactly one timer');
    return [...this.pending][0] as [number, Pending];
  }
}
