/**
 * Time, for every part of the sidecar and for the self-managed certificate loop: one abstraction, so that a reader
 * finds in one place why a wall-clock step cannot move a deadline. `now()` is monotonic (the kernel's
 * CLOCK_MONOTONIC, shared by every process on a node): every duration, deadline and interval is measured on it.
 * `wallNow()` is the wall clock, for timestamps shown to people and nothing else. Production reads the real clocks;
 * tests drive a virtual one or fire timers by hand. Why: docs/design.md#what-the-drain-promises (after the promises).
 */
export interface Clock {
  /** Monotonic milliseconds from an arbitrary origin: for durations, deadlines and intervals only. */
  now(): number;
  /** Milliseconds since the epoch: for timestamps shown to people only. */
  wallNow(): number;
  /** Resolves after `ms`, or rejects as soon as `signal` aborts: every loop that sleeps can be stopped at once. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/** CLOCK_MONOTONIC in milliseconds (libuv's uv_hrtime). */
const monotonicNow = (): number => Number(process.hrtime.bigint()) / 1e6;

/**
 * Plain timers rather than node:timers/promises, one module fewer for every sidecar to load at start. Node's
 * timers run on libuv's monotonic clock too. An aborted sleep rejects with the signal's reason: callers check
 * their signal, never the error.
 */
export const systemClock: Clock = {
  now: monotonicNow,
  wallNow: () => Date.now(),
  sleep: (ms, signal) =>
    new Promise((resolve, reject) => {
      if (signal.aborted) return reject(signal.reason);
      const onAbort = (): void => {
        clearTimeout(timer);
        reject(signal.reason);
      };
      // Signals outlive many sleeps (a drain's, the supervisor's): a timer that fired takes its listener away.
      const timer = setTimeout(() => {
        signal.removeEventListener('abort', onAbort);
        resolve();
      }, Math.max(0, ms));
      signal.addEventListener('abort', onAbort, { once: true });
    }),
};

/**
 * The wall-clock ISO timestamp of a monotonic instant, for people: read against the wall clock now, so that
 * a step of the wall clock shifts shown times but never the order or length of anything measured.
 */
export function isoAt(clock: Clock, monotonicMs: number): string {
  return new Date(clock.wallNow() - (clock.now() - monotonicMs)).toISOString();
}

/** isoAt, or null for an instant that has not happened. */
export function isoAtOrNull(clock: Clock, monotonicMs: number | undefined): string | null {
  return monotonicMs === undefined ? null : isoAt(clock, monotonicMs);
}

/**
 * A timer owned by the code that waits on it, cleared when that code is done: not AbortSignal.timeout, whose
 * timer Node 20 may collect before it fires when nothing else holds the signal, and which leaks a little
 * each time it is composed with a long-lived signal by AbortSignal.any.
 */
export class OwnedTimer {
  private timer: NodeJS.Timeout | undefined;

  constructor(ms: number, onFire: () => void) {
    this.timer = setTimeout(() => {
      this.timer = undefined;
      onFire();
    }, Math.max(0, ms));
  }

  clear(): void {
    clearTimeout(this.timer);
    this.timer = undefined;
  }
}

/** `promise`, or `fallback` after `ms`, whichever first; the timer is owned and cleared here. */
export function within<T>(promise: Promise<T>, ms: number, fallback: T): Promise<T> {
  let timer: OwnedTimer | undefined;
  const late = new Promise<T>((resolve) => {
    timer = new OwnedTimer(ms, () => resolve(fallback));
  });
  return Promise.race([promise, late]).finally(() => timer?.clear());
}
