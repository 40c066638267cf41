/**
 * Time, for every loop that waits: the drain, the supervisor's watch for a new Envoy, the start-up probe of
 * Envoy's admin API and the self-managed certificate loop. Production reads the real clock; tests drive a
 * virtual one (test/support/virtual-clock.ts) or fire timers by hand (test/support/manual-timers.ts), so
 * that timing is asserted exactly instead of measured on a busy machine.
 */
import { setTimeout as sleepFor } from 'node:timers/promises';

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects as soon as `signal` aborts: every loop that sleeps can be stopped at once. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: async (ms, signal) => {
    await sleepFor(Math.max(0, ms), undefined, { signal });
  },
};
