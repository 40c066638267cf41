/**
 * A Clock whose sleeps end only when the test says so, time jumping to them: the self-managed loop's delays
 * are checked exactly instead of measured on a busy machine. (test/support/virtual-clock.ts is the other
 * fake of the same Clock: it advances by itself whenever the code under test is blocked on sleeps.)
 */
import assert from 'node:assert/strict';
import { setTimeout as sleep } from 'node:timers/promises';
import type { Clock } from '../../src/clock.js';

interface Pending {
  readonly wake: () => void;
  readonly delayMs: number;
}

export class ManualTimers implements Clock {
  private clock = 0;
  private nextId = 0;
  private readonly pending = new Map<number, Pending>();

  now(): number {
    return this.clock;
  }

  wallNow(): number {
    return Date.parse('2026-01-01T00:00:00Z') + this.clock;
  }

  sleep(delayMs: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const id = ++this.nextId;
      const onAbort = (): void => {
        this.pending.delete(id);
        reject(signal.reason);
      };
      signal.addEventListener('abort', onAbort, { once: true });
      this.pending.set(id, {
        delayMs,
        wake: () => {
          signal.removeEventListener('abort', onAbort);
          resolve();
        },
      });
    });
  }

  /** How many sleeps are pending (neither ended nor aborted). */
  get scheduled(): number {
    return this.pending.size;
  }

  /** Waits (in real time, for the requests of a check in progress) until the loop sleeps again; its delay. */
  async next(limitMs = 5_000): Promise<number> {
    const deadline = performance.now() + limitMs;
    while (this.pending.size === 0) {
      if (performance.now() > deadline) assert.fail(`no timer scheduled within ${limitMs} ms`);
      await sleep(5);
    }
    return this.only()[1].delayMs;
  }

  /** Moves the clock to the one pending sleep and ends it. */
  fire(): void {
    const [id, { wake, delayMs }] = this.only();
    this.pending.delete(id);
    this.clock += delayMs;
    wake();
  }

  private only(): [number, Pending] {
    assert.equal(this.pending.size, 1, 'the loop keeps exactly one timer');
    return [...this.pending][0] as [number, Pending];
  }
}
