import type { Clock } from '../../src/clock.js';

/**
 * Virtual time: `sleep` resolves when every other pending timer due earlier has fired, without waiting.
 * Time advances only once the code under test is blocked on sleeps (checked on setImmediate, after every
 * pending promise callback), so timing assertions are exact on any machine, however loaded.
 */
export class VirtualClock implements Clock {
  private nowMs = 1_000_000;
  /** Wall clock minus monotonic clock: `stepWall` moves it, as NTP stepping or `date -s` would. */
  private wallOffsetMs = Date.parse('2026-01-01T00:00:00Z') - 1_000_000;
  private readonly timers: { at: number; seq: number; fire: () => void }[] = [];
  private seq = 0;
  private advancing = false;

  now(): number {
    return this.nowMs;
  }

  wallNow(): number {
    return this.nowMs + this.wallOffsetMs;
  }

  /** Steps the wall clock by `ms` (negative: backwards); monotonic time, and so every timer, is unmoved. */
  stepWall(ms: number): void {
    this.wallOffsetMs += ms;
  }

  sleep(ms: number, signal: AbortSignal): Promise<void> {
    return new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = (): void => {
        const index = this.timers.indexOf(timer);
        if (index !== -1) this.timers.splice(index, 1);
        reject(signal.reason);
      };
      // The drain's signals outlive many sleeps: a fired timer must not leave its listener behind.
      const fire = (): void => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      };
      const timer = { at: this.nowMs + Math.max(0, ms), seq: this.seq++, fire };
      this.timers.push(timer);
      signal.addEventListener('abort', onAbort, { once: true });
      this.advanceSoon();
    });
  }

  private advanceSoon(): void {
    if (this.advancing) return;
    this.advancing = true;
    setImmediate(() => {
      this.advancing = false;
      this.timers.sort((a, b) => a.at - b.at || a.seq - b.seq);
      const next = this.timers.shift();
      if (next === undefined) return;
      this.nowMs = Math.max(this.nowMs, next.at);
      next.fire();
      if (this.timers.length > 0) this.advanceSoon();
    });
  }
}

