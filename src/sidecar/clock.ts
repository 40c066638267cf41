/** Time, injected into the drain so that tests can watch it and the production code reads the real one. */
import { setTimeout as sleepFor } from 'node:timers/promises';

export interface Clock {
  /** Milliseconds since the epoch. */
  now(): number;
  /** Resolves after `ms`, or rejects as soon as `signal` aborts. */
  sleep(ms: number, signal: AbortSignal): Promise<void>;
}

export const systemClock: Clock = {
  now: () => Date.now(),
  sleep: async (ms, signal) => {
    await sleepFor(Math.max(0, ms), undefined, { signal });
  },
};
