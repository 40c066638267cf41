/**
 * Time, for every loop that waits: the drain, the supervisor's watch for a new Envoy, the start-up probe of
 * Envoy's admin API and the self-managed certificate loop. Production reads the real clock; tests drive a
 * virtual one (test/support/virtual-clock.ts) or fire timers by hand (test/support/manual-timers.ts), so
 * that timing is asserted exactly instead of measured on a busy machine.
 */
export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects as soon as `signal` aborts: every loop that sleeps can be stopped at once. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

/**
 * Plain timers rather than node:timers/promises, one module fewer for every sidecar to load at start. An
 * aborted sleep rejects with the signal's reason: callers check their signal, never the error.
 */
export const systemClock: Clock = {
  now: () => Date.now(),
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
